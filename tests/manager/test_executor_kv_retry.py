"""KV exhaustion on the engine: the executor frees the cached prefixes of finished calls and
runs the call again, instead of failing it while the cache holds reclaimable memory."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from parrot.serve_config import EngineSpec
from parrot.errors import CallFailedError, OutOfKVCacheError
from parrot.types import CallState, Criterion
from tests.manager.conftest import out, submit
from tests.manager.fakes import RecordingEngine

SYSTEM = "You are a careful assistant. " * 12  # > 64 tokens: cached as a prefix context


@dataclass
class SmallEngine(RecordingEngine):
    """Runs out of KV when asked for more than `max_contexts` contexts at once (the manager's
    token accounting, sized from a huge capacity, never sees it coming)."""

    max_contexts: int = 1

    def open_context(self, context_id: str, parent: str | None) -> str:
        if context_id not in self.contexts and len(self.contexts) >= self.max_contexts:
            raise OutOfKVCacheError(f"no room for {context_id}")
        return super().open_context(context_id, parent)


async def test_out_of_kv_evicts_the_cached_prefixes_and_retries(manager):
    engine = SmallEngine(max_contexts=2)
    await manager.add_engine(EngineSpec(name="e0", in_process=True), engine)
    session = manager.create_session()
    first = submit(manager, session, SYSTEM + "{{input:x}} {{output:y}}", x="one")
    await manager.get(session, out(first, "y"), Criterion.LATENCY, timeout=10)
    assert len(engine.contexts) == 1  # the system prompt stays cached
    engine.max_contexts = 1           # the engine is full now
    second = submit(manager, session, "{{input:x}} {{output:y}}", x="two")
    value = await manager.get(session, out(second, "y"), Criterion.LATENCY, timeout=10)
    assert value.startswith("gen(") and second.state is CallState.DONE
    assert not manager.engines.get("e0").contexts.prefix_hashes  # evicted to make room
    assert engine.contexts == {}


async def test_out_of_kv_with_nothing_to_evict_fails_the_call(manager):
    engine = SmallEngine(max_contexts=0)
    await manager.add_engine(EngineSpec(name="e0", in_process=True), engine)
    session = manager.create_session()
    call = submit(manager, session, "{{input:x}} {{output:y}}", x="one")
    with pytest.raises(CallFailedError, match="OutOfKVCacheError"):
        await manager.get(session, out(call, "y"), Criterion.LATENCY, timeout=10)
