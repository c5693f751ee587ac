"""Compare policy/mode variants on one workload: run each, summarize, compute speedups.

A variant is a policy (built-in name or a `module:Class`) and a frontend mode: `app_centric`
(parrot mode), `least_queue:baseline`.
"""

from __future__ import annotations

import datetime
import platform
from dataclasses import asdict, dataclass, field
from typing import Any
from collections.abc import Callable, Mapping

from parrot.frontend.session import MODES
from parrot.sim.clock import VirtualClockDeadlockError
from parrot.sim.cluster import ClusterSpec, RunResult, run_simulation
from parrot.sim.summary import (distribution, per_app_speedups, summarize,
                                tpot_against_target)
from parrot.sim.workloads.registry import WORKLOADS
from parrot.sim.workloads.base import APP_CLOCK, AppRecord
from parrot.sim.workloads.spec import WorkloadSpec
from parrot.validation import key_value


class CompareError(ValueError):
    """A bad variant list or setting; the message names it and what is allowed."""


@dataclass(frozen=True)
class Variant:
    """A policy (registry name or module:Class), a frontend mode, and parameters of this
    variant only: policy params over `--policy-param`'s, engine params over the profile's
    (e.g. `shared_prefix_decode: false`: KV shared, decode reads the prefix per sequence)."""

    policy: str
    mode: str = "parrot"
    policy_params: Mapping[str, Any] = field(default_factory=dict)
    engine_params: Mapping[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        extras = [f"+policy.{k}={_text(v)}" for k, v in sorted(self.policy_params.items())]
        extras += [f"+engine.{k}={_text(v)}" for k, v in sorted(self.engine_params.items())]
        return f"{self.policy}:{self.mode}" + "".join(extras)

    @property
    def registry_name(self) -> str:
        return self.policy


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def parse_variant(item: str) -> Variant:
    """`policy[:mode][+policy.KEY=VALUE][+engine.KEY=VALUE]...`; values are YAML scalars."""
    head, *extras = item.split("+")
    policy, _, mode = head.rpartition(":")
    if mode not in MODES:
        policy, mode = head, "parrot"
    elif not policy:
        raise CompareError(f"--compare: {item!r} has a mode but no policy")
    params: dict[str, dict[str, Any]] = {"policy": {}, "engine": {}}
    for extra in extras:
        pair = key_value(extra)
        scope, dot, name = pair[0].partition(".") if pair else ("", "", "")
        if pair is None or not dot or scope not in params or not name:
            raise CompareError(f"--compare: {extra!r} in {item!r} is not valid; expected "
                               "+policy.KEY=VALUE or +engine.KEY=VALUE, e.g. "
                               "app_centric+policy.prefix_affinity=false")
        params[scope][name] = pair[1]
    return Variant(policy, mode, params["policy"], params["engine"])


def parse_variants(text: str) -> list[Variant]:
    """`a,b:baseline,pkg.mod:Cls:parrot,a+engine.k=v` → variants; a trailing
    `:parrot|:baseline` is the mode (parrot by default), anything before it the policy."""
    variants = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            raise CompareError(f"--compare: empty item in {text!r}; expected "
                               "policy[:mode],... e.g. app_centric,least_queue:baseline")
        variant = parse_variant(item)
        if variant in variants:
            raise CompareError(f"--compare: {variant.label} is listed twice")
        variants.append(variant)
    return variants


@dataclass(frozen=True)
class Settings:
    workload: str
    live: bool = False
    seed: int = 0
    cluster: ClusterSpec = field(default_factory=ClusterSpec)  # policy fields unused
    workload_spec: WorkloadSpec = field(default_factory=WorkloadSpec)
    policy_params: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    serve_config: str | None = None     # live mode: the parrot-serve YAML (engines)

    def __post_init__(self) -> None:
        if self.workload not in WORKLOADS:
            raise CompareError(f"--workload: {self.workload!r} is not valid; allowed: "
                               f"{sorted(WORKLOADS)}")

    def params_for(self, variant: Variant) -> dict[str, Any]:
        return {**self.policy_params.get(variant.policy, {}), **variant.policy_params}


@dataclass
class VariantRun:
    variant: Variant
    status: str                     # ok | deadlock | error (an application failed)
    result: RunResult | None
    error: str | None = None

    @property
    def records(self) -> list[AppRecord]:
        return self.result.records if self.result else []

    @classmethod
    def of(cls, variant: Variant, result: RunResult) -> VariantRun:
        """A finished run: `error` when an application failed. Its mean would cover only the
        others and read as a speedup (measured: a policy that failed 20 of 25 chains showed
        3x), so no speedup is computed for it."""
        failed = [r.error for r in result.records if r.error]
        if not failed:
            return cls(variant, "ok", result)
        return cls(variant, "error", result,
                   f"{len(failed)} application(s) failed; first: {failed[0]}")


def run_variant(settings: Settings, variant: Variant,
                on_app: Callable[[AppRecord], None] | None = None) -> VariantRun:
    workload = WORKLOADS[settings.workload]
    params = settings.params_for(variant)
    try:
        if settings.live:
            from parrot.serve_config import ServeConfig
            from parrot.sim.live import run_live, with_engine_params

            config = ServeConfig.load(settings.serve_config or "policies.yaml")
            config = with_engine_params(config, variant.engine_params)
            result = run_live(config, variant.registry_name, params, workload,
                              settings.workload_spec, mode=variant.mode, seed=settings.seed,
                              delay_s=settings.cluster.network_delay_s, on_app=on_app)
        else:
            from dataclasses import replace

            cluster = replace(settings.cluster, policy=variant.registry_name,
                              policy_params=params,
                              engine_params={**settings.cluster.engine_params,
                                             **variant.engine_params})
            result = run_simulation(cluster, workload, settings.workload_spec,
                                    mode=variant.mode, seed=settings.seed, on_app=on_app)
    except VirtualClockDeadlockError as exc:
        # Every request waits on KV blocks no one will free (the simulated engine does not
        # preempt): the variant cannot sustain this load. Reported, not fatal.
        return VariantRun(variant, "deadlock", None, str(exc))
    return VariantRun.of(variant, result)


def results_json(settings: Settings, runs: list[VariantRun], reference: Variant) -> dict:
    """The content of results.json."""
    variants: dict[str, Any] = {}
    for run in runs:
        entry: dict[str, Any] = {"policy": run.variant.policy, "mode": run.variant.mode,
                                 "policy_params": dict(run.variant.policy_params),
                                 "engine_params": dict(run.variant.engine_params),
                                 "status": run.status}
        if run.result is not None:
            entry.update(summarize(run.result.records, run.result.engines,
                                   run.result.duration_s))
            entry["peak_kv_tokens"] = run.result.peak_kv_tokens
            entry["tpot_s"] = distribution(run.result.tpot_s)
            entry["tpot_by_engine"] = tpot_against_target(
                run.result.tpot_s_by_engine, settings.params_for(run.variant).get(
                    "tpot_target_ms"))
            entry["wall_s"] = run.result.wall_s
            entry["network_messages"] = run.result.network_messages
            entry["apps"] = [r.to_json() for r in run.result.records]
        else:
            entry["e2e_latency_s"] = {"mean": None, "p50": None, "p99": None}
        if run.error is not None:
            entry["error"] = run.error
        variants[run.variant.label] = entry
    comparable = {run.variant.label: run.status == "ok" for run in runs}
    ref_mean = (variants[reference.label]["e2e_latency_s"]["mean"]
                if comparable[reference.label] else None)
    speedups = {label: (ref_mean / v["e2e_latency_s"]["mean"]
                        if ref_mean and comparable[label] and v["e2e_latency_s"]["mean"]
                        else None)
                for label, v in variants.items()}
    by_label = {run.variant.label: run for run in runs}
    per_app = {label: per_app_speedups(by_label[reference.label].records, run.records)
               for label, run in by_label.items()}
    return {
        "workload": settings.workload,
        "mode": "live" if settings.live else "sim",
        "seed": settings.seed,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.machine()} {platform.system()} "
                   f"python {platform.python_version()}",
        # Live runs serve `serve_config`'s engines (each variant's `engines` says what they
        # ran with): the simulated cluster's fields would only mislead there.
        "settings": {"cluster": None if settings.live else {
                         k: v for k, v in asdict(settings.cluster).items()
                         if k not in ("policy", "policy_params")},
                     "workload": asdict(settings.workload_spec),
                     "policy_params": {k: dict(v) for k, v in settings.policy_params.items()},
                     "serve_config": settings.serve_config},
        "app_clock": APP_CLOCK,
        "reference": reference.label,
        "speedup_vs_reference": speedups,
        "per_app_speedup_vs_reference": per_app,
        "variants": variants,
    }
