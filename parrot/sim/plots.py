"""PNG plots of a comparison (matplotlib, Agg backend; imported only when plotting).

matplotlib comes with the `bench` extra; without it `require_matplotlib()` raises
`PlotsUnavailableError` whose message is the one line a user needs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from collections.abc import Sequence

from parrot.sim.workloads.base import AppRecord, CallRecord

KIND_COLORS = {"chain_summary": "tab:blue", "map_reduce": "tab:green", "chat": "tab:gray"}
MAX_BARS = 20_000  # keep huge runs plottable; the earliest calls are drawn


class PlotsUnavailableError(RuntimeError):
    """matplotlib is not installed."""


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PlotsUnavailableError(
            "plots skipped: matplotlib is not installed; install the bench extra: "
            "pip install 'parrot-serve[bench]'") from None


def _pyplot():
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def cdf_points(values: Sequence[float]) -> tuple[list[float], list[float]]:
    """Step points of an empirical CDF from (0, 0): flat at zero until the first value, so a
    one-application run is a visible step rather than a lone point at (x1, 1)."""
    ordered = sorted(values)
    return [0.0, *ordered], [0.0, *((k + 1) / len(ordered) for k in range(len(ordered)))]


def timeline_rows(records: Sequence[AppRecord], engines: Sequence[str] = ()) -> list[str]:
    """The timeline's rows: every engine given and every engine a call ran on, in order."""
    used = {c.engine for r in records for c in r.calls if c.engine}
    return sorted({*engines, *used}, key=_engine_order)


Bar = tuple[CallRecord, tuple[str, float, float]]   # a call and (engine, dispatched, finished)


def timeline_bars(records: Sequence[AppRecord]) -> list[Bar]:
    """The timeline's bars in dispatch order (the first MAX_BARS). A call has no bar when it
    has no engine or timestamp to draw: never dispatched (failed upstream, or still queued
    when its app failed) or still running when its app failed and the graph was read."""
    bars = [(c, (c.engine, c.dispatched, c.finished)) for r in records for c in r.calls
            if c.engine and c.dispatched is not None and c.finished is not None]
    bars.sort(key=lambda bar: bar[1][1])
    return bars[:MAX_BARS]


def timeline_lanes(bars: Sequence[Bar], engines: Sequence[str]) -> tuple[list[str], list[int]]:
    """One row per concurrent call slot of each engine (calls that overlap in time on one
    engine get rows of their own, so a batch shows as a stack of bars, not one solid block):
    the row labels (`engine`, then `engine #2`, ...; an engine without calls keeps its one
    row) and each bar's row. Greedy interval partitioning in dispatch order: a call takes the
    engine's first lane free by its dispatch, so the rows are as few as the peak concurrency."""
    lanes: dict[str, list[float]] = {e: [] for e in engines}   # each lane's last finish
    placed: list[tuple[str, int]] = []
    for _, (engine, dispatched, finished) in bars:
        ends = lanes.setdefault(engine, [])
        lane = next((i for i, end in enumerate(ends) if end <= dispatched), len(ends))
        if lane == len(ends):
            ends.append(finished)
        else:
            ends[lane] = finished
        placed.append((engine, lane))
    labels: list[str] = []
    first_row: dict[str, int] = {}
    for engine in sorted(lanes, key=_engine_order):
        first_row[engine] = len(labels)
        labels += [engine if i == 0 else f"{engine} #{i + 1}"
                   for i in range(max(1, len(lanes[engine])))]
    return labels, [first_row[engine] + lane for engine, lane in placed]


