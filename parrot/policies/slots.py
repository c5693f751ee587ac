"""The bookkeeping of one app_centric round: engine slots and the cost of placing calls on them.

A `Slot` is an engine's snapshot plus what this round has placed on it. `Slot.demand` says what
a set of calls adds to the engine — tokens of load and prompt tokens to prefill, a prefix the
engine holds (or that an earlier call of the set brings) counted once — and `Slot.finish_ms`
turns that into an estimated finish time with the engine's speed profile (parrot/speed_profile.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from collections.abc import Sequence, Set
from typing import overload

from parrot.policies.base import CallView, EngineView
from parrot.types import Criterion


def smaller_known(a: int, b: int) -> int:
    """The smaller of two token sizes where 0 (or less) means unknown; 0 when both are."""
    if a <= 0 or b <= 0:
        return max(a, b, 0)
    return min(a, b)


@dataclass(slots=True)
class Demand:
    """What some calls add to one engine (accumulated member by member)."""

    load: int = 0                   # tokens of KV load added
    prefill: int = 0                # prompt tokens the engine must prefill
    output: int = 0                 # decode steps until the last of them finishes
    affine: bool = False            # one of them reuses a prefix held here (under the gate)
    own_min: int = 0                # the smallest whole footprint among them (0: none known)


class _RuleFlag:
    """A rule of the round a `Slot` prices by (`isolates`, `work_conserving`, ...), kept in
    the slot's field of the same name with a leading underscore: setting it clears the
    prices the slot remembers, which it changes."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._field = f"_{name}"

    @overload
    def __get__(self, slot: None, owner: type | None = None) -> _RuleFlag: ...

    @overload
    def __get__(self, slot: Slot, owner: type | None = None) -> bool: ...

    def __get__(self, slot: Slot | None, owner: type | None = None) -> bool | _RuleFlag:
        if slot is None:   # on the class: the descriptor, as a property is
            return self
        return getattr(slot, self._field)  # type: ignore[no-any-return]

    def __set__(self, slot: Slot, value: bool) -> None:
        setattr(slot, self._field, value)
        slot._prices.clear()


