"""The paper's experiments live: one engine process (builtin, LLaMA-7B shape on one H200)
shared by every run, a fresh manager per (experiment, variant), a warm-up pass first.

    scripts/live_paper.sh                          # on the GPU machine, results under $OUT
    PARROT_LIVE_SMOKE=1 scripts/live_paper.sh      # tiny random model on the CPU, minutes

Engines with other parameters (copilot's static-sharing variant turns the shared-prefix
kernel off) get their own process, started after the first one stops. Every run's figures go
into one results.json; table.txt holds the printed table.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Mapping

from parrot.core.config import ServeConfig
from parrot.engines.launcher import LaunchSpec
from parrot.engines.launcher import launch_engines, stop_engines
from parrot.sim.compare import Settings, Variant, VariantRun, parse_variants, results_json
from parrot.sim.live import as_remote, run_live_async
from parrot.sim.workloads.registry import WORKLOADS
from parrot.sim.workloads.spec import WorkloadSpec

# Turns the builtin engine's shared-prefix decode kernel off: forks still share KV blocks,
# decode reads the prefix once per sequence (vLLM-style static prefix sharing).
STATIC_SHARING = {"shared_prefix_min_group": 1_000_000}


@dataclass(frozen=True)
class LiveExperiment:
    key: str
    workload: str
    compare: str
    reference: str
    spec: Mapping[str, Any]
    smoke_spec: Mapping[str, Any]
    engine_params: Mapping[str, Any] = field(default_factory=dict)


_CHAIN = {"doc_tokens": 8192, "chunk_tokens": 1024, "output_tokens": 50}
_SMOKE_DOC = {"doc_tokens": 1024, "chunk_tokens": 256, "output_tokens": 4}
_COPILOT_SMOKE = {"num_clients": 4, "system_prompt_tokens": 300, "output_tokens": 4}

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
)


def warmup_spec(spec: WorkloadSpec) -> WorkloadSpec:
    """The same shapes (prompt lengths, batch sizes) with short outputs and one app/round:
    compiles kernels and captures graphs for the sizes the timed run meets."""
    return dataclasses.replace(spec, output_tokens=min(spec.output_tokens, 8), num_apps=1,
                               rounds=1)


RUN_TIMEOUT_S = 240.0  # one variant of one experiment; a stuck run must not eat the budget


async def _run(config: ServeConfig, experiment: LiveExperiment, variant: Variant,
               spec: WorkloadSpec, delay_s: tuple[float, float]) -> VariantRun:
    try:
        result = await asyncio.wait_for(run_live_async(
            config, variant.registry_name, dict(variant.policy_params),
            WORKLOADS[experiment.workload], spec, mode=variant.mode, seed=spec.seed,
            delay_s=delay_s), RUN_TIMEOUT_S)
    except TimeoutError:
        return VariantRun(variant, "timeout", None, f"longer than {RUN_TIMEOUT_S:.0f}s")
    except Exception as exc:  # noqa: BLE001 - reported in the table, the next run goes on
        return VariantRun(variant, "error", None, f"{type(exc).__name__}: {exc}")
    failed = [r.error for r in result.records if r.error]
    return VariantRun(variant, "error" if failed else "ok", result,
                      failed[0] if failed else None)


async def run_live_paper(config: ServeConfig, out: Path, *, smoke: bool, budget_s: float,
                         delay_s: tuple[float, float] = (0.2, 0.3),
                         experiments: tuple[LiveExperiment, ...] = LIVE_EXPERIMENTS,
                         log: Any = print) -> dict[str, Any]:
    started = time.perf_counter()
    results: dict[str, Any] = {}
    groups: dict[str, list[LiveExperiment]] = {}
    for e in experiments:
        groups.setdefault(json.dumps(dict(e.engine_params), sort_keys=True), []).append(e)
    for params_key, group in groups.items():
        params = json.loads(params_key)
        specs = [LaunchSpec(e.name, e.kind, {**e.params, **params})
                 for e in config.engines if e.kind != "remote"]
        launched = await launch_engines(specs, startup_timeout_s=600.0)
        try:
            served = as_remote(config, {e.name: e.url for e in launched},
                               {e.name: e.process.secret for e in launched})
            log(f"engines up ({params or 'default params'}) at "
                f"{time.perf_counter() - started:.0f}s; warming up")
            for e in group:
                spec = WorkloadSpec(**{**WORKLOADS[e.workload].spec_defaults,
                                       **(e.smoke_spec if smoke else e.spec)})
                for variant in {v.mode: v for v in parse_variants(e.compare)}.values():
                    await _run(served, e, variant, warmup_spec(spec), delay_s)
            for e in group:
                if time.perf_counter() - started > budget_s:
                    log(f"{e.key}: skipped, the time budget ({budget_s:.0f}s) is spent")
                    results[e.key] = {"skipped": "time budget"}
                    continue
                spec = WorkloadSpec(**{**WORKLOADS[e.workload].spec_defaults,
                                       **(e.smoke_spec if smoke else e.spec)})
                variants = parse_variants(e.compare)
                runs = []
                for variant in variants:
                    run = await _run(served, e, variant, spec, delay_s)
                    log(f"{e.key} {variant.label}: {run.status}"
                        + (f" {run.result.duration_s:.2f}s" if run.result else f" {run.error}"))
                    runs.append(run)
                wanted = parse_variants(e.reference)[0].label
                reference = next(v for v in variants if v.label == wanted)
                settings = Settings(e.workload, live=True, seed=spec.seed, workload_spec=spec,
                                    serve_config="configs/live_h200_llama7b.yaml")
                results[e.key] = results_json(settings, runs, reference)
        finally:
            await stop_engines(launched)
    wall = time.perf_counter() - started
    summary = {"wall_s": wall, "smoke": smoke, "experiments": results}
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(summary, indent=2) + "\n")
    table = live_table(summary)
    (out / "table.txt").write_text(table + "\n")
    log(table)
    return summary


def live_table(summary: dict[str, Any]) -> str:
    lines = [f"live paper runs ({'smoke, tiny model on the CPU' if summary['smoke'] else 'H200'}"
             f"; {summary['wall_s']:.0f}s wall); x = mean E2E of the reference / mean E2E",
             f"{'experiment':<20} {'variant':<42} {'status':<8} {'mean s':>8} {'x':>7}"]
    for key, results in summary["experiments"].items():
        if "skipped" in results:
            lines.append(f"{key:<20} {'-':<42} {'skipped':<8}")
            continue
        for label, v in results["variants"].items():
            mean = v["e2e_latency_s"]["mean"]
            x = results["speedup_vs_reference"][label]
            lines.append(f"{key:<20} {label:<42} {v['status']:<8} "
                         f"{'-' if mean is None else f'{mean:.2f}':>8} "
                         f"{'-' if x is None else f'{x:.2f}x':>7}")
    return "\n".join(lines)


def run(config: ServeConfig, out: Path, *, smoke: bool, budget_s: float,
        delay_s: tuple[float, float]) -> int:
    summary = asyncio.run(run_live_paper(config, out, smoke=smoke, budget_s=budget_s,
                                         delay_s=delay_s))
    ok = all("skipped" in r or all(v["status"] == "ok" for v in r["variants"].values())
             for r in summary["experiments"].values())
    return 0 if ok else 1
