"""Figures of one run: end-to-end latency per application, throughput, prefix hits.

Pure functions of a `RunResult`; the JSON shape they produce is what results.json holds per
variant (see docs/BENCHMARKS.md).
"""

from __future__ import annotations

import math
from typing import Any
from collections.abc import Iterable, Mapping, Sequence

from parrot.sim.workloads.base import AppRecord


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear between closest ranks (numpy's default)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def distribution(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "p50": None, "p99": None}
    return {"mean": sum(values) / len(values), "p50": percentile(values, 50),
            "p99": percentile(values, 99)}


def tpot_against_target(by_engine: Mapping[str, Sequence[float]],
                        target_ms: float | None) -> dict[str, dict[str, Any]]:
    """Per engine: the distribution of its Generates' TPOT (seconds) and, with a per-token
    target (ms), the target and the fraction of its Generates within it."""
    out: dict[str, dict[str, Any]] = {}
    for name, values in sorted(by_engine.items()):
        entry: dict[str, Any] = {**distribution(values), "generates": len(values)}
        if target_ms is not None:
            within = sum(v * 1000 <= target_ms for v in values)
            entry["target_ms"] = target_ms
            entry["within_target"] = within / len(values) if values else None
        out[name] = entry
    return out


def _apps_summary(records: Sequence[AppRecord]) -> dict[str, Any]:
    ok = [r for r in records if r.error is None]
    return {
        "num_apps": len(records),
        "num_failed": len(records) - len(ok),
        "e2e_latency_s": distribution([r.latency_s for r in ok]),
        "normalized_latency_s_per_token": distribution(
            [r.latency_s / r.output_tokens for r in ok if r.output_tokens]),
        "output_tokens": sum(r.output_tokens for r in ok),
    }


def _queue_waits(records: Sequence[AppRecord]) -> dict[str, list[float]]:
    """Each call's wait from ready to dispatch, by criterion. A call never dispatched (failed
    upstream, or still queued when its app failed) has no queue time: it is left out rather
    than counted as zero."""
    waits: dict[str, list[float]] = {}
    for r in records:
        for c in r.calls:
            if c.ready is not None and c.dispatched is not None:
                waits.setdefault(c.criterion or "none", []).append(c.dispatched - c.ready)
    return waits


def prefix_stats(engines: Iterable[dict[str, Any]]) -> dict[str, Any]:
    hits = sum(e.get("prefix_hits", 0) for e in engines)
    misses = sum(e.get("prefix_misses", 0) for e in engines)
    return {"prefix_hits": hits, "prefix_misses": misses,
            "prefix_hit_rate": hits / (hits + misses) if hits + misses else None}


def summarize(records: Sequence[AppRecord], engines: Sequence[dict[str, Any]],
              duration_s: float) -> dict[str, Any]:
    """The per-variant figures: the main applications' latencies first, then chat, engines."""
    main = [r for r in records if r.is_main]
    background = [r for r in records if not r.is_main]
    summary = _apps_summary(main)
    waits = _queue_waits(main)
    summary["queue_s_per_call"] = distribution([w for ws in waits.values() for w in ws])
    # Which calls wait: a policy that holds one objective's calls back shows here first
    # (live multi_agent: the LATENCY reviewers, p99 2.2 s, throughput calls none).
    summary["queue_s_by_criterion"] = {k: distribution(v) for k, v in sorted(waits.items())}
    all_tokens = sum(r.output_tokens for r in records if r.error is None)
    summary["throughput"] = {
        "duration_s": duration_s,
        "apps_per_s": len(main) / duration_s if duration_s > 0 else None,
        "output_tokens_per_s": all_tokens / duration_s if duration_s > 0 else None,
    }
    if background:
        # Background calls wait too (chat held to a latency limit beside the main apps' work)
        summary["background"] = {**_apps_summary(background), "queue_s_per_call": distribution(
            [w for ws in _queue_waits(background).values() for w in ws])}
    summary.update(prefix_stats(engines))
    summary["engines"] = list(engines)
    return summary


def per_app_speedups(reference: Sequence[AppRecord],
                     records: Sequence[AppRecord]) -> dict[str, float | None]:
    """Reference latency / latency for each main application present (and ok) in both runs:
    `min` says whether any application got slower (< 1)."""
    ref = {r.app_id: r.latency_s for r in reference if r.is_main and r.error is None}
    ratios = [ref[r.app_id] / r.latency_s for r in records
              if r.is_main and r.error is None and r.app_id in ref and r.latency_s > 0]
    if not ratios:
        return {"min": None, "max": None, "num_apps": 0}
    return {"min": min(ratios), "max": max(ratios), "num_apps": len(ratios)}
