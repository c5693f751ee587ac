"""Compare policy/mode variants on one workload: run each, summarize, compute speedups.

A variant is a policy (built-in name or a `module:Class`) and a frontend mode: `app_centric` (parrot mode), `least_queue:baseline`.
"""

from __future__ import annotations

import datetime
import platform
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping

from parrot.frontend.session import MODES
from parrot.sim.clock import VirtualClockDeadlockError
from parrot.sim.cluster import ClusterSpec, RunResult, run_simulation
from parrot.sim.metrics import summarize
from parrot.sim.workloads.apps import WORKLOADS
from parrot.sim.workloads.base import AppRecord
from parrot.sim.workloads.spec import WorkloadSpec


class CompareError(ValueError):
    """A bad variant list or setting; the message names it and what is allowed."""


@dataclass(frozen=True)
class Variant:
    policy: str                 # a registry name or module:Class
    mode: str = "parrot"

    @property
    def label(self) -> str:
        return f"{self.policy}:{self.mode}"

    @property
    def registry_name(self) -> str:
        return self.policy


def parse_variants(text: str) -> list[Variant]:
    """`a,b:baseline,pkg.mod:Cls:parrot` → variants; a trailing `:parrot|:baseline` is the
    mode (parrot by default), anything before it the policy."""
    variants = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            raise CompareError(f"--compare: empty item in {text!r}; expected "
                               "policy[:mode],... e.g. app_centric,least_queue:baseline")
        policy, _, mode = item.rpartition(":")
        if mode not in MODES:
            policy, mode = item, "parrot"
        elif not policy:
            raise CompareError(f"--compare: {item!r} has a mode but no policy")
        variant = Variant(policy, mode)
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
        return dict(self.policy_params.get(variant.policy, {}))


@dataclass
class VariantRun:
    variant: Variant
    status: str                     # ok | deadlock | error
    result: RunResult | None
    error: str | None = None

    @property
    def records(self) -> list[AppRecord]:
        return self.result.records if self.result else []


def run_variant(settings: Settings, variant: Variant,
                on_app: Callable[[AppRecord], None] | None = None) -> VariantRun:
    workload = WORKLOADS[settings.workload]
    params = settings.params_for(variant)
    try:
        if settings.live:
            from parrot.core.config import ServeConfig
            from parrot.sim.live import run_live

            config = ServeConfig.load(settings.serve_config or "policies.yaml")
            result = run_live(config, variant.registry_name, params, workload,
                              settings.workload_spec, mode=variant.mode, seed=settings.seed,
                              delay_s=settings.cluster.network_delay_s, on_app=on_app)
        else:
            from dataclasses import replace

            cluster = replace(settings.cluster, policy=variant.registry_name,
                              policy_params=params)
            result = run_simulation(cluster, workload, settings.workload_spec,
                                    mode=variant.mode, seed=settings.seed, on_app=on_app)
    except VirtualClockDeadlockError as exc:
        # Every request waits on KV blocks no one will free (the simulated engine does not
        # preempt): the variant cannot sustain this load. Reported, not fatal.
        return VariantRun(variant, "deadlock", None, str(exc))
    return VariantRun(variant, "ok", result)


def results_json(settings: Settings, runs: list[VariantRun], reference: Variant) -> dict:
    """The content of results.json."""
    variants: dict[str, Any] = {}
    for run in runs:
        entry: dict[str, Any] = {"policy": run.variant.policy, "mode": run.variant.mode,
                                 "status": run.status}
        if run.result is not None:
            entry.update(summarize(run.result.records, run.result.engines,
                                   run.result.duration_s))
            entry["wall_s"] = run.result.wall_s
            entry["network_messages"] = run.result.network_messages
            entry["apps"] = [r.to_json() for r in run.result.records]
        else:
            entry["error"] = run.error
            entry["e2e_latency_s"] = {"mean": None, "p50": None, "p99": None}
        variants[run.variant.label] = entry
    ref_mean = variants[reference.label]["e2e_latency_s"]["mean"]
    speedups = {label: (ref_mean / v["e2e_latency_s"]["mean"]
                        if ref_mean and v["e2e_latency_s"]["mean"] else None)
                for label, v in variants.items()}
    return {
        "workload": settings.workload,
        "mode": "live" if settings.live else "sim",
        "seed": settings.seed,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.machine()} {platform.system()} "
                   f"python {platform.python_version()}",
        "settings": {"cluster": {k: v for k, v in asdict(settings.cluster).items()
                                 if k not in ("policy", "policy_params")},
                     "workload": asdict(settings.workload_spec),
                     "policy_params": {k: dict(v) for k, v in settings.policy_params.items()},
                     "serve_config": settings.serve_config},
        "reference": reference.label,
        "speedup_vs_reference": speedups,
        "variants": variants,
    }
