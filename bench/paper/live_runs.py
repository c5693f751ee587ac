"""The paper's experiments live: engine processes (builtin, LLaMA-7B shape on one H200) shared
by every run, a fresh manager per (experiment, variant), a warm-up pass first.

    bench/live_paper.sh                          # on the GPU machine, results under $OUT
    bench/live_paper.sh --only gpts,mixed        # some experiments only
    PARROT_LIVE_SMOKE=1 bench/live_paper.sh      # tiny random model on the CPU, minutes

An experiment names how many engines it needs (`LiveExperiment.engines`): one engine runs on
the one-engine config, two (gpts, mixed) on the two-engine config (two processes; on one H200
each holds half the KV memory). Engines with other parameters (copilot's static-sharing
variant turns the shared-prefix kernel off) get their own processes. The processes of one
group are stopped before the next group's start. Every run's figures go into one
results.json under the output folder; table.txt holds the printed table.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Callable, Sequence

from parrot.serve_config import EngineSpec, ServeConfig
from parrot.engines.launcher import LaunchSpec
from parrot.engines.launcher import launch_engines, stop_engines
from parrot.speed_profile import calibrated_latency_capacity
from bench.provenance import device_name
from parrot.sim.compare import Settings, Variant, VariantRun, parse_variants, results_json
from parrot.sim.live import as_remote, run_live_async
from bench.paper.live_report import (counter_delta, counters_text, engine_counters, engine_tpot_s,
                                    reset_prefix_caches, save_results)
from bench.paper.live_experiments import (LIVE_EXPERIMENTS, SMOKE_RATE_SEARCH,  # noqa: F401
                                         STATIC_SHARING, LiveExperiment, LiveExperimentError,
                                         RateSearchSpec)
from parrot.sim.sweep import RateSearch, meets_target
from parrot.sim.workloads.registry import WORKLOADS
from parrot.sim.workloads.base import APP_CLOCK
from parrot.validation import key_value
from parrot.sim.workloads.spec import WorkloadSpec


@dataclass(frozen=True)
class ServeSetup:
    """A parrot-serve config and the file it came from (recorded with the results); the
    experiments that need `num_engines` engines run on it."""

    path: str
    config: ServeConfig

    @property
    def num_engines(self) -> int:
        return len(self.config.engines)


CAPACITY_FLAGS = {"latency_capacity": "--latency-capacity",
                  "throughput_capacity": "--throughput-capacity"}


def capacity_arg(text: str) -> int | str:
    """A capacity flag's value: "auto" or a whole number of tokens (checked by
    with_engine_capacity)."""
    return text if text == "auto" else int(text)


def with_engine_capacity(setup: ServeSetup, field: str, tokens: int | str) -> ServeSetup:
    """The setup with every engine's `field` (latency_capacity or throughput_capacity) set to
    `tokens` (e.g. calibrated to the hardware, docs/RESULTS.md), or "auto", instead of the
    config's; the path records it, so results say which capacity they ran with."""
    flag = CAPACITY_FLAGS[field]
    if tokens != "auto" and (isinstance(tokens, bool) or not isinstance(tokens, int)
                             or tokens < 1):
        raise LiveExperimentError(f"{flag}: {tokens!r} is not valid; allowed: integer >= 1 "
                                  "or auto")
    change: dict[str, Any] = {field: None if tokens == "auto" else tokens}
    return _every_engine(setup, lambda e: dataclasses.replace(e, **change), f"{field}={tokens}")


def with_engine_params(setup: ServeSetup, items: Sequence[str]) -> ServeSetup:
    """The setup with `KEY=VALUE` (YAML values) set in every engine's params, e.g.
    `prefill_attention=sdpa`; the path records them. The engine validates its params when it
    starts, before any experiment runs."""
    params: dict[str, Any] = {}
    for item in items:
        pair = key_value(item)
        if pair is None:
            raise LiveExperimentError(f"--engine-param: {item!r} is not KEY=VALUE")
        params[pair[0]] = pair[1]
    if not params:
        return setup
    return _every_engine(setup, lambda e: dataclasses.replace(e, params={**e.params, **params}),
                         " ".join(f"{k}={v}" for k, v in params.items()))


def _every_engine(setup: ServeSetup, change: Callable[[EngineSpec], EngineSpec],
                  said: str) -> ServeSetup:
    """The setup with `change` applied to every engine, its path saying `said`."""
    engines = tuple(change(e) for e in setup.config.engines)
    return ServeSetup(f"{setup.path} ({said})", dataclasses.replace(setup.config, engines=engines))


