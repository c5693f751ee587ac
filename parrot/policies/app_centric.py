"""Application-centric scheduling: the paper's Algorithm 1 (Parrot, OSDI'24, section 5.4), with
load-aware placement.

Each round, the ready calls (in the given first-come first-served order) are gathered into
*units* that are placed together:

* a **task group**: its ready members (parallel calls feeding one consumer);
* a **shared-prefix set** (the paper's `SharedReqsInQueue`): queued calls whose
  `shared_prefix` is the same hash, so the prefix is filled once and forked;
* otherwise a single call.

A unit is placed to minimise its estimated finish time (parrot/speed_profile.py: each engine's
speed profile, its load and the prompt tokens queued on it or placed on it this round):

1. **whole**: the best engine with room for the whole unit (a prefix counted once);
2. **split**: members one by one, each to the engine where it would finish first;

and the whole placement is taken while it is not more than `colocation_slack` slower than the
split (co-location has benefits the estimate does not see), or whenever the cluster is
**saturated** (the ready calls need more tokens than the engines have free: then splitting
shortens nothing, because other queued work takes the room, so groups stay whole and
throughput calls pack onto the fullest engine with room). An idle cluster therefore spreads a
task group over its engines and a busy one keeps it together.

Rules kept from the paper: **latency isolation** — LATENCY calls keep their own load on an
engine under `latency_capacity` (throughput work there slows them, which the cost prices),
throughput calls joining such an engine are held to it too while the engines free of latency
calls have room for the ready throughput work and confining it there costs it at most
`isolation_slack` (can_isolate; past that, isolation would only queue or slow it), and with
`isolate_criteria` the two criteria use different engines unless nothing else has room;
**prefix affinity gated on load** — an engine holding a call's prefix is costed without that
prefix's tokens only while its load after taking the call stays under
`affinity_max_load_fraction` × capacity. A latency call that fits under no latency limit
(a **latency backlog**) still joins an engine serving only latency calls while one more
concurrent call lowers the estimated mean completion of the latency calls there and waiting
(placement.Slot.has_room_backlogged): holding the limit then only trades their wait for a
faster step; behind running chains (each running latency call's application has its next
call waiting) a later application's call joins regardless, since it would wait for a whole
chain to end. An idle engine takes one call whatever its size, so no call starves; a call that
fits nowhere stays queued.

Where no throughput work is on or for an engine (`work_conserving`, the default), latency
calls are not held to the latency capacity among themselves: they fill it to its own limit
(its free KV), since holding one back there protects nobody. A per-token latency target
(`tpot_target_ms`) instead bounds every token on an engine carrying latency work, by the
engine's speed profile (placement.Slot.capacity).
"""

from __future__ import annotations

from operator import itemgetter
from collections.abc import Hashable, Sequence, Set

from parrot.policies.app_centric_params import AppCentricParams
from parrot.policies.base import CallView, EngineView, Placement, Policy
from parrot.policies.slots import (Demand, Slot, fastest_with_room, spread_finish_ms,
                                   with_room)
from parrot.types import Criterion

__all__ = ["AppCentricParams", "AppCentricPolicy"]


_OTHER = {Criterion.LATENCY: Criterion.THROUGHPUT, Criterion.THROUGHPUT: Criterion.LATENCY}
# The tiers of a work-conserving round (AppCentricPolicy._by_priority): latency units, the
# throughput units a latency-critical call waits on (task groups), background throughput.
_LATENCY, _THROUGHPUT, _BACKGROUND = 0, 1, 2
_TIER = itemgetter(0)

Assignment = tuple[CallView, Slot, Demand]
# An option's finish time, read without a Python call per option (options: slot, demand, ms)
_FINISH_MS = itemgetter(2)


