"""The engines the manager knows: their clients, manager-side load accounting and policy views."""

from __future__ import annotations

import collections
from collections.abc import Iterator, Mapping, Set
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from parrot.serve_config import EngineSpec, auto_throughput_capacity
from parrot.manager.call_slots import CallSlots
from parrot.manager.contexts import EngineContexts
from parrot.manager.nodes import Call
from parrot.engines.protocol import (LATENCY_PRIORITY, THROUGHPUT_PRIORITY, Engine,
                                     EngineInfo)
from parrot.errors import ConflictError, NotFoundError
from parrot.policies.base import EngineView
from parrot.manager.engine_profiles import engine_profile
from parrot.speed_profile import DEFAULT_PROFILE, SpeedProfile, calibrated_latency_capacity
from parrot.types import Criterion


class _ReadOnlyKeys(Set[str]):
    """A live, read-only set view over a mapping's keys (no copy per scheduling round)."""

    __slots__ = ("_mapping",)

    def __init__(self, mapping: Mapping[str, object]) -> None:
        self._mapping = mapping

    def __contains__(self, item: object) -> bool:
        return item in self._mapping

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._mapping))

    def __len__(self) -> int:
        return len(self._mapping)


_NO_GROUPS: frozenset[str] = frozenset()


def prefix_num_tokens(call: Call) -> tuple[int, ...]:
    """Estimated prompt tokens up to each of `call.prefix_hashes` (non-decreasing)."""
    shareable = set(call.prefix_hashes)
    return tuple(p.num_tokens for p in call.prefix_pieces if p.prefix_hash in shareable)


@dataclass(frozen=True)
class _Placed:
    num_tokens: int                 # its own tokens: beyond its prefixes, plus max output
    is_throughput: bool
    task_group: str | None
    prefixes: tuple[tuple[str, int], ...]   # (hash, tokens since the previous boundary)
    num_output_tokens: int
    call: Call                      # read live: a consumer may be submitted while it runs
    # Prompt tokens still to prefill until its first fill reports (beyond the deepest prefix
    # cached here when it was placed).
    prefill_tokens: int = 0
    placed_throughput: bool = False     # its placement named THROUGHPUT (engine priority)

    @cached_property
    def whole_tokens(self) -> int:
        """Its whole footprint, prefixes included (what it would hold alone); every engine
        view reads it for each running latency call, so it is summed once."""
        return self.num_tokens + sum(n for _, n in self.prefixes)

    def prefilled(self, num_tokens: int) -> _Placed:
        """The same placement counting `num_tokens` of its own, its prefill done (built
        directly: `dataclasses.replace` walks the fields, and every call's first Fill comes
        through here)."""
        return _Placed(num_tokens, self.is_throughput, self.task_group, self.prefixes,
                       self.num_output_tokens, self.call, 0, self.placed_throughput)