def setups_by_engines(setups: Sequence[ServeSetup],
                      experiments: Sequence[LiveExperiment]) -> dict[int, ServeSetup]:
    """The setup for each engine count the experiments need; a missing one is an error before
    anything starts (not a failed run half an hour in)."""
    by_count: dict[int, ServeSetup] = {}
    for setup in setups:
        if setup.num_engines in by_count:
            raise LiveExperimentError(f"{setup.path} and {by_count[setup.num_engines].path} "
                                      f"both have {setup.num_engines} engines; give one")
        by_count[setup.num_engines] = setup
    for e in experiments:
        if e.engines not in by_count:
            raise LiveExperimentError(
                f"{e.key} needs a config with {e.engines} engine(s); given: "
                + (", ".join(f"{s.path} ({s.num_engines})" for s in setups) or "none"))
    return by_count


# Poisson arrivals (gpts) warm for this many seconds at the run's own rate (the fixed-rate
# gpts run's own 20 s of arrivals): a shared-prefix graph bucket is met only at the batch
# sizes and group counts that the stream builds up, so a shorter warm-up leaves graphs to
# capture while timing (the captures per run are in its engine counters; docs/ENGINE.md).
WARMUP_ARRIVALS_S = 20.0


def warmup_spec(spec: WorkloadSpec, *, full_outputs: bool = False,
                arrivals_s: float = WARMUP_ARRIVALS_S) -> WorkloadSpec:
    """The same shapes (prompt lengths, batch sizes) with one app/round (a job trace: one job
    at once) and seconds of chat:
    compiles kernels and captures graphs for the sizes the timed run meets. Poisson requests
    arrive at the run's rate for `arrivals_s` (at least 8 requests, at most the run's; a rate
    search, whose spec has no rate of its own, warms with 8: `arrivals_s=0`).
    Outputs are cut to 8 tokens unless `full_outputs`: the engine captures every paged graph
    bucket at start-up, but a shared-prefix step's bucket (its suffix width grows with the
    tokens generated) only when a step first meets it, so the Parrot-mode warm-up generates
    the run's full outputs (measured: 3-4 such captures, 120-200 ms, inside timed runs
    warmed with 8 tokens)."""
    arrivals = max(8, math.ceil(spec.request_rate * arrivals_s))
    short = dataclasses.replace(spec, num_apps=1, rounds=1,
                                job_offsets=(0.0,) if spec.job_offsets else (),
                                num_requests=min(spec.num_requests, arrivals),
                                max_chat_s=min(spec.max_chat_s, 5.0))
    if full_outputs:
        return short
    low, high = spec.chat_output_tokens
    return dataclasses.replace(short, output_tokens=min(spec.output_tokens, 8),
                               chat_output_tokens=(min(low, 8), min(high, 8)))


def warmup_variants(compare: str) -> list[Variant]:
    """The variants an experiment warms with, in its order: every Parrot-mode variant (the
    shared-prefix buckets a run meets depend on where its policy places the calls, and a
    bucket first met in a timed run stalls the engine to capture it) and the first
    request-level one (no shared prefixes: its buckets are all captured at start-up)."""
    variants = parse_variants(compare)
    baseline = [v for v in variants if v.mode != "parrot"][:1]
    return [v for v in variants if v.mode == "parrot" or v in baseline]


RUN_TIMEOUT_S = 240.0  # one variant of one experiment; a stuck run must not eat the budget


async def run_variant(config: ServeConfig, experiment: LiveExperiment, variant: Variant,
               spec: WorkloadSpec, delay_s: tuple[float, float],
               timeout_s: float = RUN_TIMEOUT_S) -> VariantRun:
    params = {**experiment.policy_params.get(variant.policy, {}), **variant.policy_params}
    try:
        result = await asyncio.wait_for(run_live_async(
            config, variant.registry_name, params,
            WORKLOADS[experiment.workload], spec, mode=variant.mode, seed=spec.seed,
            delay_s=delay_s), timeout_s)
    except TimeoutError:
        return VariantRun(variant, "timeout", None, f"longer than {timeout_s:.0f}s")
    except Exception as exc:  # noqa: BLE001 - reported in the table, the next run goes on
        return VariantRun(variant, "error", None, f"{type(exc).__name__}: {exc}")
    return VariantRun.of(variant, result)


def _groups(experiments: Sequence[LiveExperiment]
            ) -> dict[tuple[int, str], list[LiveExperiment]]:
    """Experiments that can share engine processes: the same engine count and parameters."""
    groups: dict[tuple[int, str], list[LiveExperiment]] = {}
    for e in experiments:
        key = (e.engines, json.dumps(dict(e.engine_params), sort_keys=True))
        groups.setdefault(key, []).append(e)
    return groups