class AppCentricPolicy(Policy):
    name = "app_centric"
    Params = AppCentricParams
    params: AppCentricParams

    def schedule(self, *, calls: Sequence[CallView],
                 engines: Sequence[EngineView]) -> list[Placement]:
        slots = [Slot.of(e, i, self.params.latency_step_slack,
                         tpot_target_ms=self.params.tpot_target_ms)
                 for i, e in enumerate(engines) if e.is_healthy]
        if not slots:
            return []
        isolates = self._can_isolate(calls, slots)
        # Holding a latency call back protects other work only where throughput work shares
        # its engine or may join it this round: with throughput calls ready, only an engine
        # already serving latency calls in a round that isolates (the throughput work goes to
        # the latency-free engines) places latency calls up to its own limit (Slot.capacity).
        throughput_ready = any(self._criterion(c) is Criterion.THROUGHPUT for c in calls)
        for slot in slots:
            slot.set_rules(isolates=isolates,
                           work_conserving=self.params.work_conserving and (
                               not throughput_ready
                               or (isolates and slot.serves(Criterion.LATENCY))),
                           work_conserving_mixed=self.params.work_conserving)
        saturated = self._saturation(calls, slots)
        placed: list[tuple[CallView, Slot]] = []
        reserved: set[int] = set()
        # Latency calls of this round not placed yet: the backlog a latency call past every
        # latency limit would otherwise wait in (Slot.has_room_backlogged).
        latency_waiting = sum(self._criterion(c) is Criterion.LATENCY for c in calls)
        holding_background = isolates   # (a round that isolates holds all throughput work)
        for tier, criterion, unit in self._by_priority(self._units(calls)):
            if tier == _BACKGROUND and not holding_background:
                # Background work comes last (_by_priority): from here on it is held to the
                # latency limit on engines serving latency calls, as in a round that isolates.
                holding_background = True
                for slot in slots:
                    slot.isolates = True
            # (read only: without a reservation, the slots themselves)
            usable = [s for s in slots if s.index not in reserved] if reserved else slots
            done = self._place_unit(unit, criterion, usable, saturated[criterion],
                                    latency_waiting)
            placed.extend(done)
            if criterion is Criterion.LATENCY:
                latency_waiting -= len(done)
            if len(done) < len(unit) and usable:
                # First come, first served: a call that fits nowhere keeps the engine where it
                # will fit first, so later (smaller) calls cannot overtake it there forever.
                placed_ids = {call.call_id for call, _ in done}
                waiting = next(c for c in unit if c.call_id not in placed_ids)
                reserved.add(self._fits_first(waiting, criterion, usable).index)
        # Dispatched in the given order (engines admit first come, first served).
        order = {call.call_id: i for i, call in enumerate(calls)}
        placed.sort(key=lambda p: order[p[0].call_id])
        return [Placement(call.call_id, slot.view.engine_id, self._criterion(call))
                for call, slot in placed]

    @property
    def tpot_target_ms(self) -> float | None:
        return self.params.tpot_target_ms

    def _criterion(self, call: CallView) -> Criterion:
        return call.criterion if call.criterion is not None else self.params.default_criterion

    def _units(self, calls: Sequence[CallView]) -> list[tuple[Criterion, list[CallView]]]:
        """Task groups, shared-prefix sets and single calls, in order of their first call."""
        units: dict[Hashable, tuple[Criterion, list[CallView]]] = {}
        for call in calls:
            criterion = self._criterion(call)
            key: Hashable
            if call.task_group is not None and self.params.colocate_task_groups:
                key = ("group", call.task_group, criterion)
            elif call.shared_prefix is not None and self.params.prefix_affinity:
                key = ("prefix", call.shared_prefix, criterion)
            else:
                key = ("call", call.call_id)
            units.setdefault(key, (criterion, []))[1].append(call)
        return list(units.values())

    def _by_priority(self, units: list[tuple[Criterion, list[CallView]]]
                     ) -> list[tuple[int, Criterion, list[CallView]]]:
        """Each unit with its tier (`_tier`). With `work_conserving`, latency units first,
        then throughput units, then (with `hold_background_work`) background throughput
        units, each tier in order: room that frees up goes to the calls whose latency someone
        waits on, directly or through a task group, and a throughput unit that fits nowhere
        keeps its engine only against later work of its tier or below. Otherwise first come,
        first served, as the paper."""
        tiered = [(self._tier(criterion, unit), criterion, unit) for criterion, unit in units]
        if not self.params.work_conserving:
            return tiered
        return sorted(tiered, key=_TIER)   # (stable: each tier keeps its order)

    def _tier(self, criterion: Criterion, unit: list[CallView]) -> int:
        """A unit's place in `_by_priority`'s order (_LATENCY, _THROUGHPUT, _BACKGROUND)."""
        if criterion is Criterion.LATENCY:
            return _LATENCY
        if (self.params.hold_background_work and self.params.work_conserving
                and all(call.demand is Criterion.THROUGHPUT for call in unit)):
            return _BACKGROUND
        return _THROUGHPUT

    def _can_isolate(self, calls: Sequence[CallView], slots: list[Slot]) -> bool:
        throughput = [c for c in calls if self._criterion(c) is Criterion.THROUGHPUT]
        return can_isolate(throughput, slots, self.params.isolation_slack)

    def _saturation(self, calls: Sequence[CallView],
                    slots: list[Slot]) -> dict[Criterion, bool]:
        """Per criterion: do the ready calls need more tokens than the engines have free?"""
        demand = {c: 0 for c in Criterion}
        for call in calls:
            demand[self._criterion(call)] += call.num_tokens
        return {c: exceeds_free(demand[c], slots, c) for c in Criterion}

    # --- one unit ----------------------------------------------------------------------------

    def _place_unit(self, unit: list[CallView], criterion: Criterion, slots: list[Slot],
                    saturated: bool, waiting: int = 0) -> list[tuple[CallView, Slot]]:
        """Place what fits of `unit` (the rest stays queued; `waiting`: the round's latency
        calls not placed before this unit); returns (call, slot) pairs."""
        placed: list[tuple[CallView, Slot]] = []
        assignments: list[Assignment] = []
        if slots and len(unit) == 1 and not unit[0].prefix_hashes and not (
                saturated and criterion is Criterion.THROUGHPUT):
            # The usual unit, one call without a prefix to reuse: its fastest engine, where
            # that decides (`_lone_fastest`); else the rules of `_assign`.
            lone = self._lone_fastest(unit[0], criterion, slots)
            if lone is not None:
                assignments = [(unit[0], *lone)]
        if slots and not assignments:
            assignments = self._assign(unit, criterion, slots, saturated)
        for call, slot, demand in assignments:
            slot.add_call(call, criterion, demand)
            placed.append((call, slot))
        if len(placed) == len(unit):
            return placed   # all of it fits: none waits for the backlog or an idle engine
        done = {call.call_id for call, _ in placed}
        # A per-token target is a promise the backlog would break: it never passes one.
        if (criterion is Criterion.LATENCY and self.params.admit_latency_backlog
                and self.params.tpot_target_ms is None):
            admitted = self._admit_backlog(unit, done, slots, waiting - len(placed))
            placed.extend(admitted)
            done.update(call.call_id for call, _ in admitted)
        for call in unit:  # fits nowhere: an idle engine still takes one call
            if call.call_id in done:
                continue
            idle = next((s for s in slots if s.is_idle), None)
            if idle is None:
                break
            demand = idle.demand([call], criterion, affinity=False, gate=1.0)
            idle.add_call(call, criterion, demand)
            placed.append((call, idle))
        return placed

    def _admit_backlog(self, unit: list[CallView], done: set[str],
                       slots: list[Slot], waiting: int) -> list[tuple[CallView, Slot]]:
        """The latency members of `unit` that fit under no latency limit (not in `done`, the
        ids placed already) and may join an engine past it (Slot.has_room_backlogged), in
        order: the first that may not stops the rest (first come, first served). `waiting`:
        the round's latency calls still unplaced, these among them."""
        admitted: list[tuple[CallView, Slot]] = []
        for call in unit:
            if call.call_id in done:
                continue
            slot = self._backlog_slot(call, slots, waiting)
            if slot is None:
                break
            slot.add_call(call, Criterion.LATENCY,
                          self._demand(slot, [call], Criterion.LATENCY, Demand()))
            admitted.append((call, slot))
            waiting -= 1
        return admitted

    def _backlog_slot(self, call: CallView, slots: list[Slot],
                      waiting: int) -> Slot | None:
        """The engine where a latency call with no room under any latency limit finishes
        first among those that may take it past the limit (Slot.has_room_backlogged)."""
        options = []
        for slot in slots:
            if slot.is_idle:
                continue   # the idle-engine rule below takes it whole
            demand = self._demand(slot, [call], Criterion.LATENCY, Demand())
            if slot.has_room_backlogged(demand, waiting, call):
                options.append((slot.finish_ms(demand), slot.index, slot))
        return min(options, key=lambda o: o[:2])[2] if options else None

    def _fits_first(self, call: CallView, criterion: Criterion, slots: list[Slot]) -> Slot:
        """The engine on which `call` lacks the fewest tokens of room."""
        return min(slots, key=lambda s: (self._demand(s, [call], criterion, Demand()).load
                                         + s.load - s.capacity(criterion), s.index))

    def _assign(self, unit: list[CallView], criterion: Criterion, pool: list[Slot],
                saturated: bool) -> list[Assignment]:
        """Whole or split (see the module docstring), as (call, slot, its demand) triples."""
        split, split_ms = self._split(unit, criterion, pool, saturated)
        if len(unit) == 1:
            return split
        whole = self._whole(unit, criterion, pool, saturated)
        if whole is None:
            return split
        slot, whole_ms = whole
        keep_together = (saturated or len(split) < len(unit)
                         or whole_ms <= split_ms * (1 + self.params.colocation_slack))
        if not keep_together:
            return split
        assignments: list[Assignment] = []
        total = Demand()
        brought: set[str] = set()
        for call in unit:
            after = self._demand(slot, [call], criterion, total, brought)
            assignments.append((call, slot, _delta(after, total)))
            total = after
            brought.update(call.prefix_hashes)
        return assignments

    def _whole(self, unit: list[CallView], criterion: Criterion, pool: list[Slot],
               saturated: bool) -> tuple[Slot, float] | None:
        """The best engine with room for every member, and the unit's finish time there."""
        options = []
        for slot in pool:
            if not slot.may_have_room(unit, criterion, Demand()):
                continue
            demand = self._demand(slot, unit, criterion, Demand())
            if (ms := slot.finish_if_room(demand, criterion)) is not None:
                options.append((slot, demand, ms))
        best = self._pick(options, unit[0], criterion, saturated)
        return None if best is None else (best[0], best[2])

    def _split(self, unit: list[CallView], criterion: Criterion, pool: list[Slot],
               saturated: bool) -> tuple[list[Assignment], float]:
        """Members one by one to where each finishes first; the unit's finish time (the latest
        engine's; 0.0 for a lone call, whose split `_assign` takes as it is)."""
        totals: dict[int, Demand] = {}
        brought: dict[int, set[str]] = {}
        assignments: list[Assignment] = []
        for call in unit:
            # Without prefixes to reuse, a call demands the same of every engine it starts on.
            plain = None if call.prefix_hashes else Demand(
                call.num_tokens, call.num_prompt_tokens, max(call.num_output_tokens, 1),
                own_min=call.num_tokens)
            if plain is not None and not totals:
                # The usual case in one pass: `has_room` of that demand decides alone (the
                # bound `may_have_room` checks is this very demand for a plain call).
                options = with_room(pool, plain, criterion)
            else:
                options = self._options(call, plain, criterion, pool, totals, brought)
            # Members of a larger unit go where they finish first: keeping them together is
            # the `whole` alternative, judged once against this split (slack applied once).
            best = self._pick(options, call, criterion, saturated, colocate=len(unit) == 1)
            if best is None:
                continue
            slot, after, _ = best
            before = totals.get(slot.index)
            # (the first on its engine adds all it demands: `after` is its delta, read only)
            assignments.append((call, slot, after if before is None else _delta(after, before)))
            totals[slot.index] = after
            brought.setdefault(slot.index, set()).update(call.prefix_hashes)
        if len(unit) == 1:
            return assignments, 0.0
        finish = max((s.finish_ms(totals[s.index]) for _, s, _ in assignments), default=0.0)
        return assignments, finish

    def _lone_fastest(self, call: CallView, criterion: Criterion,
                      pool: list[Slot]) -> tuple[Slot, Demand] | None:
        """Where a lone call with no prefix goes, and its demand there, when one pass over the
        engines decides it (`slots.fastest_with_room`); None where `_assign` must (no engine
        has room, or the rules below may pick another). Such a call demands the same of every
        engine, so `_pick` chooses the least (finish ms, not serving `criterion`, engine
        order) among the calm options within `colocation_slack` of the fastest, preferring
        ones holding its task group: the fastest itself, when it is calm (not serving the
        other criterion on an isolating engine) and the call seeks no task group."""
        demand = Demand(call.num_tokens, call.num_prompt_tokens, max(call.num_output_tokens, 1),
                        own_min=call.num_tokens)
        first = fastest_with_room(pool, demand, criterion)
        if first is None or (call.task_group is not None and self.params.colocate_task_groups):
            return None
        calm = (not self.params.isolate_criteria or not first.isolates
                or first.num_by_criterion[_OTHER[criterion]] <= 0)
        return (first, demand) if calm else None

    def _options(self, call: CallView, plain: Demand | None, criterion: Criterion,
                 pool: list[Slot], totals: dict[int, Demand],
                 brought: dict[int, set[str]]) -> list[tuple[Slot, Demand, float]]:
        """(slot, demand, finish ms) of each engine with room for `call` on top of what the
        unit placed there already (`totals`, bringing the prefixes `brought`)."""
        options = []
        empty = Demand()  # read, never changed
        for slot in pool:
            before = totals.get(slot.index)
            if not slot.may_have_room([call], criterion, before or empty):
                continue
            if plain is not None and before is None:
                after = plain
            else:
                after = self._demand(slot, [call], criterion, before or empty,
                                     brought.get(slot.index, frozenset()))
            if (ms := slot.finish_if_room(after, criterion)) is not None:
                options.append((slot, after, ms))
        return options

    def _demand(self, slot: Slot, calls: list[CallView], criterion: Criterion,
                base: Demand, brought: Set[str] = frozenset()) -> Demand:
        return slot.demand(calls, criterion, affinity=self.params.prefix_affinity,
                           gate=self.params.affinity_max_load_fraction, base=base,
                           brought=brought)

    def _pick(self, options: list[tuple[Slot, Demand, float]], call: CallView,
              criterion: Criterion, saturated: bool,
              colocate: bool = True) -> tuple[Slot, Demand, float] | None:
        """The engine to use among `options` (slot, demand, finish ms); with `colocate`, one
        holding the call's group or a prefix it reuses wins while not `colocation_slack`
        slower than the fastest."""
        if not options:
            return None
        if saturated and criterion is Criterion.THROUGHPUT:
            # Work waits for engines either way: pack for the largest batches, and keep the
            # group (then the prefix) together.
            return min(options, key=lambda o: (self._conflicts(o[0], criterion),
                                               not self._colocated(o, call),
                                               -(o[0].load + o[1].load), o[0].index))
        bound = min(map(_FINISH_MS, options)) * (1 + self.params.colocation_slack)
        # Among placements about as fast as the fastest (`within` the bound): engines not
        # serving the other criterion (isolation; a mixed engine only when much faster),
        # co-located ones first. (`_conflicts` and `_colocated` inlined, and the calm ones
        # taken from `options` in the same pass: this runs for every engine a call could take)
        other = _OTHER[criterion]
        if self.params.isolate_criteria:
            calm = ([o for o in options if o[2] <= bound and (o[0].num_by_criterion[other] <= 0
                                                              or not o[0].isolates)]
                    or [o for o in options if o[2] <= bound])
        else:
            calm = [o for o in options if o[2] <= bound]
        if not colocate:
            together = []
        elif call.task_group is not None and self.params.colocate_task_groups:
            together = [o for o in calm if self._colocated(o, call)]
        else:
            together = [o for o in calm if o[1].affine]
        return _fastest(together or calm, criterion)

    def _conflicts(self, slot: Slot, criterion: Criterion) -> bool:
        # Only in a round that isolates: where isolation would cost the throughput work more
        # than `isolation_slack`, preferring engines free of the other criterion is the same
        # cost in a softer form (measured: `mixed`, 4 H200-profile engines, the maps avoiding
        # chat engines within `colocation_slack`: job 1.16 → 1.18 s, chat unchanged).
        return (self.params.isolate_criteria and slot.isolates
                and slot.num_by_criterion[_OTHER[criterion]] > 0)  # serves(), read inline

    def _colocated(self, option: tuple[Slot, Demand, float], call: CallView) -> bool:
        """Whether the option's engine holds the call's task group, or a prefix it reuses
        there under the load gate."""
        slot, demand, _ = option
        if call.task_group is not None and self.params.colocate_task_groups \
                and slot.holds_task_group(call.task_group):
            return True
        return demand.affine



