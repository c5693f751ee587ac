"""The "ours, live" cells of the paper table, from the published live results
(bench/paper/live_results.py: docs/results/live/, one folder per experiment and a manifest),
so that regenerating the simulated table keeps the live measurements beside it instead of
"pending". A ratio from a run on the earlier application clock carries EARLIER_CLOCK_MARK.

Each paper experiment maps to the live runs that measure the same ratio (the live shapes are
smaller, see docs/RESULTS.md); a ratio is the baseline's figure over ours (E2E, or latency per
output token of the main apps or of background chat).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

from bench.paper.live_results import PART_CLOCK

def _mean(*path: str) -> Callable[[dict[str, Any]], float | None]:
    def read(variant: dict[str, Any]) -> float | None:
        value: Any = variant
        for key in path:
            value = (value or {}).get(key)
        return value
    return read


# metric name -> its value in one variant's results (lower is better, except HIGHER_IS_BETTER)
METRICS: dict[str, Callable[[dict[str, Any]], float | None]] = {
    "e2e": _mean("e2e_latency_s", "mean"),
    "normalized": _mean("normalized_latency_s_per_token", "mean"),
    "chat_normalized": _mean("background", "normalized_latency_s_per_token", "mean"),
    "sustainable_rate": _mean("sustainable_rate"),   # a live rate search (gpts_rate)
    "tpot": _mean("engine_tpot_s"),   # the engines' own count
}
HIGHER_IS_BETTER = frozenset({"sustainable_rate"})


@dataclass(frozen=True)
class LiveRatio:
    """`metric` of `baseline` over `metric` of `ours` in live experiment `experiment`;
    `baseline` None: the experiment's own reference; "exp/variant": a variant of another run."""

    label: str
    experiment: str
    ours: str
    baseline: str | None = None
    metric: str = "e2e"
    optional: bool = False   # from an experiment run only when named (EXTRA_EXPERIMENTS)


_PARROT, _LAT, _THR = "app_centric:parrot", "latency_centric:parrot", "throughput_centric:parrot"


def _mixed_ratios(experiment: str, setting: str, optional: bool = False
                  ) -> tuple[LiveRatio, ...]:
    """A mixed run's four ratios (chat normalized latency, then job time, vs latency- and
    throughput-centric), the first label led by the run's `setting`."""
    return (
        LiveRatio(f"{setting}chat normalized latency vs latency-centric", experiment, _PARROT,
                  f"{experiment}/{_LAT}", "chat_normalized", optional),
        LiveRatio("chat normalized latency vs throughput-centric", experiment, _PARROT,
                  f"{experiment}/{_THR}", "chat_normalized", optional),
        LiveRatio("map-reduce job time vs latency-centric", experiment, _PARROT,
                  f"{experiment}/{_LAT}", optional=optional),
        LiveRatio("map-reduce job time vs throughput-centric", experiment, _PARROT,
                  f"{experiment}/{_THR}", optional=optional))

