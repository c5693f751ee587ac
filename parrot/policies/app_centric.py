"""Application-centric scheduling: the paper's Algorithm 1 (Parrot, OSDI'24, section 5.4).

Ready calls are visited in the order given (submission order); each one goes to
the first of:

1. **its task group's engine**: the engine already holding a call of its group, or, for a new
   group, an engine with room for the whole group (`task_group_size × num_tokens` under the
   capacity for the call's criterion, THROUGHPUT for deduced groups), so parallel
   calls feeding one consumer are batched together and finish together;
2. **a prefix-sharing engine**: deepest prefix hash first, an engine that has (or is getting,
   this round) a context with that prefix, so the engine forks the KV cache instead of
   recomputing it; gated by load, so one hot prefix cannot pile onto one engine;
3. **the best engine for its criterion**: LATENCY calls keep an engine's token load under
   `latency_capacity` and prefer engines already serving latency calls (least loaded first);
   THROUGHPUT calls may fill an engine up to `throughput_capacity` and prefer engines already
   serving throughput calls (most loaded first, for large batches). The two kinds are kept on
   different engines unless nothing else fits;
4. **an idle engine**, whatever the call's size, so no call starves.

A call that fits nowhere stays queued until the next round.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from parrot.policies.base import CallView, EngineView, Placement, Policy, PolicyParams
from parrot.policies.params import PolicyConfigError, check_number
from parrot.types import Criterion


@dataclass(frozen=True)
class AppCentricParams(PolicyParams):
    # Objective of a call nobody asked about yet (no `get` reached it). The manager counts
    # such calls as LATENCY in EngineView, so that default keeps both sides consistent.
    default_criterion: Criterion = Criterion.LATENCY
    # Prefix affinity sends a call to an engine only while that engine's load after placing
    # it stays under this fraction of the capacity that applies there; past it the call
    # spills to the best engine (which then builds the prefix too).
    affinity_max_load_fraction: float = 0.8
    # Keep latency and throughput calls on different engines where the cluster allows.
    isolate_criteria: bool = True
    # Ablation switches (the paper's "affinity scheduling off" experiment).
    prefix_affinity: bool = True
    colocate_task_groups: bool = True

    def __post_init__(self) -> None:
        owner = "app_centric"
        if not isinstance(self.default_criterion, Criterion):
            raise PolicyConfigError(
                f"{owner}.default_criterion: {self.default_criterion!r} is not one of "
                f"{[c.value for c in Criterion]}")
        check_number(owner, "affinity_max_load_fraction", self.affinity_max_load_fraction,
                     minimum=0.0, exclusive_minimum=True, maximum=1.0)
        for key in ("isolate_criteria", "prefix_affinity", "colocate_task_groups"):
            if not isinstance(getattr(self, key), bool):
                raise PolicyConfigError(
                    f"{owner}.{key}: {getattr(self, key)!r} is not valid; allowed: true, false")


_OTHER = {Criterion.LATENCY: Criterion.THROUGHPUT, Criterion.THROUGHPUT: Criterion.LATENCY}


@dataclass
class _Slot:
    """One engine's load during a scheduling round: its snapshot plus what this round placed."""

    view: EngineView
    index: int                      # position in the given engine order (deterministic ties)
    load: int
    num_calls: int
    num_by_criterion: dict[Criterion, int]
    # What this round placed here; the snapshot's own sets are read, never copied (an
    # engine may hold many cached prefixes).
    placed_task_groups: set[str] = field(default_factory=set)
    placed_prefixes: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, view: EngineView, index: int) -> "_Slot":
        return cls(view=view, index=index, load=view.num_tokens_in_use,
                   num_calls=view.num_running_calls,
                   num_by_criterion={Criterion.LATENCY: view.num_latency_calls,
                                     Criterion.THROUGHPUT: view.num_throughput_calls})

    def holds_task_group(self, task_group: str) -> bool:
        return task_group in self.placed_task_groups or task_group in self.view.task_groups

    def holds_prefix(self, prefix: str) -> bool:
        return prefix in self.placed_prefixes or prefix in self.view.cached_prefixes

    @property
    def is_idle(self) -> bool:
        return self.num_calls == 0

    def serves(self, criterion: Criterion) -> bool:
        return self.num_by_criterion[criterion] > 0

    def capacity(self, criterion: Criterion) -> int:
        # Latency calls are only fast while the whole engine is lightly loaded, so an engine
        # serving any latency call is held to the latency capacity, whoever joins it.
        if criterion is Criterion.LATENCY or self.serves(Criterion.LATENCY):
            return self.view.latency_capacity
        return self.view.throughput_capacity

    def has_room(self, num_tokens: int, criterion: Criterion, fraction: float = 1.0) -> bool:
        return self.load + num_tokens <= fraction * self.capacity(criterion)

    def add(self, call: CallView, criterion: Criterion) -> None:
        self.load += call.num_tokens
        self.num_calls += 1
        self.num_by_criterion[criterion] += 1
        if call.task_group is not None:
            self.placed_task_groups.add(call.task_group)
        self.placed_prefixes.update(call.prefix_hashes)