@dataclass(slots=True)
class Slot:
    view: EngineView
    index: int                      # position in the given engine order (deterministic ties)
    load: int
    num_calls: int
    num_by_criterion: dict[Criterion, int]
    # Prompt tokens to prefill before a call placed now: queued on the engine from earlier
    # rounds, plus those placed this round.
    pending_prefill: int = 0
    # Whether throughput calls joining this engine while it serves latency calls are held to
    # the latency capacity (see `capacity`; a property, since setting it re-prices the slot).
    _isolates: bool = True
    throughput_load: int = 0        # of `load`, the THROUGHPUT calls' own tokens
    # What this round placed here; the snapshot's own sets are read, never copied (an
    # engine may hold many cached prefixes).
    placed_task_groups: set[str] = field(default_factory=set)
    placed_prefixes: set[str] = field(default_factory=set)
    # The smallest whole footprint of a latency call here (running or placed; 0: none), and
    # how much slower than alone such a call's step may get (see `latency_limit`).
    latency_floor: int = 0
    latency_step_slack: float = 0.0
    # EngineView.chained_latency_seq, kept up to date with this round's latency placements.
    chained_latency_seq: int | None = None
    # With a per-token latency target (AppCentricParams.tpot_target_ms): the most batch
    # tokens whose decode step meets it on this engine's profile at its speed; it bounds
    # every token on the engine while it carries latency work (see `capacity`). None: no
    # target, the latency capacity applies as the paper's isolation rule.
    target_tokens: int | None = None
    # While it serves no throughput work, latency calls are not held to the latency capacity
    # among themselves: they join up to the engine's own limit (`own_limit`). Holding one
    # back for other latency calls only moves its latency into the manager's queue. The
    # policy sets it per round (AppCentricParams.work_conserving; a property like `isolates`).
    _work_conserving: bool = False
    # AppCentricParams.work_conserving, whatever this round's work: where throughput calls
    # fill the engine to the throughput capacity (no isolation), latency calls may too.
    _work_conserving_mixed: bool = False
    # Memo of `latency_limit`: the largest call size the capacity already suits (computed
    # on first use), and the limits of larger sizes.
    _suits_up_to: int | None = field(default=None, repr=False)
    _limits: dict[int, int] = field(default_factory=dict, repr=False)
    # Memo of `finish_if_room` while the slot stays as it is: (criterion, load, prefill,
    # output, own_min) of a demand → its finish ms, None where it has no room. The policy
    # prices every queued call on every engine each round, many of them alike, and a
    # placement changes one slot; so it is cleared by every change (`add_call`, the rule
    # properties): change a slot only through those.
    _prices: dict[tuple[Criterion, int, int, int, int], float | None] = field(
        default_factory=dict, repr=False)

    @classmethod
    def of(cls, view: EngineView, index: int, latency_step_slack: float = 0.0, *,
           tpot_target_ms: float | None = None) -> Slot:
        target = (None if tpot_target_ms is None
                  else view.profile.max_batch_tokens(tpot_target_ms * view.speed))
        return cls(view=view, index=index, load=view.num_tokens_in_use,
                   num_calls=view.num_running_calls,
                   pending_prefill=view.queued_prefill_tokens,
                   throughput_load=view.throughput_tokens_in_use,
                   num_by_criterion={Criterion.LATENCY: view.num_latency_calls,
                                     Criterion.THROUGHPUT: view.num_throughput_calls},
                   latency_floor=view.latency_floor_tokens,
                   latency_step_slack=latency_step_slack,
                   chained_latency_seq=view.chained_latency_seq,
                   target_tokens=target)

    # The round's rules, each in its underscored field: setting one re-prices the slot.
    isolates = _RuleFlag()
    work_conserving = _RuleFlag()
    work_conserving_mixed = _RuleFlag()

    def set_rules(self, *, isolates: bool, work_conserving: bool,
                  work_conserving_mixed: bool) -> None:
        """The round's three rules at once (each property re-prices the slot; this once)."""
        self._isolates, self._work_conserving = isolates, work_conserving
        self._work_conserving_mixed = work_conserving_mixed
        self._prices.clear()

    def holds_task_group(self, task_group: str) -> bool:
        return task_group in self.placed_task_groups or task_group in self.view.task_groups

    def holds_prefix(self, prefix: str) -> bool:
        """A context of `prefix` is (or will be) here: a call forks it instead of prefilling."""
        return prefix in self.placed_prefixes or prefix in self.view.cached_prefixes

    def counts_prefix(self, prefix: str) -> bool:
        """`prefix` is already in this engine's load (a running or placed call has it)."""
        return prefix in self.placed_prefixes or prefix in self.view.running_prefixes

    @property
    def is_idle(self) -> bool:
        return self.num_calls == 0

    def serves(self, criterion: Criterion) -> bool:
        return self.num_by_criterion[criterion] > 0

    def capacity(self, criterion: Criterion, own: int = 0) -> int:
        """The load this engine may reach with work of `criterion` joining (`own`: the
        smallest whole footprint of the latency calls joining, 0 when unknown)."""
        # `serves` read inline: this runs for every engine a call could take.
        serving = self.num_by_criterion
        if self.target_tokens is not None and (criterion is Criterion.LATENCY
                                               or serving[Criterion.LATENCY] > 0):
            # A per-token target is a bound on the whole batch: a decode step carries every
            # sequence on the engine, so while latency work runs here no call of either
            # criterion may take the step past the target (a latency call whose own prompt
            # alone is slower keeps the long-prompt rule of `latency_limit`).
            limit = self.latency_limit(own)
            return min(limit, self.own_limit() if criterion is Criterion.LATENCY
                       else self.view.throughput_capacity)
        if criterion is Criterion.LATENCY:
            if self.work_conserving and serving[Criterion.THROUGHPUT] <= 0:
                # Only latency work here and none waiting to join: a latency call held back
                # protects nobody, it only waits in the manager while the engine has room,
                # which adds its whole wait to its latency (plain chat: every call LATENCY).
                return self.own_limit()
            if self.work_conserving_mixed and not self.isolates:
                # Throughput calls may fill this engine to the throughput capacity (the
                # round does not isolate): a latency call held below that protects no
                # other call's step, it only waits in the manager while throughput work
                # takes the room.
                return max(self.latency_limit(own) + self.throughput_load,
                           self.view.throughput_capacity)
            # Latency calls keep to the limit among themselves: throughput work already here
            # slows them, which the finish-time estimate prices, but counting it against
            # the limit would queue them in the manager behind work that was let past it
            # (measured: `mixed`, 8 engines, chats waited 0.58 s for room on average).
            return self.latency_limit(own) + self.throughput_load
        # Latency calls are only fast while the whole engine is lightly loaded, so throughput
        # work joining an engine that serves any is held to the latency limit — in rounds
        # that isolate (`isolates`).
        if self.isolates and serving[Criterion.LATENCY] > 0:
            return self.latency_limit()
        return self.view.throughput_capacity

    def own_limit(self) -> int:
        """The engine's own limit: its KV cache less what contexts filled ahead for waiting
        calls hold (idle contexts count as free, evicted least recently used first), or its
        throughput capacity when it reports no KV size."""
        if self.view.kv_free_tokens is None:
            return self.view.throughput_capacity
        return self.view.num_tokens_in_use + self.view.kv_free_tokens

    def latency_limit(self, own: int = 0) -> int:
        """The latency capacity (the target's tokens, `target_tokens`, when there is a
        per-token target) — or more, where the smallest latency call here (or joining,
        `own`) is so large that the capacity would hold it to a step far faster than it can
        have even alone: then the load at which a step takes (1 + latency_step_slack) × that
        call's step alone (at most the throughput capacity). A call whose own prompt exceeds
        the capacity (a long system prompt, forked by many requests) would otherwise run one
        at a time, however little each fork adds; a small latency call on the engine keeps
        the capacity as it is."""
        capacity = (self.view.latency_capacity if self.target_tokens is None
                    else self.target_tokens)
        size = smaller_known(self.latency_floor, own)
        # latency calls run here whose sizes the view does not give: keep the capacity
        floor_unknown = self.view.num_latency_calls > 0 and self.view.latency_floor_tokens <= 0
        if size <= 0 or self.latency_step_slack <= 0 or floor_unknown:
            return capacity
        profile, slack = self.view.profile, self.latency_step_slack
        if self._suits_up_to is None:
            # a call up to this size steps alone within 1/(1 + slack) of the capacity's step
            self._suits_up_to = profile.max_batch_tokens(profile.decode_ms(capacity)
                                                         / (1.0 + slack))
        if size <= self._suits_up_to:
            return capacity        # the common case, decided without a search
        limit = self._limits.get(size)
        if limit is None:
            limit = self._limits[size] = max(capacity, self._slower_step_load(size))
        return limit

    def _slower_step_load(self, tokens: int) -> int:
        """The load at which a step takes (1 + latency_step_slack) × the step at `tokens` —
        never past the throughput capacity, which bounds any engine's load."""
        profile = self.view.profile
        step = profile.max_batch_tokens((1.0 + self.latency_step_slack)
                                        * profile.decode_ms(tokens))
        return min(step, self.view.throughput_capacity)

    def free(self, criterion: Criterion) -> int:
        return max(0, self.capacity(criterion) - self.load)

    def has_room(self, demand: Demand, criterion: Criterion) -> bool:
        return self.load + demand.load <= self.capacity(criterion, demand.own_min)

    def finish_if_room(self, demand: Demand, criterion: Criterion) -> float | None:
        """`finish_ms(demand)` where `has_room(demand, criterion)`, else None: one call per
        engine a call could take, which the policy prices for every queued call (so a
        demand priced here before, the slot unchanged since, is read from `_prices`)."""
        key = (criterion, demand.load, demand.prefill, demand.output, demand.own_min)
        if key not in self._prices:
            self._prices[key] = self._finish_if_room(demand, criterion)
        return self._prices[key]

    def _finish_if_room(self, demand: Demand, criterion: Criterion) -> float | None:
        load = self.load + demand.load
        if load > self.capacity(criterion, demand.own_min):
            return None
        profile = self.view.profile   # finish_ms(demand), inlined
        return (profile.prefill_ms_per_token * (self.pending_prefill + demand.prefill)
                + profile.decode_ms(load) * demand.output) / self.view.speed

    def may_have_room(self, calls: Sequence[CallView], criterion: Criterion,
                      base: Demand) -> bool:
        """False only where `demand(calls, criterion, base=base)` has no room here however
        much of its prompt a held prefix spares (`has_room` of a lower bound of its load):
        the policy re-costs every queued call on every engine each round, and on a full
        engine this bound spares the demand's walk over the call's prefixes."""
        load, own = base.load, base.own_min
        for call in calls:
            load += call.num_tokens - call.max_reusable_tokens
            own = smaller_known(own, call.num_tokens)
        return self.load + load <= self.capacity(criterion, own)

    def has_room_backlogged(self, demand: Demand, waiting: int,
                            call: CallView | None = None) -> bool:
        """Room for a latency call that would otherwise wait for room (no engine has it under
        its latency limit), `waiting` latency calls (it among them) waiting so: while one more
        concurrent call is estimated to lower the mean completion time of the latency calls
        here and waiting. With k running here and N = k + `waiting` in all, served k at a time
        in turns of one decode step time d each, the mean completion is ~(N / k + 1) / 2 turns
        of d(load): the call joins while (N / (k+1) + 1) · d(load + its tokens) ≤
        (N / k + 1) · d(load). A step that grows slowly with load (a decode bound by reading
        the weights) admits many; one that grows in proportion admits none. Never on an
        engine serving throughput calls (isolation), never past the throughput capacity, and
        only into KV that neither running calls nor contexts filled ahead for waiting calls
        hold (`kv_free`).

        A `call` submitted after every running latency call here, each of which has its
        application's next call waiting on it (`chained_latency_seq`), joins whatever the
        estimate: those next calls come first (first come, first served per application), so
        it would wait for a whole chain to end, not a turn (measured, 25 concurrent chains on
        the H200 profile: the last two ran after the other 23, 0.99x their request-level
        time; with this, every chain 1.14x or better). A chain step (its own application's
        next call waits on it: `has_waiting_consumer`) joins such an engine whatever its submission:
        the estimate counts one call's wait, but a chain step's wait delays every later step
        of its application (measured, 25 concurrent chains on the paper's A100 profile,
        `a100_llama13b`: steps waited 0.82 s each on average and app_centric ran at 0.99x
        the request-level baseline; with this 1.00x, and 1.02x at 10 chains).

        Why: a latency limit held while latency calls queue only trades their wait for a
        faster step (measured, simulated concurrent_chains on the H200 profile, 25 clients:
        ~5 chain steps fit the 6,144-token capacity, the last chain finished at 0.69x its
        request-level time). The turn leaves prefill out: counting it (serial work that
        batching does not shorten) admitted fewer calls and measured worse where background
        chat shares an engine with a chain (A100-derived profile, docs/RESULTS.md)."""
        running = self.num_by_criterion[Criterion.LATENCY]
        if running <= 0 or waiting <= 0 or self.serves(Criterion.THROUGHPUT):
            return False
        after = self.load + demand.load
        if after > self.view.throughput_capacity or demand.load > self.kv_free():
            return False
        if (call is not None and self.chained_latency_seq is not None
                and (call.arrival_seq > self.chained_latency_seq or call.has_waiting_consumer)):
            return True   # it would wait for a whole chain, or delay its own, not a turn
        profile = self.view.profile
        total = running + waiting
        return ((total / (running + 1) + 1) * profile.decode_ms(after)
                <= (total / running + 1) * profile.decode_ms(self.load))

    def kv_free(self) -> int:
        """KV tokens free of running calls and of contexts filled ahead for waiting calls,
        after this round's placements here (unbounded when the engine does not say)."""
        if self.view.kv_free_tokens is None:
            return 1 << 62
        return self.view.kv_free_tokens - (self.load - self.view.num_tokens_in_use)

    def add_call(self, call: CallView, criterion: Criterion, demand: Demand) -> None:
        self._prices.clear()
        self.load += demand.load
        if criterion is Criterion.THROUGHPUT:
            self.throughput_load += demand.load
        self.pending_prefill += demand.prefill
        self.num_calls += 1
        self.num_by_criterion[criterion] += 1
        if criterion is Criterion.LATENCY:
            self.latency_floor = smaller_known(self.latency_floor, call.num_tokens)
            first = self.num_by_criterion[Criterion.LATENCY] == 1
            if not call.has_waiting_consumer or (self.chained_latency_seq is None
                                                 and not first):
                self.chained_latency_seq = None
            else:
                self.chained_latency_seq = max(self.chained_latency_seq or call.arrival_seq,
                                               call.arrival_seq)
        if call.task_group is not None:
            self.placed_task_groups.add(call.task_group)
        self.placed_prefixes.update(call.prefix_hashes)

    # --- cost ------------------------------------------------------------------------------

    def demand(self, calls: Sequence[CallView], criterion: Criterion, *, affinity: bool,
               gate: float, base: Demand | None = None,
               brought: Set[str] = frozenset()) -> Demand:
        """What `calls` add here on top of `base` (calls already assigned here this step,
        bringing the prefixes `brought`).

        A call's deepest prefix that this engine holds, or that `brought` or an earlier call in
        `calls` brings, is not loaded again where a running or placed call already counts it
        (the engine's accounting counts it once), and not prefilled again while the engine
        stays under `gate` × capacity after taking the call (prefix affinity gated on load);
        past the gate the engine is costed as if it had to prefill the prefix, so the call
        spreads where another engine is about as fast. Without `affinity` (the paper's
        ablation) every call is costed as prefilling its whole prompt, but its load is still
        counted as the engine's accounting counts it: the ablation turns off a preference,
        not the room the engine has.
        """
        load, prefill, output, affine = (0, 0, 0, False) if base is None else (
            base.load, base.prefill, base.output, base.affine)
        own_min = 0 if base is None else base.own_min
        limit = -1.0                   # gate × capacity, computed when a prefix needs it
        local: set[str] = set()        # prefixes brought by earlier members of `calls`
        for call in calls:
            saved_prefill = saved_load = 0
            for prefix, tokens in zip(reversed(call.prefix_hashes),
                                      reversed(call.prefix_num_tokens or
                                               (0,) * len(call.prefix_hashes))):
                is_brought = prefix in brought or prefix in local
                if is_brought or self.holds_prefix(prefix):
                    tokens = min(tokens, call.num_prompt_tokens)
                    # The engine's accounting counts a prefix once however loaded it is, and
                    # with or without affinity, so the load it adds is real whatever the
                    # gate says; the gate (and `affinity`) only decide whether the call is
                    # costed as reusing it (past it, other engines look as good and the
                    # call spreads). Gating the load too made a call that fits wait a whole
                    # phase on one engine; without affinity, a 7,000-token gpts call
                    # waited for an engine of its own.
                    if is_brought or self.counts_prefix(prefix):
                        saved_load = tokens
                    if affinity:
                        if limit < 0:
                            limit = gate * self.capacity(criterion)
                        if self.load + load + call.num_tokens - saved_load <= limit:
                            affine, saved_prefill = True, tokens
                    break
            if len(calls) > 1:
                local.update(call.prefix_hashes)
            load += call.num_tokens - saved_load
            prefill += call.num_prompt_tokens - saved_prefill
            # Every call decodes at least one token (a view may not know its output length).
            output = max(output, call.num_output_tokens, 1)
            own_min = smaller_known(own_min, call.num_tokens)
        return Demand(load, prefill, output, affine, own_min)

    def finish_ms(self, demand: Demand) -> float:
        """Estimated time until work of `demand` placed here now would finish (speed_profile.py's
        `SpeedProfile.finish_ms`, inlined: this runs for every engine a call could take)."""
        profile = self.view.profile
        return (profile.prefill_ms_per_token * (self.pending_prefill + demand.prefill)
                + profile.decode_ms(self.load + demand.load) * demand.output) / self.view.speed