LIVE_RATIOS: dict[str, tuple[LiveRatio, ...]] = {
    "chain_output": (LiveRatio("vs request-level", "chain_summary", _PARROT),),
    # the sweeps' points run live one at a time (SWEEP_POINTS, `--only` names them)
    "chain_chunk": (LiveRatio("chunk_tokens 512: vs request-level", "chain_chunk_512", _PARROT,
                              optional=True),
                    LiveRatio("chunk_tokens 2048: vs request-level", "chain_chunk_2048",
                              _PARROT, optional=True)),
    "chain_bg": (LiveRatio("chat_rate 2 (first 20 s): chain E2E vs request-level", "chain_bg",
                           _PARROT, optional=True),),
    "map_reduce_output": (LiveRatio("output_tokens 25: vs latency-capped request-level",
                                    "map_reduce_out25", _PARROT, optional=True),
                          LiveRatio("output_tokens 50: vs latency-capped request-level",
                                    "map_reduce_20", _PARROT, optional=True),
                          LiveRatio("output_tokens 75: vs latency-capped request-level",
                                    "map_reduce_out75", _PARROT, optional=True),
                          LiveRatio("output_tokens 100: vs latency-capped request-level",
                                    "map_reduce_out100", _PARROT, optional=True)),
    "map_reduce_chunks": (LiveRatio("doc_tokens 8192: vs latency-capped request-level",
                                    "map_reduce_8", _PARROT, optional=True),
                          LiveRatio("doc_tokens 16384: vs latency-capped request-level",
                                    "map_reduce_16", _PARROT, optional=True)),
    "concurrent_chains": (LiveRatio("mean JCT vs request-level (10 clients)",
                                    "concurrent_chains", _PARROT),
                          LiveRatio("mean JCT vs request-level (25 clients)",
                                    "concurrent_chains_25", _PARROT, optional=True)),
    "map_reduce_apps": (LiveRatio("vs latency-capped request-level", "map_reduce", _PARROT),),
    "copilot": (LiveRatio("32 users, sharing vs no sharing", "copilot_32", "least_queue:parrot"),
                LiveRatio("32 users, app_centric vs no sharing", "copilot_32", _PARROT),
                LiveRatio("64 users, sharing vs no sharing", "copilot_64", "least_queue:parrot"),
                LiveRatio("32 users, sharing vs static sharing", "copilot_32",
                          "least_queue:parrot", "copilot_32_static/least_queue:parrot"),
                LiveRatio("64 users, sharing vs static sharing", "copilot_64",
                          "least_queue:parrot", "copilot_64_static/least_queue:parrot"),
                LiveRatio("TPOT, 32 users, sharing vs static sharing", "copilot_32",
                          "least_queue:parrot", "copilot_32_static/least_queue:parrot",
                          metric="tpot"),
                LiveRatio("TPOT, 64 users, sharing vs static sharing", "copilot_64",
                          "least_queue:parrot", "copilot_64_static/least_queue:parrot",
                          metric="tpot")),
    "gpts_rate": (
        # the paper's metric, when the live rate search (`--only gpts_rate`) has run
        LiveRatio("2 engines on 1 H200, sustainable rate at <= 40 ms/token: app_centric vs no "
                  "sharing", "gpts_rate", _PARROT, metric="sustainable_rate", optional=True),
        LiveRatio("affinity off vs no sharing", "gpts_rate",
                  "app_centric:parrot+policy.prefix_affinity=false", metric="sustainable_rate",
                  optional=True),
        LiveRatio("sharing, least-queue placement vs no sharing", "gpts_rate",
                  "least_queue:parrot", metric="sustainable_rate", optional=True),
        # the same search at the paper's prompt lengths, unscaled (`--only gpts_rate_full`)
        LiveRatio("the paper's prompts unscaled (8,192 positions), sustainable rate at <= 40 "
                  "ms/token: app_centric vs no sharing", "gpts_rate_full", _PARROT,
                  metric="sustainable_rate", optional=True),
        LiveRatio("affinity off vs no sharing", "gpts_rate_full",
                  "app_centric:parrot+policy.prefix_affinity=false", metric="sustainable_rate",
                  optional=True),
        LiveRatio("sharing, least-queue placement vs no sharing", "gpts_rate_full",
                  "least_queue:parrot", metric="sustainable_rate", optional=True),
        LiveRatio("2 engines on 1 H200, one rate above the baseline's knee, latency capacity "
                  "calibrated (auto, on the engines' measured profiles; the values in the "
                  "run's log): "
                  "latency per token, app_centric vs no sharing", "gpts",
                  _PARROT, metric="normalized"),
        LiveRatio("affinity off vs no sharing", "gpts",
                  "app_centric:parrot+policy.prefix_affinity=false", metric="normalized"),
        LiveRatio("sharing, least-queue placement vs no sharing", "gpts", "least_queue:parrot",
                  metric="normalized")),
    "multi_agent": (LiveRatio("8 files, vs latency-centric", "multi_agent", _PARROT),
                    LiveRatio("8 files, vs throughput-centric", "multi_agent", _PARROT,
                              "multi_agent/throughput_centric:baseline"),
                    # the paper's size, when `--only multi_agent_16` has run
                    LiveRatio("16 files, vs latency-centric", "multi_agent_16", _PARROT,
                              optional=True),
                    LiveRatio("16 files, vs throughput-centric", "multi_agent_16", _PARROT,
                              "multi_agent_16/throughput_centric:baseline", optional=True)),
    "mixed_artifact": _mixed_ratios("mixed_artifact", "2 engines on 1 H200, latency capacity "
                                    "auto: ", optional=True),
    "mixed": _mixed_ratios("mixed", "2 engines on 1 H200, latency capacity auto (on the "
                           "engines' measured profiles; the value in the run's log): "),
}