def can_isolate(throughput: Sequence[CallView], slots: Sequence[Slot], slack: float) -> bool:
    """Whether throughput calls are held to the latency capacity on engines serving latency
    calls this round (`throughput`: the round's ready throughput calls).

    Only while the engines free of latency calls have room for that work: else holding it
    to the latency capacity isolates nothing, it queues it in the manager while engines have
    room (measured: `mixed` on 8 engines, where one latency-free engine took 31 maps while 7
    chat engines sat capped and 60 maps queued). And only while confining it to those
    engines finishes it at most `slack` later than spreading it over every engine
    (placement.spread_finish_ms): two latency-free engines of eight with room by tokens
    would still run a stream of map-reduce jobs at four times the batch (measured: `mixed`,
    8 engines, A100 profile, maps known as throughput at placement: mean job time
    10.64 s isolating by room, 8.63 s with this rule, throughput-centric 9.00 s).
    Otherwise they fill up to the throughput capacity."""
    latency_free = [s for s in slots if not s.serves(Criterion.LATENCY)]
    if not throughput:   # nothing to isolate: room for none (below) is no question
        return bool(latency_free)
    need = sum(c.num_tokens for c in throughput)
    room = sum(max(0, s.view.throughput_capacity - s.load) for s in latency_free)
    if not latency_free or need > room:
        return False
    if len(latency_free) == len(slots):
        return True
    return (spread_finish_ms(latency_free, throughput)
            <= spread_finish_ms(slots, throughput) * (1 + slack))


