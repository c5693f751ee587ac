"""The paper's results table from the runs of `bench.paper.experiments`: OUT/table.md (markdown,
its plot links relative to OUT), OUT/paper.json (every ratio with its numbers), and the table
spliced into the results page between `<!-- paper-table:begin -->` and
`<!-- paper-table:end -->` (its plot links relative to docs/, where the page is)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from collections.abc import Sequence

from bench.paper import live_results
from bench.paper.live_cells import live_cell
from parrot.sim.sweep import point_figures

BEGIN, END = "<!-- paper-table:begin -->", "<!-- paper-table:end -->"


def _load(run_dir: Path) -> tuple[str, Any] | None:
    for kind in ("sweep", "rates", "results"):
        path = run_dir / f"{kind}.json"
        if path.is_file():
            return kind, json.loads(path.read_text())
    return None


def ratio_values(kind: str, data: Any, ratio: Any) -> list[dict[str, Any]]:
    """[{at, value, ours, baseline}] for one Ratio; value None when a side is missing."""
    if kind == "rates":
        ours_entry = data["variants"].get(ratio.ours, {})
        base_entry = data["variants"].get(ratio.baseline, {})
        ours, base = ours_entry.get("sustainable_rate"), base_entry.get("sustainable_rate")
        return [{"at": None, "ours": ours, "baseline": base,
                 "ours_capped": bool(ours_entry.get("capped")),
                 "baseline_capped": bool(base_entry.get("capped")),
                 "value": ours / base if ours is not None and base else None}]
    points: list[dict[str, Any]] = ([{"value": None, "figures": point_figures(data)}]
                                    if kind == "results" else data["points"])
    rows = []
    for point in points:
        if ratio.at and point["value"] not in ratio.at:
            continue
        ours = point["figures"].get(ratio.ours, {}).get(ratio.metric)
        base = point["figures"].get(ratio.baseline, {}).get(ratio.metric)
        if ratio.metric == "per_app_min_speedup":   # already a ratio against the reference
            value, base = ours, None
        else:
            value = base / ours if ours and base is not None else None
        rows.append({"at": point["value"], "ours": ours, "baseline": base, "value": value})
    return rows


def _cell(kind: str, data: Any, rows: list[dict[str, Any]]) -> str:
    def x(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.2f}×"

    if kind == "rates":
        r = rows[0]
        if r["ours"] is None or r["baseline"] is None:
            return "n/a"
        low = "≥" if r["ours_capped"] and not r["baseline_capped"] else ""
        return (f"{low}{x(r['value'])} ({'≥' if r['ours_capped'] else ''}{r['ours']:.1f} vs "
                f"{'≥' if r['baseline_capped'] else ''}{r['baseline']:.1f} req/s)")
    if kind == "results":
        return x(rows[0]["value"])
    field = data["field"]
    return f"{field} " + " · ".join(f"{r['at']}: {x(r['value'])}" for r in rows)


PLOTS = {"sweep": "sweep.png", "rates": "rates.png", "results": "latency_cdf.png"}


def _plot(run_dir: Path, kind: str) -> str | None:
    name = PLOTS[kind]
    return name if (run_dir / name).is_file() else None


def cited_plot(run_dir: Path) -> str | None:
    """The plot the table links for one experiment's run (None: no run or no plot)."""
    loaded = _load(run_dir)
    return _plot(run_dir, loaded[0]) if loaded else None


def write_report(out: Path, experiments: Sequence[Any], seconds: dict[str, float],
                 wall_s: float, profile: str | None = None, calibrate: bool = False) -> str:
    """calibrate: the runs had their caps calibrated (paper.experiment_calibration),
    which the commands say; the live column is then left out (the live runs used the
    paper's caps)."""
    from bench.paper.experiments import PROFILE, experiment_calibration

    def extra(e: Any) -> tuple[str, ...]:
        return experiment_calibration(e, profile or PROFILE) if calibrate else ()

    lines = ["| experiment | paper | ours, simulated (one run per ratio) | ours, live | "
             "plot | command |", "|---|---|---|---|---|---|"]
    own_lines = list(lines)
    summary: dict[str, Any] = {"wall_s": wall_s, "experiments": {}}
    command = (lambda e: e.command(extra=extra(e))) if profile is None else (  # noqa: E731
        lambda e: e.command(str(out), profile, extra(e)))
    # The live column: the published live results beside the simulated ones (docs/results/).
    live = live_results.load(out.parent / "live") if not calibrate else None
    for e in experiments:
        run_dir = out / e.key
        loaded = _load(run_dir)
        cells, record = [], []
        for ratio in e.ratios:
            if loaded is None:
                cells.append(f"{ratio.name}: missing (run failed)")
                continue
            kind, data = loaded
            rows = ratio_values(kind, data, ratio)
            record.append({"name": ratio.name, "ours": ratio.ours, "baseline": ratio.baseline,
                           "metric": ratio.metric, "values": rows})
            cells.append(f"{ratio.name}: {_cell(kind, data, rows)}")
        plot = _plot(run_dir, loaded[0]) if loaded else None
        # The page (docs/RESULTS.md) links from docs/; OUT/table.md from its own folder.
        plot_cells = [f"[{plot}]({base}/{plot})" if plot else "-"
                      for base in (os.path.relpath(run_dir, "docs"), e.key)]
        head = (f"| {e.title} | {e.paper} | {'<br>'.join(cells)} | "
                f"{live_cell(live, e.key) if not calibrate else 'see the main table'} | ")
        lines.append(f"{head}{plot_cells[0]} | `{command(e)}` |")
        own_lines.append(f"{head}{plot_cells[1]} | `{command(e)}` |")
        summary["experiments"][e.key] = {"title": e.title, "paper": e.paper,
                                         "command": command(e), "ratios": record,
                                         "seconds": seconds.get(e.key)}
    table = "\n".join(lines) + "\n"
    (out / "table.md").write_text("\n".join(own_lines) + "\n")
    (out / "paper.json").write_text(json.dumps(summary, indent=2) + "\n")
    return table


def splice_page(page: Path, table: str) -> None:
    """Replace the text between the markers of `page` with `table` (markers must exist)."""
    text = page.read_text()
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{page}: needs the markers {BEGIN} and {END}")
    page.write_text(text[:start + len(BEGIN)] + "\n" + table + text[end:])


def refresh_page(out: Path, page: Path, profile: str | None = None) -> str:
    """Rewrite OUT/table.md and OUT/paper.json from the runs already under `out` (no run),
    with the live column from the committed live results, and splice the table into `page`:
    after a live run is committed, the page shows it without regenerating the simulation."""
    from bench.paper.experiments import EXPERIMENTS, PROFILE

    run = json.loads((out / "run.json").read_text())
    seconds = {k: v["seconds"] for k, v in run["runs"].items()}
    table = write_report(out, EXPERIMENTS, seconds, run["wall_s"], profile or PROFILE,
                         bool(run.get("calibrated")))
    splice_page(page, table)
    return table


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=refresh_page.__doc__)
    parser.add_argument("out", type=Path, help="the paper runs, e.g. docs/results/paper")
    parser.add_argument("--page", type=Path, required=True, help="e.g. docs/RESULTS.md")
    parser.add_argument("--profile", default=None, help="as the runs used (h200_llama7b)")
    args = parser.parse_args()
    print(refresh_page(args.out, args.page, args.profile))
