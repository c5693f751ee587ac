"""The "ours, live" cells of the paper table: read from the committed results of
`scripts/live_paper.sh` so that regenerating the simulated table keeps the live measurements
beside it instead of "pending". Folders under docs/results/ (LIVE_DIRS), merged in order: the
one-engine runs (live_paper_h200/), the two-engine runs (gpts, mixed:
live_paper_h200_two_engines/, two engines sharing one H200), then gpts again with the engines'
latency capacity calibrated to the H200 (live_paper_h200_two_engines_latency20k/), which
replaces the gpts of the folder before it, the live gpts rate search when it has run
(live_paper_h200_gpts_rate/, `--only gpts_rate`), and the runs after the engine's prefill
stopped using cuDNN (and its fed launch-ahead and one-split attention): map_reduce,
multi_agent, chain_summary and concurrent_chains (live_paper_h200_prefill_fix/), mixed
(..._two_engines/) and gpts (..._gpts_latency20k/), each replacing the same experiment of an
earlier folder; last the runs after the tensor-core small-batch linear kernel
(live_paper_h200_dotkernel*/): map_reduce and multi_agent, then chain_summary,
concurrent_chains and all four copilot runs (the static-sharing runs on their own engine
process in the same command, so the static ratio pairs runs of one engine version), mixed and
gpts; and last the runs after prefill attention moved to the paged Triton kernel
(live_paper_h200_paged_prefill*/): every experiment but the gpts rate search; and last the
runs after the throughput capacity became each engine's share of its KV cache
(live_paper_h200_auto_throughput*/): map_reduce and multi_agent, mixed, gpts and the gpts
rate search (the experiments with throughput work, or whose latency limit may grow to the
throughput capacity).
Then gpts again after shared-prefix steps started replaying a captured wider graph bucket
instead of capturing their own while serving (live_paper_h200_wider_buckets_gpts_latency20k/);
last the runs after a waiting latency call started to pass the latency limit where batching
lowers the mean (live_paper_h200_latency_backlog/: map_reduce, multi_agent,
concurrent_chains, copilot_32; ..._16files/: multi_agent at the paper's 16 files and mixed;
..._copilot/: all four copilot runs again, so the static-sharing ratios pair runs of one
engine version); last the runs after a later application's call started to join running
chains past the limit and prefill ahead to wait for an engine with no other prefill queued
(live_paper_h200_chains_fair/: map_reduce, multi_agent, chain_summary, concurrent_chains,
copilot_32; ..._16files/: multi_agent at 16 files and mixed). The gpts rate search of that
session timed out before writing its results (its log and the baseline's rerun are in
..._gpts_rate/ and ..._gpts_rate2/, read by docs/RESULTS.md, not here). Last, the runs of
2026-12-02 noon on one code version (live_paper_h200_dec02pm*/): the gpts rate
search in two parts, each with the no-sharing reference (..._gpts_rate_a/: app_centric and
the affinity ablation; ..._gpts_rate_b/: least-queue sharing; merged per variant, see
load_live_dirs), the one-engine set (map_reduce, multi_agent, chain_summary,
concurrent_chains, copilot_32) and multi_agent at 16 files (..._16files/). Last, the runs of
2026-12-02 evening after the engine's prefill graphs (live_paper_h200_prefill_graphs*/): the
one-engine set with multi_agent at 16 files in one folder, the gpts rate search in its two
parts (..._gpts_rate_a/, ..._gpts_rate_b/) and mixed (..._two_engines/). Last,
multi_agent at 8 and 16 files after prefix contexts were cut only at branch points of the
sharing (live_paper_h200_branch_contexts/), and the gpts rate search again on that code, in
its two parts (..._gpts_rate_a/, ..._gpts_rate_b/). Last, the sweeps' points run live one
at a time (live_paper_h200_sweep_points/: chain summary at chunks of 512 and 2,048, with
background chat, map-reduce on one document of 8, 16 and 20 chunks), and multi_agent at 8
files after the shared-prefix decode kernel sized its tiles to small groups; then multi_agent
at 16 files on that code (live_paper_h200_small_tiles/) and the first part of the gpts rate
search (..._gpts_rate_a/: app_centric and the affinity ablation). Last, multi_agent at 8
and 16 files after shared-prefix steps started replaying stopgap graphs instead of capturing
their own (live_paper_h200_stopgaps/), and the gpts rate search at the paper's prompt lengths
unscaled, in two parts (..._gpts_full_a/: app_centric, the affinity ablation;
..._gpts_full_b/: least-queue sharing), then multi_agent at 16 files again with the stopgap
limit at 24 steps (live_paper_h200_stopgaps24/). Last, the runs of 2026-12-03 with the
engine counting its Triton compilations and garbage collections, on one engine version:
chain_summary, concurrent_chains, copilot_32 and _64, map_reduce and mixed
(live_paper_h200_pauses_set/), multi_agent at 8 files, both static-sharing copilot runs and
the sweeps' points (..._pauses_rest/), multi_agent at 16 files (..._pauses/) and gpts at
its fixed rate (..._pauses_gpts/), then all four copilot runs again with the engines'
time per output token (..._pauses_copilot/). Then gpts after the warm-up met every
variant's buckets (live_paper_h200_warm20_gpts/) and mixed with the chats' queue time
(live_paper_h200_mixed_queue/). Last, the runs after engines started to measure their own
speed profile at start-up and the manager to cost placements with it, every one with
`--latency-capacity auto` (the paper's rule on each engine's measured profile):
concurrent_chains, chain_bg and map_reduce_8 (live_paper_h200_profile_one/), multi_agent at 8
and 16 files (..._multi_agent/, ..._multi_agent_16/), gpts at its fixed rate (..._gpts/) and
mixed (..._mixed/); then, on the same code with the paper artifact's shapes, concurrent
chains at the paper's 25 clients (live_paper_h200_artifact_cc25/) and mixed with the
artifact's arrivals (live_paper_h200_artifact_mixed/); then the one-engine runs that had
last run at the configs' 6,144, again with `--latency-capacity auto`: chain_summary, the
chain-chunk and map-reduce sweep points and map_reduce (live_paper_h200_auto_one/), and the
four copilot runs with the configs saying `auto` (live_paper_h200_auto_copilot/). Then the
runs after a submission started to carry its outputs' criteria: map-reduce's one-engine
cells and multi_agent at 8 files (live_paper_h200_criteria_one/), mixed
(..._criteria_mixed/) and multi_agent at 16 files (..._criteria_16files/); last mixed again
after app_centric preferred engines free of the other criterion only in rounds that isolate
(live_paper_h200_calm_mixed/), and the gpts rate search at the paper's prompt lengths on
the engines' measured profiles with the latency capacity `auto`, in two parts
(live_paper_h200_measured_gpts_full_a/: app_centric and the affinity ablation; ..._b/:
least-queue sharing; each with the no-sharing reference). Last, every experiment but the two
gpts rate searches again after an application's clock started once its session is open
(live_paper_h200_session_clock/: the one-engine runs and the map-reduce output sweep's ends;
..._sweeps/: multi_agent at 16 files, concurrent chains at 25, the chain sweep points;
..._mixed/, ..._gpts/). Then the gpts rate searches on that clock: at the paper's prompt
lengths in both parts (live_paper_h200_app_clock_gpts_full_a/, ..._b/), the scaled one's
first part (..._gpts_rate_a/: app_centric and the affinity ablation; its second part was cut
off by the device budget before its reference finished, so ..._gpts_rate_b/ is not read and
least-queue sharing keeps its earlier part), and the map-reduce output sweep's 75 and 100
(..._mr/); last, that second part again, whole (..._gpts_rate_c/: the affinity ablation and
least-queue sharing, with their reference). Last, the map-reduce output sweep's 75 and 100 and
multi_agent at 16 files after the engine started to relaunch its Triton kernels without the
JIT's per-call work (live_paper_h200_direct_launch/), and the scaled gpts rate search's
app_centric with its reference after a step's attention started to be replayed over its
layers (live_paper_h200_replay_gpts_rate/); last the map-reduce output sweep's 100 and
multi_agent at 16 files after the paged prefill kernel's unmasked blocks and long-chunk tile
(live_paper_h200_unmasked_prefill/), then map-reduce at output 100 again after the engine's
host work per step shrank (live_paper_h200_host_work/). Last, the one-engine set and the
map-reduce sweep points again on one code version, the commit after that host work and its review
(live_paper_h200_head_dec04/, 2026-12-04 ~12:05 UTC), then multi_agent at 16 files,
concurrent chains at 25 and the chain sweep points (..._sweeps/) and both mixed runs on two
engines (..._mixed/) and gpts at its fixed rate (..._gpts/) on the same engine and policies.
A ratio from a run on the earlier clock carries EARLIER_CLOCK_MARK.

Each paper experiment maps to the live runs that measure the same ratio (the live shapes are
smaller, see docs/RESULTS.md); a ratio is the baseline's figure over ours (E2E, or latency per
output token of the main apps or of background chat).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Callable

LIVE_DIRS = ("live_paper_h200", "live_paper_h200_two_engines",
             "live_paper_h200_two_engines_latency20k", "live_paper_h200_gpts_rate",
             "live_paper_h200_prefill_fix", "live_paper_h200_prefill_fix_two_engines",
             "live_paper_h200_prefill_fix_gpts_latency20k", "live_paper_h200_dotkernel",
             "live_paper_h200_dotkernel_one_engine", "live_paper_h200_dotkernel_two_engines",
             "live_paper_h200_dotkernel_gpts_latency20k", "live_paper_h200_paged_prefill",
             "live_paper_h200_paged_prefill_two_engines",
             "live_paper_h200_paged_prefill_gpts_latency20k", "live_paper_h200_auto_throughput",
             "live_paper_h200_auto_throughput_two_engines",
             "live_paper_h200_auto_throughput_gpts_latency20k",
             "live_paper_h200_auto_throughput_gpts_rate",
             "live_paper_h200_wider_buckets_gpts_latency20k",
             "live_paper_h200_latency_backlog", "live_paper_h200_latency_backlog_16files",
             "live_paper_h200_latency_backlog_copilot", "live_paper_h200_chains_fair",
             "live_paper_h200_chains_fair_16files", "live_paper_h200_dec02pm_gpts_rate_a",
             "live_paper_h200_dec02pm_gpts_rate_b", "live_paper_h200_dec02pm",
             "live_paper_h200_dec02pm_16files", "live_paper_h200_prefill_graphs_gpts_rate_a",
             "live_paper_h200_prefill_graphs_gpts_rate_b", "live_paper_h200_prefill_graphs",
             "live_paper_h200_prefill_graphs_two_engines", "live_paper_h200_branch_contexts",
             "live_paper_h200_branch_contexts_gpts_rate_a",
             "live_paper_h200_branch_contexts_gpts_rate_b", "live_paper_h200_sweep_points",
             "live_paper_h200_small_tiles", "live_paper_h200_small_tiles_gpts_rate_a",
             "live_paper_h200_stopgaps", "live_paper_h200_stopgaps_gpts_full_a",
             "live_paper_h200_stopgaps_gpts_full_b", "live_paper_h200_stopgaps24",
             "live_paper_h200_pauses_set", "live_paper_h200_pauses_rest",
             "live_paper_h200_pauses", "live_paper_h200_pauses_gpts",
             "live_paper_h200_pauses_copilot", "live_paper_h200_warm20_gpts",
             "live_paper_h200_mixed_queue", "live_paper_h200_profile_one",
             "live_paper_h200_profile_multi_agent", "live_paper_h200_profile_multi_agent_16",
             "live_paper_h200_profile_gpts", "live_paper_h200_profile_mixed",
             "live_paper_h200_artifact_cc25", "live_paper_h200_artifact_mixed",
             "live_paper_h200_auto_one", "live_paper_h200_auto_copilot",
             "live_paper_h200_criteria_one", "live_paper_h200_criteria_mixed",
             "live_paper_h200_criteria_16files", "live_paper_h200_calm_mixed",
             "live_paper_h200_measured_gpts_full_a", "live_paper_h200_measured_gpts_full_b",
             "live_paper_h200_session_clock", "live_paper_h200_session_clock_sweeps",
             "live_paper_h200_session_clock_mixed", "live_paper_h200_session_clock_gpts",
             "live_paper_h200_app_clock_gpts_full_a", "live_paper_h200_app_clock_gpts_full_b",
             "live_paper_h200_app_clock_gpts_rate_a", "live_paper_h200_app_clock_mr",
             "live_paper_h200_app_clock_gpts_rate_c", "live_paper_h200_direct_launch",
             "live_paper_h200_replay_gpts_rate", "live_paper_h200_unmasked_prefill",
             "live_paper_h200_host_work", "live_paper_h200_head_dec04",
             "live_paper_h200_head_dec04_sweeps", "live_paper_h200_head_dec04_mixed",
             "live_paper_h200_head_dec04_gpts")


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
    "tpot": _mean("engine_tpot_s"),   # the engines' own (runs of 2026-12-03 on)
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


def load_live(path: Path) -> dict[str, Any] | None:
    """The experiments of one live results.json; None when missing or a smoke run."""
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    return None if data.get("smoke") else data.get("experiments")


def load_live_dirs(results_dir: Path, dirs: tuple[str, ...] = LIVE_DIRS
                   ) -> dict[str, Any] | None:
    """The experiments of every `results_dir/<dir>/results.json` in `dirs`, merged (a later
    folder's experiment replaces an earlier one's of the same key); None when there are none.
    A rate search is merged per variant instead: one search of every variant runs past a
    device call's time limit, so it is run in parts (`--variants`), each part with its own
    reference, and each variant keeps the ratio measured in its own part."""
    merged: dict[str, Any] = {}
    for name in dirs:
        live = load_live(results_dir / name / "results.json")
        for key, experiment in (live or {}).items():
            merged[key] = _merge_rate_search(merged.get(key), experiment)
    return merged or None


def _merge_rate_search(earlier: dict[str, Any] | None, later: dict[str, Any]) -> dict[str, Any]:
    if "rate_search" in later:
        later = _with_part_clock(later)
    if earlier is None or "rate_search" not in earlier or "rate_search" not in later:
        return later
    searched = {label: v for label, v in later["variants"].items() if "sustainable_rate" in v}
    return {**later, "variants": {**earlier["variants"], **searched}}


# A searched variant's copy of the clock of the part that measured it (None: the earlier
# clock): a merged search's own "app_clock" is its last part's, which need not be this one's.
PART_CLOCK = "part_app_clock"


def _with_part_clock(search: dict[str, Any]) -> dict[str, Any]:
    clock = search.get("app_clock")
    return {**search, "variants": {label: {**v, PART_CLOCK: clock} if "sustainable_rate" in v
                                   else v for label, v in search["variants"].items()}}


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
            # reference (see load_live_dirs)
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