def _value(live: dict[str, Any], experiment: str, variant: str, metric: str) -> float | None:
    run = live.get(experiment, {}).get("variants", {}).get(variant)
    if not run or run.get("status", "ok") != "ok":   # a rate search's entries have no status
        return None
    return METRICS[metric](run)


# Marks a live ratio timed on the earlier application clock (from before the session opened,
# parrot.sim.workloads.base.APP_CLOCK): a run whose JSON does not name its clock. The page
# explains the mark under its table.
EARLIER_CLOCK_MARK = "†"
# Metrics the engines measure themselves: no application's clock enters them. Every other
# metric of METRICS does (a new one is marked unless it is named here).
_ENGINE_METRICS = frozenset({"tpot"})


def _earlier_clock(live: dict[str, Any], ratio: LiveRatio, ref_exp: str) -> bool:
    if ratio.metric in _ENGINE_METRICS:
        return False
    searched = live.get(ratio.experiment, {}).get("variants", {}).get(ratio.ours, {})
    if PART_CLOCK in searched and searched.get("reference_rate"):
        return searched[PART_CLOCK] is None   # a ratio within one part of a merged search
    return any("app_clock" not in live.get(name, {}) for name in {ratio.experiment, ref_exp})


def live_cell(live: dict[str, Any] | None, key: str) -> str:
    """The table cell for paper experiment `key`: its live ratios, or why there are none.
    A ratio from a run on the earlier application clock carries EARLIER_CLOCK_MARK."""
    if live is None:
        return "pending"
    ratios = LIVE_RATIOS.get(key)
    if not ratios:
        return "not run live"
    # a ratio of an optional experiment (or variant) that did not run is left out; others
    # say n/a
    present = [r for r in ratios if not r.optional or r.experiment in live]
    if not any(r.experiment in live for r in present):
        return "pending"
    cells = []
    for r in present:
        run = live.get(r.experiment, {})
        variants = run.get("variants", {})
        if r.optional and r.ours not in variants:
            continue   # an optional search run with fewer variants (--variants)
        baseline = r.baseline or f"{r.experiment}/{run.get('reference', '')}"
        ref_exp, ref_variant = baseline.split("/", 1)
        mine = _value(live, r.experiment, r.ours, r.metric)
        theirs = _value(live, ref_exp, ref_variant, r.metric)
        searched = variants.get(r.ours, {})
        if r.metric == "sustainable_rate" and searched.get("reference_rate"):
            # the ratio of the search part that measured this variant, against its own
            # reference (see live_results.merge_rate_search)
            at_least = "≥" if searched.get("capped") else ""
            value = (f"{at_least}{searched['ratio_vs_reference']:.2f}× ({at_least}{mine:.1f} vs "
                     f"{searched['reference_rate']:.2f} req/s)")
        elif r.metric in HIGHER_IS_BETTER:
            value = "n/a" if mine is None or not theirs else f"{mine / theirs:.2f}×"
        else:
            value = "n/a" if not mine or theirs is None else f"{theirs / mine:.2f}×"
        if value != "n/a" and _earlier_clock(live, r, ref_exp):
            value += EARLIER_CLOCK_MARK
        cells.append(f"{r.label}: {value}")
    return "<br>".join(cells)
