"""app_centric's parameters (the `policy:` keys of its YAML, docs/POLICIES.md's table): what
each rule of Algorithm 1 (app_centric.py) may trade, and the switches of its ablations."""

from __future__ import annotations

from dataclasses import dataclass

from parrot.errors import PolicyConfigError
from parrot.policies.base import PolicyParams
from parrot.types import Criterion
from parrot.validation import Checks


@dataclass(frozen=True)
class AppCentricParams(PolicyParams):
    # Objective of a call nobody asked about yet (no `get` reached it). The manager counts
    # such calls as LATENCY in EngineView, so that default keeps both sides consistent.
    default_criterion: Criterion = Criterion.LATENCY
    # Prefix affinity counts a held prefix as free only while the engine's load after taking
    # the call stays under this fraction of the capacity that applies there.
    affinity_max_load_fraction: float = 0.8
    # Keep latency and throughput calls on different engines where the cluster allows.
    isolate_criteria: bool = True
    # Throughput work is confined to the engines free of latency calls (the others held to
    # the latency capacity) only while that finishes it at most this fraction later than
    # spreading it over every engine (can_isolate): the price, in throughput work's time,
    # the latency calls' isolation may have.
    isolation_slack: float = 0.1
    # A task group (or shared-prefix set) stays on one engine while its estimated finish time
    # there is at most this fraction slower than the fastest placement.
    colocation_slack: float = 0.1
    # A latency call is never held to a step more than this fraction faster than it would
    # take alone: where a call's own prompt exceeds the latency capacity (a long system
    # prompt many requests fork), the engine may load up to the step of (1 + this) × that
    # call's solo step (placement.Slot.latency_limit). 0: the latency capacity only.
    latency_step_slack: float = 0.1
    # A latency call that fits under no engine's latency limit may still join an engine
    # serving only latency calls while one more concurrent call lowers the estimated mean
    # completion of the latency calls there and waiting, within free KV (contexts filled
    # ahead for waiting calls kept) and the throughput capacity
    # (placement.Slot.has_room_backlogged): a limit held while latency calls queue only
    # trades their wait for a faster step.
    admit_latency_backlog: bool = True
    # On an engine with no throughput work, in a round where none is ready (or throughput
    # work is isolated from latency engines), latency calls join up to the engine's own limit
    # (its free KV; placement.Slot.own_limit) instead of keeping to the latency capacity
    # among themselves: there, holding one back protects nothing, it only adds the
    # manager's queue to its latency. false: the paper's rule everywhere (the paper
    # experiments run with it).
    work_conserving: bool = True
    # Per-token latency target, ms per decode step at speed 1 (None: none). While an engine
    # carries latency work, no call joins it past the load whose step (by the engine's speed
    # profile) takes longer: a bound on all its tokens, latency and throughput alike, which
    # the latency backlog never passes (docs/POLICIES.md says what it guarantees).
    tpot_target_ms: float | None = None
    # With work_conserving: throughput work nobody waits on latency-critically (its demand is
    # THROUGHPUT: a batch job fetched as throughput, not a task group of a latency-critical
    # application) is placed after all other work of the round and held to the latency
    # capacity on an engine carrying latency calls even in a round that cannot isolate: the
    # latency calls' steps stay short, at the background work's expense (docs/POLICIES.md
    # measures both). false (default): it fills such engines to the throughput capacity like
    # any throughput call.
    hold_background_work: bool = False
    # Ablation switches (the paper's "affinity scheduling off" experiment).
    prefix_affinity: bool = True
    colocate_task_groups: bool = True

    def __post_init__(self) -> None:
        check = Checks("app_centric", PolicyConfigError)
        if not isinstance(self.default_criterion, Criterion):
            check.fail("default_criterion", f"{self.default_criterion!r} is not one of "
                                            f"{[c.value for c in Criterion]}")
        check.fraction("affinity_max_load_fraction", self.affinity_max_load_fraction)
        check.number("colocation_slack", self.colocation_slack, minimum=0.0, maximum=10.0)
        check.number("isolation_slack", self.isolation_slack, minimum=0.0, maximum=10.0)
        check.number("latency_step_slack", self.latency_step_slack, minimum=0.0, maximum=10.0)
        if self.tpot_target_ms is not None:
            check.positive("tpot_target_ms", self.tpot_target_ms)
            object.__setattr__(self, "tpot_target_ms", float(self.tpot_target_ms))
        for key in ("isolate_criteria", "prefix_affinity", "colocate_task_groups",
                    "admit_latency_backlog", "work_conserving", "hold_background_work"):
            check.boolean(key, getattr(self, key))
