"""What the live paper runs record and print (bench/paper/live_runs.py): each engine's
counters around a run (`EngineStats.counters`) and their log line, results.json and the
table of every run."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any
from collections.abc import Sequence

from parrot.engines.counters import COUNTER_NAMES

log = logging.getLogger(__name__)


def save_results(out: Path, summary: dict[str, Any]) -> str:
    """Write OUT/results.json and OUT/table.txt; returns the table."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(summary, indent=2) + "\n")
    table = live_table(summary)
    (out / "table.txt").write_text(table + "\n")
    return table


async def engine_counters(engines: Sequence[Any]) -> dict[str, dict[str, int]]:
    """Each engine's cumulative counters (every name of COUNTER_NAMES, 0 where the engine does
    not count it: graphs captured while serving, steps, time in steps, tokens); engines that
    do not answer are left out (the figures are diagnostics, never a reason to fail a run)."""
    counts: dict[str, dict[str, int]] = {}
    for launched in engines:
        try:
            stats = await launched.engine.stats()
        except Exception:  # noqa: BLE001 - see the docstring
            continue
        counts[launched.name] = {k: stats.counter(k) for k in COUNTER_NAMES}
    return counts


async def reset_prefix_caches(engines: Sequence[Any]) -> None:
    """Forget each engine's automatic prefix cache (`prefix_caching: true`), so that no run
    starts with the KV the warm-up or the variant before it computed for the same prompts
    (a request-level baseline would reuse it for free). An engine that does not answer is
    left as it is, as for the counters, but said so: the run after it may then find the
    warm-up's prompts cached."""
    for launched in engines:
        try:
            await launched.engine.reset_prefix_cache()
        except Exception as exc:  # noqa: BLE001 - see engine_counters
            log.warning("engine %s: its prefix cache could not be reset (%s); the next run "
                        "may reuse what the one before it computed", launched.name, exc)


def counter_delta(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]
                   ) -> dict[str, dict[str, int]]:
    """What each engine that answered both times counted in between."""
    return {name: {k: v - before[name][k] for k, v in now.items()}
            for name, now in after.items() if name in before}


def engine_tpot_s(per_engine: dict[str, dict[str, int]]) -> float | None:
    """The mean time per output token (after each Generate's first) of the Generates the
    engines finished in a window (`counter_delta`), as they measured it; None when none did
    (or the engines do not count it)."""
    count = sum(c.get("tpot_generates", 0) for c in per_engine.values())
    total_us = sum(c.get("tpot_us_sum", 0) for c in per_engine.values())
    return total_us / count / 1e6 if count else None


def counters_text(per_engine: dict[str, dict[str, int]]) -> str:
    """The log line's part for what each engine did during a run."""
    return "".join(
        f"; {name}: {c['num_steps']} steps ({c['num_graph_steps']} from graphs, "
        f"{c['num_piecewise_steps']} piecewise), {c['step_ms']} ms in steps "
        f"({c['graph_step_ms']} in graph steps, {c['piecewise_step_ms']} in piecewise ones), "
        f"{c['loop_ms']} ms in loop iterations, {c['ahead_hits']} from launch-ahead "
        f"({c['ahead_misses']} wasted), {c['graph_captures_at_runtime']} graphs captured while "
        f"serving ({c['graph_capture_ms_at_runtime']} ms), {c['graph_stopgap_steps']} steps "
        f"on stopgap graphs, {c['jit_compiles_at_runtime']} Triton compilations while serving "
        f"({c['jit_compile_ms_at_runtime']} ms), {c['gc_ms']} ms in garbage collections"
        for name, c in per_engine.items())


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f}"


def live_table(summary: dict[str, Any]) -> str:
    """Mean E2E of the main apps and its ratio to the reference; ms per output token of the
    main apps and of background chat (mixed); the engines' mean TPOT."""
    device = summary.get("device", "H200")   # results before 2026-12-05 ran on H200s only
    lines = [f"live paper runs ({'smoke, tiny model on the CPU' if summary['smoke'] else device}"
             f"; {summary['wall_s']:.0f}s wall{', partial' if summary.get('partial') else ''}"
             "); x = mean E2E of the reference / mean E2E; "
             "ms/tok = mean latency per output token; tpot = the engines' mean time per output "
             "token after the first",
             f"{'experiment':<18} {'variant':<48} {'status':<8} {'mean s':>8} {'x':>7} "
             f"{'ms/tok':>7} {'chat ms/tok':>11} {'tpot ms':>7}"]
    for key, results in summary["experiments"].items():
        if "skipped" in results:
            lines.append(f"{key:<18} {'-':<48} {'skipped':<8}")
            continue
        if "rate_search" in results:   # sustainable rate per variant; x = rate / reference's
            target = results["rate_search"]["target_s_per_token"] * 1000
            for label, v in results["variants"].items():
                if "skipped" in v:
                    lines.append(f"{key:<18} {label:<48} {'skipped':<8}")
                    continue
                x = v["ratio_vs_reference"]
                rate = ("≥" if v["capped"] else "") + f"{v['sustainable_rate']:.2f}"
                lines.append(f"{key:<18} {label:<48} {'rate':<8} {rate:>8} "
                             f"{'-' if x is None else f'{x:.2f}x':>7} req/s at <= {target:.0f} "
                             "ms/token")
            continue
        for label, v in results["variants"].items():
            mean = v["e2e_latency_s"]["mean"]
            x = results["speedup_vs_reference"][label]
            norm = (v.get("normalized_latency_s_per_token") or {}).get("mean")
            chat = ((v.get("background") or {}).get("normalized_latency_s_per_token")
                    or {}).get("mean")
            lines.append(f"{key:<18} {label:<48} {v['status']:<8} "
                         f"{'-' if mean is None else f'{mean:.2f}':>8} "
                         f"{'-' if x is None else f'{x:.2f}x':>7} {_ms(norm):>7} "
                         f"{_ms(chat):>11} {_ms(v.get('engine_tpot_s')):>7}")
    return "\n".join(lines)