def latency_cdf(runs: Sequence[tuple[str, Sequence[AppRecord]]], path: Path,
                title: str) -> None:
    """CDF of the main applications' end-to-end latency (and background chat, dashed)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (label, records) in enumerate(runs):
        color = f"C{i}"
        for is_main, style in ((True, "-"), (False, "--")):
            values = sorted(r.latency_s for r in records
                            if r.is_main == is_main and r.error is None)
            if not values:
                continue
            xs, ys = cdf_points(values)
            name = label if is_main else f"{label} (background chat)"
            ax.step(xs, ys, style, where="post", color=color, label=name)
            ax.plot(values, ys[1:], "o", color=color, markersize=3)
    ax.set_xlabel("end-to-end latency per application (s)")
    ax.set_ylabel("fraction of applications")
    ax.set_ylim(0, 1.02)
    ax.set_xlim(left=0)
    _finish(plt, fig, ax, path, title)


def timeline(label: str, records: Sequence[AppRecord], path: Path, title: str,
             engines: Sequence[str] = ()) -> None:
    """One row per engine slot (`timeline_lanes`: every engine in `engines`, also those that
    got no call, and a row more for each call running beside others); a bar per call from
    dispatch to finish. Several main applications get a colour each (the legend names them,
    up to ten; the colours repeat past ten), one main application the colour of its kind;
    background chats are faint; a hatched bar ran as THROUGHPUT."""
    from matplotlib.patches import Patch

    plt = _pyplot()
    bars = timeline_bars(records)
    rows, lanes = timeline_lanes(bars, timeline_rows(records, engines))
    origin = min((r.started for r in records), default=0.0)
    main_ids = sorted({r.app_id for r in records if r.is_main})
    shade = {app: i for i, app in enumerate(main_ids)}
    per_app = len(main_ids) > 1
    height = max(2.5, min(0.3 * len(rows) + 1.5, 24))
    fig, ax = plt.subplots(figsize=(11, height))
    seen: set[str] = set()
    hatched = False
    for (call, (_, dispatched, finished)), row in zip(bars, lanes):
        is_main = call.app_id in shade
        color = KIND_COLORS.get(call.kind, "tab:orange")
        key = call.kind if not is_main else f"{call.kind} application"
        if is_main and per_app:
            color = plt.get_cmap("tab10")(shade[call.app_id] % 10)
            key = call.app_id if len(main_ids) <= 10 else (
                f"{len(main_ids)} {call.kind} applications, a colour each (repeating)")
        throughput = call.criterion == "throughput"
        hatched |= throughput
        ax.barh(row, finished - dispatched, left=dispatched - origin, height=0.7,
                color=color, alpha=0.85 if is_main else 0.35, edgecolor="black",
                linewidth=0.3, hatch="//" if throughput else None,
                label=None if key in seen else key)
        seen.add(key)
    if hatched:
        ax.barh(0, 0, color="white", edgecolor="black", hatch="//",
                label="hatched: ran as THROUGHPUT")
    ax.set_yticks(range(len(rows)), rows, fontsize=6 if len(rows) > 24 else 8)
    ax.set_ylim(len(rows) - 0.5, -0.5)   # the first engine's first slot on top
    ax.set_xlabel("time since the run started (s)")
    ax.set_title(f"{title}: {label}")
    if seen:
        handles, names = ax.get_legend_handles_labels()
        # at the figure's foot: inside the axes it would hide the first rows' last bars
        fig.legend(handles or [Patch()], names, fontsize=7, loc="lower center",
                   ncol=min(4, len(names) or 1))
    ax.grid(axis="x", alpha=0.3)
    rows_of_legend = -(-len(seen | ({"h"} if hatched else set())) // 4) if seen else 0
    fig.tight_layout(rect=(0, (0.1 + 0.18 * rows_of_legend) / height, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _engine_order(name: str) -> tuple[str, int]:
    stem, _, number = name.rpartition("-")
    return (stem, int(number)) if number.isdigit() else (name, 0)


def sweep_plot(summary: dict, path: Path, title: str) -> None:
    """Speedup over the reference of each variant against the swept value."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    points = summary["points"]
    labels = list(points[0]["figures"]) if points else []
    for i, label in enumerate(labels):
        ys = [p["figures"][label]["speedup"] for p in points]
        xs = [p["value"] for p in points]
        kept = [(x, y) for x, y in zip(xs, ys) if y is not None]
        if kept:
            ax.plot(*zip(*kept), "o-", color=f"C{i}", label=label)
    ax.axhline(1.0, color="black", linewidth=0.6)
    ax.set_xlabel(summary["field"])
    ax.set_ylabel(f"speedup vs {summary['reference']}")
    ax.set_ylim(bottom=0)
    _finish(plt, fig, ax, path, title)


def rate_plot(summary: dict, path: Path, title: str) -> None:
    """Mean latency per output token against the request rate, per variant, and the target."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (label, entry) in enumerate(summary["variants"].items()):
        points = sorted((p["rate"], p["normalized_latency_s_per_token"])
                        for p in entry["points"] if p["normalized_latency_s_per_token"])
        if points:
            xs, ys = zip(*points)
            ax.plot(xs, [y * 1000 for y in ys], "o-", color=f"C{i}",
                    label=f"{label}: {'>= ' if entry.get('capped') else ''}"
                          f"{entry['sustainable_rate']:.2f} req/s")
    ax.axhline(summary["target_s_per_token"] * 1000, color="black", linestyle="--",
               linewidth=0.8, label="target")
    ax.set_xscale("log")
    ax.set_yscale("log")
    # Plain numbers on the log axes: a range within one decade otherwise reads 2x10^1-4x10^1.
    from matplotlib.ticker import FuncFormatter

    plain = FuncFormatter(lambda value, _: f"{value:g}")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(plain)
    ax.set_xlabel("request rate (req/s)")
    ax.set_ylabel("mean latency per output token (ms)")
    _finish(plt, fig, ax, path, title, grid_which="both", legend_size=7)


def _finish(plt: Any, fig: Any, ax: Any, path: Path, title: str, *,
            grid_which: str = "major", legend_size: int = 8) -> None:
    """The common end of a line plot: grid, legend, title, saved at 120 dpi, closed."""
    ax.grid(alpha=0.3, which=grid_which)
    ax.legend(fontsize=legend_size)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
