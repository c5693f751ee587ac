"""One comparison of parrot-bench: run each variant, summarise, plot, and the console table
(shared by the single run in `bench.py` and the multi-run modes in `bench_modes.py`)."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any
from collections.abc import Sequence

from parrot.sim.compare import Settings, Variant, VariantRun, results_json, run_variant
from parrot.sim.workloads.base import AppRecord
from parrot.sim.workloads.registry import WORKLOADS


class Progress:
    """A one-line text progress bar on stderr; it animates (redraws with \\r) only on a
    terminal, elsewhere (a log file, CI) it writes one line per finished variant."""

    def __init__(self, num_variants: int, num_apps: int, quiet: bool,
                 animate: bool | None = None) -> None:
        self.num_variants, self.num_apps, self.quiet = num_variants, num_apps, quiet
        self.animate = sys.stderr.isatty() if animate is None else animate
        self.index, self.label, self.done, self.chats = 0, "", 0, 0
        self.started = time.perf_counter()

    def begin(self, index: int, label: str) -> None:
        self.index, self.label, self.done, self.chats = index, label, 0, 0
        self.started = time.perf_counter()
        self._draw()

    def app(self, record: AppRecord) -> None:
        if record.is_main:
            self.done += 1
        else:
            self.chats += 1
        if record.is_main or self.chats % 25 == 0:
            self._draw()

    def end(self, status: str) -> None:
        self._draw(f" {status} in {time.perf_counter() - self.started:.1f}s\n")

    def _draw(self, tail: str = "") -> None:
        if self.quiet or not (self.animate or tail):
            return
        width = 24
        filled = int(width * self.done / max(self.num_apps, 1))
        chats = f" +{self.chats} chats" if self.chats else ""
        sys.stderr.write(f"{chr(13) if self.animate else ''}"
                         f"[{self.index}/{self.num_variants}] {self.label:<32} "
                         f"[{'#' * filled}{'.' * (width - filled)}] "
                         f"{self.done}/{self.num_apps} apps{chats}{tail}")
        sys.stderr.flush()


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def format_table(results: dict[str, Any]) -> str:
    head = ("variant", "status", "apps", "mean s", "p50 s", "p99 s", "s/out-tok",
            "tok/s", "prefix hit", "speedup")
    rows = [head]
    for label, v in results["variants"].items():
        lat = v["e2e_latency_s"]
        norm = (v.get("normalized_latency_s_per_token") or {}).get("mean")
        rate = (v.get("throughput") or {}).get("output_tokens_per_s")
        hit = v.get("prefix_hit_rate")
        rows.append((label, v["status"], _fmt(v.get("num_apps")), _fmt(lat["mean"]),
                     _fmt(lat["p50"]), _fmt(lat["p99"]), _fmt(norm, 4), _fmt(rate, 1),
                     "-" if hit is None else f"{hit:.0%}",
                     _fmt(results["speedup_vs_reference"][label]) + "x"
                     if results["speedup_vs_reference"][label] else "-"))
        bg = v.get("background")
        if bg:
            bl = bg["e2e_latency_s"]
            bn = bg["normalized_latency_s_per_token"]["mean"]
            rows.append(("  background chat", "", _fmt(bg["num_apps"]), _fmt(bl["mean"]),
                         _fmt(bl["p50"]), _fmt(bl["p99"]), _fmt(bn, 4), "", "", ""))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                       for i, (cell, w) in enumerate(zip(row, widths))) for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    title = (f"{results['workload']} ({results['mode']}, seed {results['seed']}); "
             f"speedup = mean E2E of {results['reference']} / mean E2E")
    return "\n".join([title, *lines])


def format_failures(results: dict[str, Any]) -> str:
    """Why each variant that is not `ok` failed, one line each: a status alone ("error") says
    nothing a user can act on."""
    lines = [f"{label}: {v['status']}: {v.get('error', 'no detail')}"
             for label, v in results["variants"].items() if v["status"] != "ok"]
    return "\n".join(["", "failed variants:", *lines]) if lines else ""


def run_comparison(settings: Settings, variants: Sequence[Variant], reference: Variant,
                   out: Path, *, quiet: bool, plots: bool) -> tuple[dict[str, Any], bool]:
    """Run every variant, write out/results.json, out/table.txt and the plots."""
    out.mkdir(parents=True, exist_ok=True)
    num_main = WORKLOADS[settings.workload].num_main_apps(settings.workload_spec)
    progress = Progress(len(variants), num_main, quiet)
    runs: list[VariantRun] = []
    for i, variant in enumerate(variants, 1):
        progress.begin(i, variant.label)
        run = run_variant(settings, variant, on_app=progress.app)
        progress.end(run.status)
        runs.append(run)
    results = results_json(settings, runs, reference)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "table.txt").write_text(format_table(results) + "\n")
    if plots:
        _plots(settings, runs, out)
    return results, all(r.status == "ok" for r in runs)


def _plots(settings: Settings, runs: list[VariantRun], out: Path) -> None:
    from parrot.sim.plots import PlotsUnavailableError, latency_cdf, require_matplotlib, timeline

    try:
        require_matplotlib()
    except PlotsUnavailableError as exc:  # the JSON and table are written already
        print(str(exc), file=sys.stderr)
        return
    ok = [r for r in runs if r.result is not None]
    title = f"{settings.workload} ({'live' if settings.live else 'sim'})"
    # A failed application has no latency: the legend says how many are missing from a curve,
    # and a variant with none to draw is named in the title, so a failure is never silent.
    curves = [(_failed_label(r), r.records) for r in ok]
    missing = [f"{r.variant.label}: {r.status}" for r in runs
               if r.result is None or all(rec.error for rec in r.records if rec.is_main)]
    if missing:
        title += "\nnot drawn (no finished application): " + "; ".join(missing)
    latency_cdf(curves, out / "latency_cdf.png", title)
    for r in ok:
        name = r.variant.label.replace(":", "_").replace(".", "_").replace("/", "_")
        engines = [e["name"] for e in r.result.engines if "name" in e]  # type: ignore[union-attr]
        timeline(r.variant.label, r.records, out / f"timeline_{name}.png", title, engines)


def _failed_label(run: VariantRun) -> str:
    failed = sum(1 for r in run.records if r.error)
    return f"{run.variant.label} ({failed} failed)" if failed else run.variant.label