class AppCentricPolicy(Policy):
    name = "app_centric"
    Params = AppCentricParams
    params: AppCentricParams

    def schedule(self, *, calls: Sequence[CallView],
                 engines: Sequence[EngineView]) -> list[Placement]:
        slots = [_Slot.of(e, i) for i, e in enumerate(engines) if e.is_healthy]
        placements = []
        for call in calls:
            criterion = self._criterion(call)
            slot = self._place(call, criterion, slots)
            if slot is None:
                continue  # stays queued: nothing has room now and no engine is idle
            slot.add(call, criterion)
            placements.append(Placement(call.call_id, slot.view.engine_id))
        return placements

    def _criterion(self, call: CallView) -> Criterion:
        return call.criterion if call.criterion is not None else self.params.default_criterion

    def _place(self, call: CallView, criterion: Criterion, slots: list[_Slot]) -> _Slot | None:
        if call.task_group is not None and self.params.colocate_task_groups:
            holders = [s for s in slots if s.holds_task_group(call.task_group)]
            if holders:
                fitting = [s for s in holders if s.has_room(call.num_tokens, criterion)]
                if fitting:
                    return min(fitting, key=lambda s: self._rank(s, criterion))
                # The group's engines are full: run this member elsewhere rather than wait.
            else:
                group_tokens = call.task_group_size * call.num_tokens
                slot = (self._by_prefix(call, criterion, slots, group_tokens)
                        or self._best(criterion, slots, group_tokens))
                if slot is not None:
                    return slot
        return (self._by_prefix(call, criterion, slots, call.num_tokens)
                or self._best(criterion, slots, call.num_tokens)
                or next((s for s in slots if s.is_idle), None))

    def _by_prefix(self, call: CallView, criterion: Criterion, slots: list[_Slot],
                   num_tokens: int) -> _Slot | None:
        """The engine holding the deepest shared prefix that still has room under the gate."""
        if not self.params.prefix_affinity:
            return None
        fraction = self.params.affinity_max_load_fraction
        for prefix in reversed(call.prefix_hashes):
            holders = [s for s in slots if s.holds_prefix(prefix)
                       and not self._conflicts(s, criterion)
                       and s.has_room(num_tokens, criterion, fraction)]
            if holders:
                return min(holders, key=lambda s: self._rank(s, criterion))
        return None

    def _best(self, criterion: Criterion, slots: list[_Slot], num_tokens: int) -> _Slot | None:
        fitting = [s for s in slots if s.has_room(num_tokens, criterion)]
        return min(fitting, key=lambda s: self._rank(s, criterion), default=None)

    def _conflicts(self, slot: _Slot, criterion: Criterion) -> bool:
        return self.params.isolate_criteria and slot.serves(_OTHER[criterion])

    def _rank(self, slot: _Slot, criterion: Criterion) -> tuple[bool, bool, int, int]:
        """Sort key, smallest best: no conflict, same mode before idle, then by load."""
        same_mode = self.params.isolate_criteria and slot.serves(criterion)
        # Latency calls spread (least loaded); throughput calls pack (most loaded, big batch).
        load = slot.load if criterion is Criterion.LATENCY else -slot.load
        return (self._conflicts(slot, criterion), not same_mode, load, slot.index)
