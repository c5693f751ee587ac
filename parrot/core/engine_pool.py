"""The engines the manager knows: their clients, manager-side load accounting and policy views."""

from __future__ import annotations

import collections
from collections.abc import Set
from dataclasses import dataclass, field
from typing import Iterator

from parrot.core.config import EngineSpec
from parrot.core.contexts import EngineContexts
from parrot.core.nodes import Call
from parrot.engines.protocol import Engine, EngineInfo
from parrot.errors import ConflictError, NotFoundError
from parrot.policies.base import EngineView
from parrot.types import Criterion


class _ReadOnlyKeys(Set):
    """A live, read-only set view over a mapping's keys (no copy per scheduling round)."""

    __slots__ = ("_mapping",)

    def __init__(self, mapping: collections.abc.Mapping) -> None:
        self._mapping = mapping

    def __contains__(self, item: object) -> bool:
        return item in self._mapping

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._mapping))

    def __len__(self) -> int:
        return len(self._mapping)


@dataclass(frozen=True)
class _Placed:
    num_tokens: int
    is_throughput: bool
    task_group: str | None


@dataclass(eq=False)
class EngineState:
    spec: EngineSpec
    engine: Engine
    info: EngineInfo
    contexts: EngineContexts
    is_healthy: bool = True
    running: dict[str, "_Placed"] = field(default_factory=dict)
    num_tokens_in_use: int = 0
    num_latency_calls: int = 0
    num_throughput_calls: int = 0
    task_groups: collections.Counter = field(default_factory=collections.Counter)
    num_calls_done: int = 0

    @property
    def engine_id(self) -> str:
        return self.spec.name

    @property
    def kv_capacity_tokens(self) -> int:
        return self.info.num_blocks_total * self.info.block_size

    def kv_overflow_tokens(self) -> int:
        """How much KV (tokens of whole blocks) the running calls and the cached prefix contexts
        need beyond the engine's cache, by the manager's accounting (a running call may round
        up to a block and copy a parent's partial block: two blocks of slack each)."""
        rounding = 2 * self.info.block_size * len(self.running)
        return (self.num_tokens_in_use + rounding + self.contexts.num_cached_tokens
                - self.kv_capacity_tokens)

    def add_call(self, call: Call) -> None:
        assert call.call_id not in self.running
        # Remember what was counted: re-deduction may change the call's criterion later.
        placed = _Placed(call.num_tokens, call.criterion is Criterion.THROUGHPUT, call.task_group)
        self.running[call.call_id] = placed
        self.num_tokens_in_use += placed.num_tokens
        if placed.is_throughput:
            self.num_throughput_calls += 1
        else:
            self.num_latency_calls += 1
        if placed.task_group is not None:
            self.task_groups[placed.task_group] += 1

    def remove_call(self, call: Call) -> None:
        placed = self.running.pop(call.call_id, None)
        if placed is None:
            return
        self.num_tokens_in_use -= placed.num_tokens
        if placed.is_throughput:
            self.num_throughput_calls -= 1
        else:
            self.num_latency_calls -= 1
        if placed.task_group is not None:
            self.task_groups[placed.task_group] -= 1
            if self.task_groups[placed.task_group] <= 0:
                del self.task_groups[placed.task_group]
        assert self.num_tokens_in_use >= 0 and self.num_latency_calls >= 0 \
            and self.num_throughput_calls >= 0

    def view(self) -> EngineView:
        return EngineView(
            engine_id=self.engine_id,
            num_running_calls=len(self.running),
            num_tokens_in_use=self.num_tokens_in_use,
            latency_capacity=self.spec.latency_capacity,
            throughput_capacity=self.spec.throughput_capacity,
            speed=self.spec.speed,
            num_latency_calls=self.num_latency_calls,
            num_throughput_calls=self.num_throughput_calls,
            task_groups=frozenset(self.task_groups),
            cached_prefixes=_ReadOnlyKeys(self.contexts.prefix_hashes),  # type: ignore[arg-type]
            is_healthy=self.is_healthy,
        )

    def describe(self) -> dict:
        return {"name": self.engine_id, "kind": self.info.kind, "model": self.info.model,
                "healthy": self.is_healthy, "running_calls": len(self.running),
                "tokens_in_use": self.num_tokens_in_use, "calls_done": self.num_calls_done,
                "cached_prefixes": len(self.contexts.prefix_hashes),
                "prefix_hits": self.contexts.num_hits, "prefix_misses": self.contexts.num_misses,
                "latency_capacity": self.spec.latency_capacity,
                "throughput_capacity": self.spec.throughput_capacity}


class EnginePool:
    def __init__(self) -> None:
        self._engines: dict[str, EngineState] = {}

    def add(self, spec: EngineSpec, engine: Engine, info: EngineInfo) -> EngineState:
        if spec.name in self._engines:
            raise ConflictError(f"an engine named {spec.name!r} is already registered")
        state = EngineState(spec, engine, info,
                            EngineContexts(engine, spec.name, info.block_size))
        self._engines[spec.name] = state
        return state

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