@dataclass(eq=False)
class EngineState:
    spec: EngineSpec
    engine: Engine
    info: EngineInfo
    contexts: EngineContexts
    is_healthy: bool = True
    running: dict[str, _Placed] = field(default_factory=dict)
    num_tokens_in_use: int = 0
    num_latency_calls: int = 0
    num_throughput_calls: int = 0
    task_groups: collections.Counter[str] = field(default_factory=collections.Counter)
    num_calls_done: int = 0
    # Prefixes of the running calls, each counted once in num_tokens_in_use however many
    # calls fork it: hash → number of running calls with it.
    prefix_refs: collections.Counter[str] = field(default_factory=collections.Counter)
    # The tokens counted for each of those prefixes (by the call that brought it: calls with
    # equal prefix text may estimate it differently when one knows its inputs' real counts).
    prefix_tokens: dict[str, int] = field(default_factory=dict)
    # Of the running calls, the prompt tokens still to prefill and how many calls have some:
    # kept as they change, since every round's view and every dispatch read them (a sum over
    # the running calls made each round cost as much as the engine runs).
    queued_prefill_tokens: int = 0
    num_prefilling: int = 0
    # Set from the spec and info (_apply_spec): the profile the policy costs it with and
    # where it came from (engine_profile), and the latency capacity in force: the
    # configured one, or (`auto`) the paper's rule on that profile
    # (speed_profile.calibrated_latency_capacity: 6,144 on the default A100 profile).
    profile: SpeedProfile = DEFAULT_PROFILE
    profile_source: str = "default"
    latency_capacity: int = 0
    # manager.engine_max_calls, and the slots it sets for a remote engine's calls
    # (call_slots.py: the engine's batch unless configured; in-process engines unbounded).
    max_calls_setting: int | None = None
    call_slots: CallSlots = field(default_factory=CallSlots)
    # The last view made while it ran no LATENCY call, and what it was made from (`view`):
    # bumped by every change of its running calls or spec (`_changes`), with its health and
    # the KV of contexts filled ahead. A view of running latency calls also reads whether
    # their applications wait on them (Call.has_waiting_consumer), which changes outside
    # this engine: such a view is made every time.
    _changes: int = field(default=0, repr=False)
    _view: EngineView | None = field(default=None, repr=False)
    _view_key: tuple[int, bool, int] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._apply_spec()

    def reconnect(self, spec: EngineSpec, engine: Engine, info: EngineInfo) -> None:
        """The same engine name back as a new process (or client): its spec, info and
        profile (a restarted engine measures itself again); no prefix is cached there."""
        self.spec, self.engine, self.info = spec, engine, info
        self.contexts = EngineContexts(engine, spec.name, info.block_size)
        self._apply_spec()

    def _apply_spec(self) -> None:
        self._changes += 1
        # Computed once here, not per view: every scheduling round reads every engine's.
        # (live read-only views of the cached and the running prefixes)
        self._cached_keys = _ReadOnlyKeys(self.contexts.prefix_hashes)
        self._running_keys = _ReadOnlyKeys(self.prefix_refs)
        self.profile, self.profile_source = engine_profile(self.spec, self.info)
        configured = self.spec.latency_capacity
        self.latency_capacity = (configured if configured is not None
                                 else calibrated_latency_capacity(self.profile))
        self.call_slots.set_limit(self._max_calls())

    def _max_calls(self) -> int | None:
        setting = self.max_calls_setting
        if not self.engine.is_remote or setting == 0:
            return None
        if setting is not None:
            return setting
        return None if self.info.serving is None else self.info.serving.max_num_seqs

    @property
    def engine_id(self) -> str:
        return self.spec.name

    @property
    def kv_capacity_tokens(self) -> int:
        return self.info.num_blocks_total * self.info.block_size

    @property
    def throughput_capacity(self) -> int:
        """The configured throughput capacity, or (`auto`) the share of this engine's KV cache
        that `auto_throughput_capacity` gives."""
        if self.spec.throughput_capacity is not None:
            return self.spec.throughput_capacity
        return auto_throughput_capacity(self.kv_capacity_tokens, self.latency_capacity)

    def kv_overflow_tokens(self) -> int:
        """How much KV (tokens of whole blocks) the running calls and the cached prefix contexts
        need beyond the engine's cache, by the manager's accounting (a running call may round
        up to a block and copy a parent's partial block: two blocks of slack each). A context a
        running call forks from is in that call's load already (its prompt counts its
        prefixes): only the idle contexts count beside the calls. Counting both made the
        executor evict contexts the engine had room for — the chunks filled ahead for the
        next calls of chains (simulated, 25 concurrent chains on the A100-derived profile's
        58k-token cache: prefix hits 50% -> 19%, least-queue sharing 0.68x -> 0.99x the
        request-level baseline once fixed)."""
        return self._running_kv_tokens() + self.contexts.num_idle_tokens - self.kv_capacity_tokens

    def _running_kv_tokens(self) -> int:
        """KV of the running calls by the manager's accounting, with two blocks of slack each
        (a call may round up to a block and copy its parent's partial block)."""
        return self.num_tokens_in_use + 2 * self.info.block_size * len(self.running)

    @property
    def prefilling(self) -> dict[str, int]:
        """Running calls whose prompt is still to prefill: call id -> tokens."""
        return {cid: p.prefill_tokens for cid, p in self.running.items() if p.prefill_tokens}

    def prefills_only(self, call_id: str) -> bool:
        """Whether the only prefill queued here is `call_id`'s prompt (no other running call
        before its first fill reports, no prefix context being filled)."""
        if self.contexts.num_filling or self.num_prefilling > 1:
            return False
        placed = self.running.get(call_id)
        return self.num_prefilling == 0 or (placed is not None and placed.prefill_tokens > 0)

    def _set_running(self, call_id: str, placed: _Placed | None) -> None:
        """Record, replace (`placed`) or drop (None) a running call, keeping the prefill
        counts in step."""
        self._changes += 1   # (add_call, remove_call and the notes all come through here)
        before = self.running.pop(call_id, None) if placed is None else \
            self.running.get(call_id)
        if before is not None and before.prefill_tokens:
            self.queued_prefill_tokens -= before.prefill_tokens
            self.num_prefilling -= 1
        if placed is not None:
            self.running[call_id] = placed
            if placed.prefill_tokens:
                self.queued_prefill_tokens += placed.prefill_tokens
                self.num_prefilling += 1

    def request_priority(self, call_id: str) -> int:
        """The engine priority of running `call_id`'s requests: THROUGHPUT_PRIORITY when its
        placement named THROUGHPUT, so the engine prefills a latency-critical call before
        throughput work queued ahead of it. A policy that names no criterion (the
        baselines) leaves every call at one priority: first come, first served."""
        placed = self.running.get(call_id)
        throughput = placed is not None and placed.placed_throughput
        return THROUGHPUT_PRIORITY if throughput else LATENCY_PRIORITY

    def add_call(self, call: Call, criterion: Criterion | None = None) -> None:
        """Count `call` as running here; as `criterion` (the one its placement names) when
        given, else as its own."""
        assert call.call_id not in self.running
        cumulative = prefix_num_tokens(call)
        prefixes = tuple((h, n - prev) for h, n, prev in
                         zip(call.prefix_hashes, cumulative, (0, *cumulative)))
        output = call.output_tokens_estimate
        cached = next((n for h, n in zip(reversed(call.prefix_hashes), reversed(cumulative))
                       if h in self.contexts.prefix_hashes), 0)
        # Remember what was counted: re-deduction may change the call's criterion later.
        placed = _Placed(max(0, call.num_tokens - (cumulative[-1] if cumulative else 0)),
                         (criterion or call.criterion) is Criterion.THROUGHPUT,
                         call.task_group, prefixes, output, call,
                         max(0, call.num_tokens - output - cached),
                         criterion is Criterion.THROUGHPUT)
        self._set_running(call.call_id, placed)
        self.num_tokens_in_use += placed.num_tokens
        for prefix, tokens in prefixes:
            if self.prefix_refs[prefix] == 0:
                self.num_tokens_in_use += tokens
                self.prefix_tokens[prefix] = tokens
            self.prefix_refs[prefix] += 1
        if placed.is_throughput:
            self.num_throughput_calls += 1
        else:
            self.num_latency_calls += 1
        if placed.task_group is not None:
            self.task_groups[placed.task_group] += 1

    def remove_call(self, call: Call) -> None:
        placed = self.running.get(call.call_id)
        if placed is None:
            return
        self._set_running(call.call_id, None)
        self.num_tokens_in_use -= placed.num_tokens
        for prefix, _ in placed.prefixes:
            self.prefix_refs[prefix] -= 1
            if self.prefix_refs[prefix] == 0:
                del self.prefix_refs[prefix]
                self.num_tokens_in_use -= self.prefix_tokens.pop(prefix)
        if placed.is_throughput:
            self.num_throughput_calls -= 1
        else:
            self.num_latency_calls -= 1
        if placed.task_group is not None:
            self.task_groups[placed.task_group] -= 1
            if self.task_groups[placed.task_group] <= 0:
                del self.task_groups[placed.task_group]
        assert self.num_tokens_in_use >= 0 and self.num_latency_calls >= 0 \
            and self.num_throughput_calls >= 0 and self.queued_prefill_tokens >= 0

    def note_prefilled(self, call_id: str) -> None:
        """The call's prompt is prefilled: it no longer counts as prefill queued here."""
        placed = self.running.get(call_id)
        if placed is not None and placed.prefill_tokens:
            self._set_running(call_id, placed.prefilled(placed.num_tokens))

    def note_prompt_tokens(self, call_id: str, context_len: int) -> None:
        """The engine reported the call's prompt length in real tokens (its first Fill's
        context length, prefix included): count that instead of the characters/4 estimate."""
        placed = self.running.get(call_id)
        if placed is None:
            return
        prefix = placed.whole_tokens - placed.num_tokens
        own = max(0, context_len - prefix) + placed.num_output_tokens
        self.num_tokens_in_use += own - placed.num_tokens
        self._set_running(call_id, placed.prefilled(own))

    def view(self) -> EngineView:
        """What the policy sees of this engine. Every scheduling round views every engine,
        and most of a large pool's engines do not change between two rounds: an engine
        running no latency call gives the view it gave last while nothing it is made from
        changed (`_changes`, its health, the KV filled ahead)."""
        if self.num_latency_calls:
            return self.make_view()
        key = (self._changes, self.is_healthy, self.contexts.num_ahead_tokens)
        if self._view is None or key != self._view_key:
            self._view, self._view_key = self.make_view(), key
        return self._view

    def make_view(self) -> EngineView:
        """The view made now (`view` may give the last one). The real server's chains: 12 us
        an engine, 16 engines a round: one pass over the running latency calls, none for an
        engine without them, and the live key views made once (_apply_spec)."""
        floor, chained_seq, latency_tokens = (self._latency_summary() if self.num_latency_calls
                                              else (0, None, 0))
        kv_capacity = self.kv_capacity_tokens
        return EngineView(
            engine_id=self.spec.name,
            num_running_calls=len(self.running),
            num_tokens_in_use=self.num_tokens_in_use,
            latency_capacity=self.latency_capacity,
            throughput_capacity=self.throughput_capacity,
            speed=self.spec.speed,
            num_latency_calls=self.num_latency_calls,
            num_throughput_calls=self.num_throughput_calls,
            task_groups=frozenset(self.task_groups) if self.task_groups else _NO_GROUPS,
            cached_prefixes=self._cached_keys,
            is_healthy=self.is_healthy,
            profile=self.profile,
            running_prefixes=self._running_keys,
            latency_floor_tokens=floor,
            # Idle contexts count as free (evicted least recently used first), but those
            # filled ahead for a waiting call: evicting one makes that call fill it again.
            kv_free_tokens=(kv_capacity - self._running_kv_tokens()
                            - self.contexts.num_ahead_tokens if kv_capacity > 0 else None),
            chained_latency_seq=chained_seq,
            queued_prefill_tokens=self.queued_prefill_tokens,
            throughput_tokens_in_use=self.num_tokens_in_use - latency_tokens,
        )

    def _latency_summary(self) -> tuple[int, int | None, int]:
        """Over the running LATENCY calls, in one pass: the smallest whole footprint; the
        latest arrival when every one of them has a consumer waiting on it alone (else
        None); and what they hold of num_tokens_in_use, their own tokens and every prefix
        one of them uses (counted once, as the accounting counts it)."""
        floor: int | None = None
        latest = -1
        all_waited = True
        own = 0
        prefixes: set[str] = set()
        for placed in self.running.values():
            if placed.is_throughput:
                continue
            whole = placed.whole_tokens
            if floor is None or whole < floor:
                floor = whole
            call = placed.call
            if call.arrival_seq > latest:
                latest = call.arrival_seq
            if all_waited and not call.has_waiting_consumer:
                all_waited = False
            own += placed.num_tokens
            for prefix, _ in placed.prefixes:
                prefixes.add(prefix)
        if floor is None:
            return 0, None, 0
        prefix_tokens = self.prefix_tokens
        return (floor, latest if all_waited else None,
                own + sum(prefix_tokens[prefix] for prefix in prefixes))

    def describe(self) -> dict[str, Any]:
        return {"name": self.engine_id, "kind": self.info.kind, "model": self.info.model,
                "healthy": self.is_healthy, "running_calls": len(self.running),
                "tokens_in_use": self.num_tokens_in_use, "calls_done": self.num_calls_done,
                "cached_prefixes": len(self.contexts.prefix_hashes),
                "prefix_hits": self.contexts.num_hits, "prefix_misses": self.contexts.num_misses,
                "latency_capacity": self.latency_capacity,
                "throughput_capacity": self.throughput_capacity,
                "profile_source": self.profile_source,
                "serving": None if self.info.serving is None else self.info.serving.to_wire()}


