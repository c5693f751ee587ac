"""EngineContexts' LRU order: using a prefix makes it (and its ancestors) recent, so eviction
under KV pressure frees the least recently used context, never one a call just reached."""

from __future__ import annotations

import asyncio

from parrot.manager.contexts import EngineContexts
from parrot.manager.prefix import PrefixPiece
from tests.manager.fakes import RecordingEngine

SYSTEM = PrefixPiece("system prompt " * 20, "h-system")
DOC = PrefixPiece("a document " * 20, "h-system-doc")
QUESTION = PrefixPiece("a question " * 20, "h-system-doc-question")
OTHER = PrefixPiece("unrelated " * 20, "h-other")


async def use(contexts: EngineContexts, *pieces: PrefixPiece) -> None:
    contexts.release(await contexts.acquire(pieces))


def freed_ids(engine: RecordingEngine) -> list[str]:
    return [context_id for op, context_id, _ in engine.log if op == "free"]


async def test_a_prefix_hit_makes_the_context_recent():
    engine = RecordingEngine()
    contexts = EngineContexts(engine, "e0")
    await use(contexts, SYSTEM)
    await use(contexts, OTHER)
    await use(contexts, SYSTEM)  # a hit: now more recent than OTHER
    other_id = contexts.prefix_hashes[OTHER.prefix_hash].context_id
    await contexts.evict(1)
    assert list(contexts.prefix_hashes) == [SYSTEM.prefix_hash]
    assert freed_ids(engine) == [other_id]


async def test_a_hit_is_recent_while_the_call_fills_the_rest_of_its_prompt():
    """The hit's ancestors are touched before the call waits for its new contexts: an eviction
    meanwhile (another call needing room) takes the stale context, not the call's prefix."""
    engine = RecordingEngine(delay=0.05)
    contexts = EngineContexts(engine, "e0")
    await use(contexts, SYSTEM, DOC)
    await use(contexts, OTHER)  # LRU order now: DOC, SYSTEM, OTHER
    acquiring = asyncio.create_task(contexts.acquire((SYSTEM, DOC, QUESTION)))
    while QUESTION.prefix_hash not in contexts.prefix_hashes:  # its fill is in flight
        await asyncio.sleep(0)
    other_id = contexts.prefix_hashes[OTHER.prefix_hash].context_id
    await contexts.evict(1)
    assert OTHER.prefix_hash not in contexts.prefix_hashes
    assert SYSTEM.prefix_hash in contexts.prefix_hashes
    assert freed_ids(engine) == [other_id]
    contexts.release(await acquiring)
    assert list(contexts.prefix_hashes) == [QUESTION.prefix_hash, DOC.prefix_hash,
                                            SYSTEM.prefix_hash]