def with_room(slots: Sequence[Slot], demand: Demand,
              criterion: Criterion) -> list[tuple[Slot, Demand, float]]:
    """(slot, `demand`, finish ms) for each of `slots` with room for `demand`: its
    `finish_if_room` on every engine, the memo read inline (the policy asks this of every
    engine for every queued call without prefixes, and most of them are priced already)."""
    key = (criterion, demand.load, demand.prefill, demand.output, demand.own_min)
    for slot in slots:
        if key not in slot._prices:
            slot._prices[key] = slot._finish_if_room(demand, criterion)
    return [(slot, demand, ms) for slot in slots if (ms := slot._prices[key]) is not None]


def fastest_with_room(slots: Sequence[Slot], demand: Demand, criterion: Criterion) -> Slot | None:
    """The engine where `demand` finishes first among `slots` with room for it, ties to the
    first serving `criterion`, else the first (app_centric `_fastest`'s order); None when
    none has room. Every engine is priced (`with_room`'s memo, read inline: the policy asks
    this of every engine for every lone call)."""
    key = (criterion, demand.load, demand.prefill, demand.output, demand.own_min)
    first: Slot | None = None
    fastest = math.inf
    first_idle = True     # `first` does not serve `criterion`
    for slot in slots:
        prices = slot._prices
        if key in prices:
            ms = prices[key]
        else:
            ms = prices[key] = slot._finish_if_room(demand, criterion)
        if ms is None or ms > fastest:
            continue
        if ms < fastest:
            first, fastest = slot, ms
            first_idle = slot.num_by_criterion[criterion] <= 0
        elif first_idle and slot.num_by_criterion[criterion] > 0:
            first, first_idle = slot, False
    return first


def spread_finish_ms(slots: Sequence[Slot], calls: Sequence[CallView]) -> float:
    """Estimated finish of `calls` spread evenly (by tokens) over as many of `slots` as
    there are calls, the least busy first: the latest engine's, each prefilling its share
    after what is queued there and then decoding its share's longest output at its load
    plus that share."""
    if not calls or not slots:
        return 0.0
    used = sorted(slots, key=lambda slot: slot.finish_ms(Demand(output=1)))[:len(calls)]
    share = 1.0 / len(used)
    load = sum(c.num_tokens for c in calls) * share
    prompt = sum(c.num_prompt_tokens for c in calls) * share
    output = max(max(c.num_output_tokens, 1) for c in calls)
    return max(slot.finish_ms(Demand(int(load), int(prompt), output)) for slot in used)