async def run_live_paper(setups: Sequence[ServeSetup], out: Path, *, smoke: bool,
                         budget_s: float, delay_s: tuple[float, float] = (0.2, 0.3),
                         experiments: Sequence[LiveExperiment] = LIVE_EXPERIMENTS,
                         log: Any = print) -> dict[str, Any]:
    """Run `experiments`, each on the setup with its number of engines; write
    OUT/results.json and OUT/table.txt (only these experiments: a subset run into another
    folder leaves earlier results alone)."""
    by_count = setups_by_engines(setups, experiments)
    started = time.perf_counter()
    results: dict[str, Any] = {}
    profiles: dict[str, Any] = {}    # each engine's reported speed profile (engine_profiles)

    def save_partial() -> None:
        # Saved as it goes: a run killed at the machine's time limit keeps what it measured.
        save_results(out, {"wall_s": time.perf_counter() - started, "smoke": smoke,
                    "partial": True, "engine_profiles": profiles, "experiments": results})
    for (count, params_key), group in _groups(experiments).items():
        setup, params = by_count[count], json.loads(params_key)
        specs = [LaunchSpec(e.name, e.kind, {**e.params, **params})
                 for e in setup.config.engines if e.kind != "remote"]
        launched = await launch_engines(specs, startup_timeout_s=600.0)
        try:
            served = as_remote(setup.config, {e.name: e.url for e in launched},
                               {e.name: e.process.secret for e in launched})
            log(f"{count} engine(s) up ({setup.path}, {params or 'default params'}) at "
                f"{time.perf_counter() - started:.0f}s; warming up")
            profiles.update(await engine_profiles(launched))
            for e in group:
                for variant in warmup_variants(e.compare):
                    spec = warmup_spec(e.workload_spec(smoke),
                                       full_outputs=variant.mode == "parrot",
                                       arrivals_s=0 if e.rate_search is not None
                                       else WARMUP_ARRIVALS_S)
                    await run_variant(served, e, variant, spec, delay_s)
            for e in group:
                if time.perf_counter() - started > budget_s:
                    log(f"{e.key}: skipped, the time budget ({budget_s:.0f}s) is spent")
                    results[e.key] = {"skipped": "time budget"}
                    continue
                if e.rate_search is not None:
                    def checkpoint(partial: dict[str, Any], key: str = e.key) -> None:
                        results[key] = partial
                        save_partial()

                    results[e.key] = await _run_rate_search(
                        served, setup.path, e, e.workload_spec(smoke), delay_s, log,
                        SMOKE_RATE_SEARCH if smoke else e.rate_search, checkpoint,
                        deadline=started + budget_s, engines=launched)
                else:
                    results[e.key] = await _run_experiment(served, setup.path, e,
                                                           e.workload_spec(smoke), delay_s,
                                                           log, launched)
                save_partial()
        finally:
            await stop_engines(launched)
    summary = {"wall_s": time.perf_counter() - started, "smoke": smoke, "device": device_name(),
               "engine_profiles": profiles, "experiments": results}
    log(save_results(out, summary))
    return summary


async def engine_profiles(engines: Sequence[Any]) -> dict[str, Any]:
    """The speed profile each engine reported (its start-up probe's; None: none) and the
    latency capacity the paper's rule gives it (what `latency_capacity: auto` uses)."""
    profiles: dict[str, Any] = {}
    for launched in engines:
        profile = (await launched.engine.info()).speed_profile
        profiles[launched.name] = None if profile is None else {
            **profile.to_latency_profile(),
            "calibrated_latency_capacity": calibrated_latency_capacity(profile)}
    return profiles


async def _run_experiment(served: ServeConfig, config_path: str, e: LiveExperiment,
                          spec: WorkloadSpec, delay_s: tuple[float, float],
                          log: Any, engines: Sequence[Any] = ()) -> dict[str, Any]:
    variants = parse_variants(e.compare)
    runs, counters, windows = [], {}, {}
    for variant in variants:
        await reset_prefix_caches(engines)
        before = await engine_counters(engines)
        began = time.time()
        run = await run_variant(served, e, variant, spec, delay_s)
        # the run's wall-clock span: its steps in an engine's step trace
        # (bench/step_trace_report.py --results ... --run KEY/LABEL)
        windows[variant.label] = [round(began, 3), round(time.time(), 3)]
        after = await engine_counters(engines)
        # What each engine did during this run: graphs it had to capture (each stalled it; a
        # variant that meets buckets no earlier run met pays for them), steps, step time.
        counters[variant.label] = counter_delta(before, after)
        log(f"{e.key} {variant.label}: {run.status}"
            + (f" {run.result.duration_s:.2f}s" if run.result else f" {run.error}")
            + counters_text(counters[variant.label]))
        runs.append(run)
    wanted = parse_variants(e.reference)[0].label
    reference = next(v for v in variants if v.label == wanted)
    settings = Settings(e.workload, live=True, seed=spec.seed, workload_spec=spec,
                        serve_config=config_path, policy_params=e.policy_params)
    results = results_json(settings, runs, reference)
    for label, per_engine in counters.items():
        if label in results["variants"]:
            results["variants"][label]["engine_counters"] = per_engine
            results["variants"][label]["wall_window"] = windows[label]
            # TPOT live: the engines' own (the manager sees no token times over HTTP unless
            # an output is streamed, and the runs do not stream)
            results["variants"][label]["engine_tpot_s"] = engine_tpot_s(per_engine)
    return {**results, "num_engines": e.engines}


