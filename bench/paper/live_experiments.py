"""What the live paper runner (`live_paper.py`) runs: each experiment's workload, variants,
reference, sizes (on the GPU and in the CPU smoke run) and how many engines it needs.

The GPU sizes are the simulated paper experiments' (`paper.py`) scaled to the random LLaMA-7B
shape's 4,096 positions and to runs of about a minute per variant; docs/RESULTS.md ("Live on
one H200") says what was scaled and why.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Mapping, Sequence

from parrot.sim.workloads.apps import ARTIFACT_CHAT_S, ARTIFACT_JOB_OFFSETS
from parrot.sim.workloads.registry import WORKLOADS
from parrot.sim.workloads.spec import OUTPUT_LENGTHS, WorkloadSpec
from parrot.validation import key_value

# Turns the builtin engine's shared-prefix decode kernel off: forks still share KV blocks,
# decode reads the prefix once per sequence (vLLM-style static prefix sharing).
STATIC_SHARING = {"shared_prefix_min_group": 1_000_000}


class LiveExperimentError(ValueError):
    """A bad experiment definition or selection; the message names it and what is allowed."""


@dataclass(frozen=True)
class RateSearchSpec:
    """A live sustainable-rate search (sweep.RateSearch): Poisson requests over `window_s`
    seconds at each rate tried, a rate sustained while the mean latency per output token stays
    within `target_s_per_token` and nothing fails."""

    target_s_per_token: float = 0.04
    window_s: float = 15.0
    start: float = 2.0
    max_rate: float = 256.0     # the simulated search's cap (bench.paper.reproduce)
    refinements: int = 2

    def __post_init__(self) -> None:
        for name in ("target_s_per_token", "window_s", "start", "max_rate"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise LiveExperimentError(f"rate search: {name}={value!r} is not valid; "
                                          "allowed: a number > 0")
        if isinstance(self.refinements, bool) or not isinstance(self.refinements, int) \
                or self.refinements < 0:
            raise LiveExperimentError(f"rate search: refinements={self.refinements!r} is not "
                                      "valid; allowed: integer >= 0")


@dataclass(frozen=True)
class LiveExperiment:
    key: str
    workload: str
    compare: str
    reference: str
    spec: Mapping[str, Any]
    smoke_spec: Mapping[str, Any]
    engine_params: Mapping[str, Any] = field(default_factory=dict)
    # Engine processes its runs need: the runner takes the config with this many engines
    # (gpts and mixed spread calls over engines; one engine would not test placement).
    engines: int = 1
    # Set: the experiment is a sustainable-rate search per variant (the workload's
    # request_rate and num_requests are set per rate tried) instead of one run per variant.
    rate_search: RateSearchSpec | None = None
    # Per policy name, parameters every variant of that policy runs with (under its own
    # `+policy.` ones), as parrot-bench's --policy-param: a baseline's cap calibrated to the
    # hardware without renaming the variant (the reference keeps its label). By default
    # app_centric runs in the paper's setting (latency calls keep to the latency capacity).
    policy_params: Mapping[str, Mapping[str, Any]] = field(
        default_factory=lambda: {"app_centric": {"work_conserving": False}})
    # "exact": every call's max_tokens is its length (ignore_eos: the paper's setting, an
    # oracle); "sampled": drawn lengths under a loose cap, ended by a marker only the engine
    # reads (a random-weight builtin engine honours it: docs/ENGINE.md), so no scheduler
    # knows them
    output_lengths: str = "exact"

    def __post_init__(self) -> None:
        if self.workload not in WORKLOADS:
            raise LiveExperimentError(f"{self.key}: workload {self.workload!r} is not valid; "
                                      f"allowed: {sorted(WORKLOADS)}")
        if isinstance(self.engines, bool) or not isinstance(self.engines, int) \
                or self.engines < 1:
            raise LiveExperimentError(f"{self.key}: engines={self.engines!r} is not valid; "
                                      "allowed: integer >= 1")

    def workload_spec(self, smoke: bool) -> WorkloadSpec:
        return WorkloadSpec(**{**WORKLOADS[self.workload].spec_defaults,
                               **(self.smoke_spec if smoke else self.spec),
                               "output_lengths": self.output_lengths})


_CHAIN = {"doc_tokens": 8192, "chunk_tokens": 1024, "output_tokens": 50}
_SMOKE_DOC = {"doc_tokens": 1024, "chunk_tokens": 256, "output_tokens": 4}
_COPILOT_SMOKE = {"num_clients": 4, "system_prompt_tokens": 300, "output_tokens": 4}

# gpts: the paper's four system prompts x 0.45 (3,347 / 502 / 762 / 914 tokens): the longest
# with the longest query (512) and the 100-token answer fits 4,096 positions. One fixed rate
# instead of a rate search (which would take ~10 runs per variant): 16 req/s for 20 s, above
# the no-sharing baseline's knee (7-13 req/s in a simulation of this setup: two engines at
# 2-3x the h200_llama7b profile's step times, since they share one GPU; docs/RESULTS.md).
_GPTS = {"prompt_scale": 0.45, "request_rate": 16.0, "num_requests": 320, "output_tokens": 100}
_GPTS_SMOKE = {"prompt_scale": 0.05, "request_rate": 4.0, "num_requests": 8, "output_tokens": 4}
# mixed: the simulated experiment's rates (chat 1 req/s, map-reduce jobs of 20 x 1,024 tokens
# at 0.5 jobs/s) over 30 s instead of 60 (15 jobs instead of 30).
_MIXED = {"num_apps": 15, "request_rate": 0.5, "chat_rate": 1.0, "max_chat_s": 30.0}
# the variants of both mixed runs, and their reference
_MIXED_VS = ("app_centric,throughput_centric,latency_centric", "latency_centric")
_MIXED_SMOKE = {**_SMOKE_DOC, "num_apps": 2, "request_rate": 0.5, "chat_rate": 1.0,
                "max_chat_s": 3.0, "chat_prompt_tokens": (32, 64), "chat_output_tokens": (4, 8)}

LIVE_EXPERIMENTS = (  # the live goals (map-reduce, multi_agent) first
    LiveExperiment("map_reduce", "map_reduce", "app_centric,latency_centric:baseline",
                   "latency_centric:baseline",
                   {"doc_tokens": 32768, "chunk_tokens": 1024, "output_tokens": 100,
                    "num_apps": 3}, _SMOKE_DOC),
    LiveExperiment("multi_agent", "multi_agent",
                   "app_centric,throughput_centric:baseline,latency_centric:baseline",
                   "latency_centric:baseline",
                   {"num_clients": 8, "output_tokens": 200, "rounds": 3},
                   {"num_clients": 2, "output_tokens": 8, "rounds": 1}),
    LiveExperiment("chain_summary", "chain_summary", "app_centric,least_queue:baseline",
                   "least_queue:baseline", {**_CHAIN, "num_apps": 2}, _SMOKE_DOC),
    LiveExperiment("concurrent_chains", "concurrent_chains", "app_centric,least_queue:baseline",
                   "least_queue:baseline", {**_CHAIN, "num_clients": 10},
                   {**_SMOKE_DOC, "num_clients": 2}),
    # 3,300-token system prompt (~3,340 SmolLM2 tokens): with a 512-token query and 100-token
    # answer it fits the 4,096 positions of the random LLaMA-7B shape.
    LiveExperiment("copilot_32", "copilot", "app_centric,least_queue,least_queue:baseline",
                   "least_queue:baseline",
                   {"num_clients": 32, "system_prompt_tokens": 3300, "output_tokens": 100},
                   _COPILOT_SMOKE),
    LiveExperiment("copilot_64", "copilot", "least_queue,least_queue:baseline",
                   "least_queue:baseline",
                   {"num_clients": 64, "system_prompt_tokens": 3300, "output_tokens": 100},
                   _COPILOT_SMOKE),
    LiveExperiment("copilot_32_static", "copilot", "least_queue", "least_queue",
                   {"num_clients": 32, "system_prompt_tokens": 3300, "output_tokens": 100},
                   _COPILOT_SMOKE, STATIC_SHARING),
    LiveExperiment("copilot_64_static", "copilot", "least_queue", "least_queue",
                   {"num_clients": 64, "system_prompt_tokens": 3300, "output_tokens": 100},
                   _COPILOT_SMOKE, STATIC_SHARING),
    # Two engines (the paper: four, one per GPU); the variants and references of paper.py's
    # gpts_rate and mixed experiments.
    LiveExperiment("gpts", "gpts",
                   "app_centric,least_queue,app_centric+policy.prefix_affinity=false,"
                   "least_queue:baseline", "least_queue:baseline", _GPTS, _GPTS_SMOKE,
                   engines=2),
    LiveExperiment("mixed", "mixed", *_MIXED_VS, _MIXED, _MIXED_SMOKE, engines=2),
)


# The sweeps' points the default run leaves out, one live run each (named only): chain summary
# at the chunk sweep's ends, with background chat (one rate: 2 req/s, the same arrivals for
# both variants, over the first 20 s, which the chains take about half of), and map-reduce on
# one document at the chunk-count sweep's shapes (output 50) and the output sweep's other points.
_CHAIN_2 = {**_CHAIN, "num_apps": 2}
_MAP_ONE = {"chunk_tokens": 1024, "output_tokens": 50, "num_apps": 1}
_CHAIN_VS_VLLM = ("app_centric,least_queue:baseline", "least_queue:baseline")
_MAP_VS_LATENCY = ("app_centric,latency_centric:baseline", "latency_centric:baseline")
SWEEP_POINTS = (
    LiveExperiment("chain_chunk_512", "chain_summary", *_CHAIN_VS_VLLM,
                   {**_CHAIN_2, "chunk_tokens": 512}, _SMOKE_DOC),
    LiveExperiment("chain_chunk_2048", "chain_summary", *_CHAIN_VS_VLLM,
                   {**_CHAIN_2, "chunk_tokens": 2048}, _SMOKE_DOC),
    LiveExperiment("chain_bg", "chain_summary_bg", *_CHAIN_VS_VLLM,
                   {**_CHAIN_2, "chat_rate": 2.0, "max_chat_s": 20.0},
                   {**_SMOKE_DOC, "chat_rate": 2.0, "max_chat_s": 2.0,
                    "chat_prompt_tokens": (32, 64), "chat_output_tokens": (4, 8)}),
    LiveExperiment("map_reduce_8", "map_reduce", *_MAP_VS_LATENCY,
                   {**_MAP_ONE, "doc_tokens": 8192}, _SMOKE_DOC),
    LiveExperiment("map_reduce_16", "map_reduce", *_MAP_VS_LATENCY,
                   {**_MAP_ONE, "doc_tokens": 16384}, _SMOKE_DOC),
    LiveExperiment("map_reduce_20", "map_reduce", *_MAP_VS_LATENCY,
                   {**_MAP_ONE, "doc_tokens": 20480}, _SMOKE_DOC),
    # the output sweep's other points on the same document (the paper's 2.37x is its output 100)
    LiveExperiment("map_reduce_out25", "map_reduce", *_MAP_VS_LATENCY,
                   {**_MAP_ONE, "doc_tokens": 20480, "output_tokens": 25}, _SMOKE_DOC),
    LiveExperiment("map_reduce_out75", "map_reduce", *_MAP_VS_LATENCY,
                   {**_MAP_ONE, "doc_tokens": 20480, "output_tokens": 75}, _SMOKE_DOC),
    LiveExperiment("map_reduce_out100", "map_reduce", *_MAP_VS_LATENCY,
                   {**_MAP_ONE, "doc_tokens": 20480, "output_tokens": 100}, _SMOKE_DOC),
    # the paper's 25 concurrent clients (the default run has 10)
    LiveExperiment("concurrent_chains_25", "concurrent_chains", *_CHAIN_VS_VLLM,
                   {**_CHAIN, "num_clients": 25}, {**_SMOKE_DOC, "num_clients": 3}),
    # mixed with the arrivals of the paper's artifact (9 jobs in three bursts of three, one
    # chat a second for 40 s) on the two engines of `mixed`
    LiveExperiment("mixed_artifact", "mixed", *_MIXED_VS,
                   {"job_offsets": ARTIFACT_JOB_OFFSETS, "chat_rate": 1.0,
                    "chat_arrivals": "uniform", "max_chat_s": ARTIFACT_CHAT_S},
                   {**_MIXED_SMOKE, "job_offsets": (0.5, 1.0), "chat_arrivals": "uniform"},
                   engines=2),
)

# Run only when named (--only): multi_agent at the paper's 16 files, and the paper's gpts
# metric, the sustainable request rate at <= 40 ms per output token, searched live per
# variant on the two-engine setup (4 variants x ~8 rates x ~25 s: ~15 minutes of GPU time with
# engine start; the default gpts run above measures one rate). The rate-ratio cell of the
# results page reads it when present.
# the gpts rate searches' variants and smoke sizes (the rates are the search's)
_GPTS_RATE_COMPARE = ("app_centric,least_queue,app_centric+policy.prefix_affinity=false,"
                      "least_queue:baseline")
_GPTS_RATE_SMOKE = {k: v for k, v in _GPTS_SMOKE.items()
                    if k not in ("request_rate", "num_requests")}

EXTRA_EXPERIMENTS = (
    # The paper's headline multi-agent size (16 files: its 11.7x and 2.45x). Each reviser reads
    # the design and all 16 files (~3,700 tokens) and writes 200 more: past the 4,096 positions
    # of the LLaMA-7B shape, so these engines take 8,192 (random weights: only the RoPE tables
    # grow; per token the KV and compute are LLaMA-7B's).
    LiveExperiment("multi_agent_16", "multi_agent",
                   "app_centric,throughput_centric:baseline,latency_centric:baseline",
                   "latency_centric:baseline",
                   {"num_clients": 16, "output_tokens": 200, "rounds": 3},
                   {"num_clients": 3, "output_tokens": 8, "rounds": 1},
                   {"max_context_len": 8192}),
    LiveExperiment("gpts_rate", "gpts", _GPTS_RATE_COMPARE, "least_queue:baseline",
                   {k: v for k, v in _GPTS.items() if k not in ("request_rate", "num_requests")},
                   _GPTS_RATE_SMOKE, engines=2, rate_search=RateSearchSpec()),
    # The same search at the paper's system prompts unscaled (7,437 / 1,116 / 1,694 / 2,031
    # tokens), as the simulation runs them: the longest with the longest query and the answer
    # needs ~8,050 positions, so these engines take 8,192 (random weights: only the RoPE
    # tables grow; per token the KV and compute are LLaMA-7B's).
    LiveExperiment("gpts_rate_full", "gpts", _GPTS_RATE_COMPARE, "least_queue:baseline",
                   {"prompt_scale": 1.0, "output_tokens": _GPTS["output_tokens"]},
                   _GPTS_RATE_SMOKE, {"max_context_len": 8192}, engines=2,
                   rate_search=RateSearchSpec()),
    *SWEEP_POINTS,
)
SMOKE_RATE_SEARCH = RateSearchSpec(target_s_per_token=0.5, window_s=1.0, start=2.0,
                                   max_rate=8.0, refinements=1)


def select_experiments(keys: str | None,
                       experiments: tuple[LiveExperiment, ...] = LIVE_EXPERIMENTS
                       ) -> tuple[LiveExperiment, ...]:
    """`key1,key2` -> those experiments in the order given (None: all of `experiments`; the
    EXTRA_EXPERIMENTS only when named)."""
    if keys is None:
        return experiments
    by_key = {e.key: e for e in (*experiments, *EXTRA_EXPERIMENTS)}
    wanted = [k.strip() for k in keys.split(",")]
    unknown = [k for k in wanted if k not in by_key]
    if unknown or not wanted or len(set(wanted)) != len(wanted):
        raise LiveExperimentError(f"--only: {keys!r} is not valid; allowed: distinct keys "
                                  f"out of {list(by_key)}, comma-separated")
    return tuple(by_key[k] for k in wanted)


def with_output_lengths(experiments: tuple[LiveExperiment, ...], lengths: str
                        ) -> tuple[LiveExperiment, ...]:
    """The experiments with `lengths` ("exact" or "sampled": LiveExperiment.output_lengths)."""
    if lengths not in OUTPUT_LENGTHS:
        raise LiveExperimentError(f"--lengths: {lengths!r} is not valid; allowed: "
                                  f"{list(OUTPUT_LENGTHS)}")
    return tuple(dataclasses.replace(e, output_lengths=lengths) for e in experiments)


def with_variants(experiments: tuple[LiveExperiment, ...], compare: str
                  ) -> tuple[LiveExperiment, ...]:
    """The experiments with `compare` (comma-separated variants, in run order) instead of
    their own: for one experiment at a time, and the reference must stay among them (every
    ratio is against it). Order matters live: a variant that meets engine shapes no earlier
    run met pays for them (graphs captured while serving, reported per run)."""
    from parrot.sim.compare import parse_variants   # the registry import is heavy
    if len(experiments) != 1:
        raise LiveExperimentError("--variants needs exactly one experiment (--only KEY)")
    e = experiments[0]
    try:
        labels = [v.label for v in parse_variants(compare)]
        reference = parse_variants(e.reference)[0].label
    except ValueError as exc:
        raise LiveExperimentError(f"--variants: {exc}") from exc
    if reference not in labels:
        raise LiveExperimentError(f"--variants must include {e.key}'s reference "
                                  f"{e.reference!r}; given: {compare!r}")
    return (dataclasses.replace(e, compare=compare),)


@dataclass(frozen=True)
class LiveSetting:
    """What `live.py --setting` sets before the command line's own options, which win (each
    list is applied first; a latency capacity or lengths given on the command line replace
    these)."""

    engine_params: tuple[str, ...]    # KEY=VALUE, as --engine-param
    policy_params: tuple[str, ...]    # POLICY.KEY=VALUE, as --policy-param
    latency_capacity: str | None      # as --latency-capacity (None: the configs')
    lengths: str                      # as --lengths


SETTINGS: dict[str, LiveSetting] = {
    # The paper's: the configs' capacities, app_centric's latency rule (the experiments'
    # default policy_params), exact output lengths, no prefix caching.
    "paper": LiveSetting((), (), None, "exact"),
    # Today's baselines calibrated as app_centric is (docs/RESULTS.md, issue "honest wins"):
    # every engine caches prompt prefixes, app_centric work-conserving (its default), the
    # latency-centric cap its latency capacity, each engine's capacity from its own speed
    # profile, output lengths hidden from every scheduler.
    "fair": LiveSetting(("prefix_caching=true",),
                        ("app_centric.work_conserving=true", "latency_centric.token_capacity=auto"),
                        "auto", "sampled"),
}


def with_policy_params(experiments: tuple[LiveExperiment, ...],
                       items: Sequence[str]) -> tuple[LiveExperiment, ...]:
    """The experiments with `POLICY.KEY=VALUE` items (values YAML scalars) applied to every
    variant of that policy; recorded in each experiment's results (settings.policy_params)."""
    params: dict[str, dict[str, Any]] = {}
    for item in items:
        pair = key_value(item)
        policy, dot, name = pair[0].partition(".") if pair else ("", "", "")
        if pair is None or not dot or not policy or not name:
            raise LiveExperimentError(f"--policy-param: {item!r} is not valid; expected "
                                      "POLICY.KEY=VALUE, e.g. latency_centric.token_capacity="
                                      "13312")
        params.setdefault(policy, {})[name] = pair[1]
    if not params:
        return experiments
    return tuple(dataclasses.replace(e, policy_params={
        policy: {**e.policy_params.get(policy, {}), **params.get(policy, {})}
        for policy in {*e.policy_params, *params}}) for e in experiments)


def with_rate_search(experiments: tuple[LiveExperiment, ...], *,
                     window_s: float | None = None, start: float | None = None,
                     max_rate: float | None = None, refinements: int | None = None
                     ) -> tuple[LiveExperiment, ...]:
    """The experiments with their rate search's `window_s` / `start` / `max_rate` /
    `refinements` (those given, not None) changed: a shorter search for a small device
    budget, or one that reaches higher, said in the results (each rate search's results.json
    records the spec it ran)."""
    changes: dict[str, Any] = {k: v for k, v in (("window_s", window_s), ("start", start),
                                 ("max_rate", max_rate), ("refinements", refinements))
                               if v is not None}
    if not changes:
        return experiments
    if not any(e.rate_search is not None for e in experiments):
        raise LiveExperimentError("the rate-search options need a rate-search experiment "
                                  "(--only gpts_rate)")
    return tuple(e if e.rate_search is None
                 else dataclasses.replace(e, rate_search=dataclasses.replace(e.rate_search,
                                                                             **changes))
                 for e in experiments)