def exceeds_free(demand: int, slots: Sequence[Slot], criterion: Criterion) -> bool:
    """Whether `demand` tokens of `criterion` exceed the engines' free tokens (none exceeds
    nothing): summed engine by engine until they cover it (each engine's free is at least 0,
    so a partial sum that covers it decides; a round's latency demand is usually covered by
    the first engine)."""
    if demand <= 0:
        return False
    free = 0
    for slot in slots:
        free += slot.free(criterion)
        if free >= demand:
            return False
    return True


def _fastest(options: list[tuple[Slot, Demand, float]],
             criterion: Criterion) -> tuple[Slot, Demand, float]:
    """The option first by (finish ms, not serving `criterion`, engine order): the least
    finish time, ties to an engine already serving the criterion, then the first engine.
    (The ties are taken apart only where there are any: the policy picks among every engine
    for every call, and a key tuple built per option cost about as much as pricing them.)"""
    fastest = min(map(_FINISH_MS, options))
    ties = [o for o in options if o[2] == fastest]
    if len(ties) == 1:
        return ties[0]
    # options come in engine order: the first of the ties serving the criterion, else the first
    return next((o for o in ties if o[0].num_by_criterion[criterion] > 0), ties[0])


def _delta(after: Demand, before: Demand) -> Demand:
    """What one call added to a running total."""
    return Demand(after.load - before.load, after.prefill - before.prefill, after.output,
                  after.affine, after.own_min)