async def _run_rate_search(served: ServeConfig, config_path: str, e: LiveExperiment,
                           spec: WorkloadSpec, delay_s: tuple[float, float], log: Any,
                           search_spec: RateSearchSpec,
                           checkpoint: Callable[[dict[str, Any]], None] | None = None,
                           deadline: float = math.inf,
                           engines: Sequence[Any] = ()) -> dict[str, Any]:
    """Per variant, the highest Poisson rate whose mean latency per output token stays within
    the target (sweep.RateSearch; requests arrive over `window_s` at each rate tried). After
    each variant, `checkpoint` gets the result so far: a search of several variants takes
    minutes, and one killed at a machine's time limit keeps the variants it finished
    (measured: a live search of four variants ran past a 600 s limit and lost all four).
    No rate starts after `deadline` (`time.perf_counter()`): the variant being searched and
    the ones after it are `{"skipped": "time budget"}` (the unfinished one keeps the points
    it measured), the finished ones keep their rates. Each point carries what each engine
    did at that rate (`engine_counters`, as an experiment's runs do)."""
    variants = parse_variants(e.compare)
    reference = parse_variants(e.reference)[0].label
    found: dict[str, Any] = {}
    for variant in variants:
        search = RateSearch(start=search_spec.start, max_rate=search_spec.max_rate,
                            refinements=search_spec.refinements)
        counters_at: dict[float, dict[str, dict[str, int]]] = {}
        while (rate := search.next_rate()) is not None:
            if time.perf_counter() > deadline:
                break
            at = dataclasses.replace(spec, request_rate=rate, num_requests=max(
                1, math.ceil(rate * search_spec.window_s)))
            # a rate far past the knee would drain for minutes: it has failed long before
            await reset_prefix_caches(engines)
            before = await engine_counters(engines)
            run = await run_variant(served, e, variant, at, delay_s,
                             min(RUN_TIMEOUT_S, 4 * search_spec.window_s + 60))
            counters_at[rate] = counter_delta(before, await engine_counters(engines))
            settings = Settings(e.workload, live=True, seed=spec.seed, workload_spec=at,
                                serve_config=config_path, policy_params=e.policy_params)
            entry = results_json(settings, [run], variant)["variants"][variant.label]
            ok, norm = meets_target(entry, search_spec.target_s_per_token)
            search.record(rate, ok, norm)
            log(f"{e.key} {variant.label}: {rate:.3g} req/s -> "
                f"{'-' if norm is None else f'{norm * 1000:.1f}'} ms/token "
                f"({'within' if ok else 'over'} the target; {run.status}"
                + (f": {run.error}" if run.error else "") + ")")
        sustained, points = search.result
        measured = [{**dataclasses.asdict(p), "engine_counters": counters_at.get(p.rate, {})}
                    for p in points]
        if search.next_rate() is not None:   # stopped by the deadline, not by the search
            found[variant.label] = ({"skipped": "time budget", "points": measured} if measured
                                    else {"skipped": "time budget"})
            log(f"{e.key} {variant.label}: stopped, the time budget is spent")
        else:
            found[variant.label] = {"sustainable_rate": sustained,
                                    "capped": search.bad is None and sustained > 0,
                                    "points": measured}
        base = found.get(reference, {}).get("sustainable_rate")
        for entry in found.values():   # none until the reference's search has run
            if "sustainable_rate" in entry:
                entry["ratio_vs_reference"] = (entry["sustainable_rate"] / base if base
                                               else None)
                entry["reference_rate"] = base
        result = {"workload": e.workload, "mode": "live", "reference": reference,
                  "app_clock": APP_CLOCK,
                  "rate_search": dataclasses.asdict(search_spec), "serve_config": config_path,
                  "workload_spec": dataclasses.asdict(spec), "num_engines": e.engines,
                  "variants": found}
        if checkpoint is not None and len(found) < len(variants):
            checkpoint(result)
    return result


def run(setups: Sequence[ServeSetup], out: Path, *, smoke: bool, budget_s: float,
        delay_s: tuple[float, float],
        experiments: Sequence[LiveExperiment] = LIVE_EXPERIMENTS) -> int:
    summary = asyncio.run(run_live_paper(setups, out, smoke=smoke, budget_s=budget_s,
                                         delay_s=delay_s, experiments=experiments))
    ok = all("skipped" in r or "rate_search" in r   # a search's failed rates are its data
             or all(v["status"] == "ok" for v in r["variants"].values())
             for r in summary["experiments"].values())
    return 0 if ok else 1