class EnginePool:
    def __init__(self, max_calls: int | None = None) -> None:
        """max_calls: manager.engine_max_calls."""
        self._engines: dict[str, EngineState] = {}
        self._max_calls = max_calls
        # The largest context window of any engine, up or down (every submit checks its
        # max_tokens against it): kept as engines join or come back, not walked per submit.
        self.max_context_len: int | None = None

    def add(self, spec: EngineSpec, engine: Engine, info: EngineInfo) -> EngineState:
        if spec.name in self._engines:
            raise ConflictError(f"an engine named {spec.name!r} is already registered")
        state = EngineState(spec, engine, info,
                            EngineContexts(engine, spec.name, info.block_size),
                            max_calls_setting=self._max_calls)
        self._engines[spec.name] = state
        self._note_window()
        return state

    def reconnect(self, state: EngineState, spec: EngineSpec, engine: Engine,
                  info: EngineInfo) -> None:
        """`state`'s engine back as a new process or client (EngineState.reconnect): its
        window may have changed."""
        state.reconnect(spec, engine, info)
        self._note_window()

    def _note_window(self) -> None:
        self.max_context_len = max(e.info.max_context_len for e in self._engines.values())

    def get(self, engine_id: str) -> EngineState:
        try:
            return self._engines[engine_id]
        except KeyError:
            raise NotFoundError(f"unknown engine {engine_id!r}") from None

    def __iter__(self) -> Iterator[EngineState]:
        return iter(self._engines.values())

    def __len__(self) -> int:
        return len(self._engines)

    def views(self) -> list[EngineView]:
        return [state.view() for state in self._engines.values()]
