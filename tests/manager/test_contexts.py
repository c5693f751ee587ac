"""EngineContexts: forking the deepest cached prefix, eviction in any chain order, LRU order,
per-session release and the KV accounting, against the recording engine."""

from __future__ import annotations

import asyncio

import pytest

from parrot.manager.contexts import EngineContexts
from parrot.manager.prefix import PrefixPiece
from parrot.errors import EngineUnavailableError
from tests.manager.fakes import RecordingEngine

TEXT = "x" * 64  # 16 tokens: one block of its own plus the partial block a fork copies (32)


def pieces(*names: str) -> tuple[PrefixPiece, ...]:
    """A chain of pieces whose hashes are the cumulative names ("s", "s/a", "s/a/b")."""
    return tuple(PrefixPiece(TEXT, "/".join(names[:i + 1])) for i in range(len(names)))


def filled(engine: RecordingEngine) -> list[tuple[str, str | None]]:
    """(hash, parent hash) of every context filled, in order."""
    def h(cid: str | None) -> str | None:
        return None if cid is None else cid[2:].rsplit("-", 1)[0]
    return [(h(cid), h(parent)) for op, cid, parent in engine.log if op == "fill"]


def freed(engine: RecordingEngine) -> list[str]:
    return [cid[2:].rsplit("-", 1)[0] for op, cid, _ in engine.log if op == "free"]


@pytest.fixture
def engine() -> RecordingEngine:
    return RecordingEngine()


async def test_a_call_forks_the_deepest_cached_context(engine):
    contexts = EngineContexts(engine, "e")
    contexts.release(await contexts.acquire(pieces("s", "a", "b")))
    chain = await contexts.acquire(pieces("s", "a", "b", "c"))
    assert filled(engine) == [("s", None), ("s/a", "s"), ("s/a/b", "s/a"), ("s/a/b/c", "s/a/b")]
    assert [c.prefix_hash for c in chain.contexts] == ["s/a/b/c"]  # its fork parent only
    assert (contexts.num_hits, contexts.num_misses) == (3, 4)


async def test_contexts_are_evictable_in_any_chain_order(engine):
    contexts = EngineContexts(engine, "e")
    held = await contexts.acquire(pieces("s", "a", "b"))  # a call holds only the leaf it forks
    assert await contexts.evict_all() == 2 * 16           # s and a go; each frees a tail block
    assert freed(engine) == ["s/a", "s"] and list(contexts.prefix_hashes) == ["s/a/b"]
    contexts.release(held)
    chain = await contexts.acquire(pieces("s", "a", "b", "c"))  # nothing filled again
    assert filled(engine)[-1] == ("s/a/b/c", "s/a/b") and len(filled(engine)) == 4
    contexts.release(chain)
    # s and a's blocks were kept by b: they are freed with it, and nothing is counted twice.
    assert await contexts.evict_all() == 4 * 32 - 2 * 16
    assert contexts.num_cached_tokens == 0


async def test_lru_frees_continuations_before_the_prefix_they_extend(engine):
    contexts = EngineContexts(engine, "e")
    for user in ("u1", "u2", "u3"):
        contexts.release(await contexts.acquire(pieces("system", user)))
    await contexts.evict(1)
    await contexts.evict(1)
    assert freed(engine) == ["system/u1", "system/u2"]
    assert list(contexts.prefix_hashes) == ["system/u3", "system"]


async def test_deleting_a_session_frees_the_contexts_only_it_used(engine):
    contexts = EngineContexts(engine, "e")
    contexts.release(await contexts.acquire(pieces("system", "a1"), "A"))
    contexts.release(await contexts.acquire(pieces("system", "b1"), "B"))
    before = contexts.num_cached_tokens
    assert await contexts.release_session("A") == 1
    assert freed(engine) == ["system/a1"] and contexts.num_cached_tokens == before - 32
    assert await contexts.release_session("B") == 1
    assert list(contexts.prefix_hashes) == ["system"]  # shared by two sessions: stays cached


async def test_a_templates_leading_text_stays_cached_when_its_session_is_deleted(engine):
    """A system prompt (a template's constant leading text) holds no session's data: it is
    shared cache from the start, so the next session's call forks it, as a request-level
    engine with automatic prefix caching would reuse it; the session's own continuation goes."""
    contexts = EngineContexts(engine, "e")
    system = PrefixPiece(TEXT, "system", is_template_text=True)
    contexts.release(await contexts.acquire((system, PrefixPiece(TEXT, "system/a1")), "A"))
    assert await contexts.release_session("A") == 1
    assert freed(engine) == ["system/a1"] and list(contexts.prefix_hashes) == ["system"]
    contexts.release(await contexts.acquire((system, PrefixPiece(TEXT, "system/b1")), "B"))
    assert filled(engine)[-1] == ("system/b1", "system") and len(filled(engine)) == 3


async def test_a_deleted_sessions_context_still_in_use_is_evicted_first(engine):
    contexts = EngineContexts(engine, "e")
    contexts.release(await contexts.acquire(pieces("other"), "B"))
    chain = await contexts.acquire(pieces("mine"), "A")  # a cancelled call not unwound yet
    assert await contexts.release_session("A") == 0
    contexts.release(chain)
    await contexts.evict(1)
    assert freed(engine) == ["mine"]


async def test_a_failed_fill_leaves_nothing_behind(engine):
    contexts = EngineContexts(engine, "e")
    contexts.release(await contexts.acquire(pieces("s"), "A"))
    engine.fail_next = 1
    with pytest.raises(EngineUnavailableError, match="injected"):
        await contexts.acquire(pieces("s", "a"), "A")
    assert list(contexts.prefix_hashes) == ["s"] and contexts.num_cached_tokens == 32
    assert await contexts.release_session("A") == 1
    assert contexts.num_cached_tokens == 0


async def test_num_filling_counts_the_fills_the_engine_has_not_answered(engine):
    """EngineContexts.num_filling: prefill queued on the engine for contexts (read by
    EngineState.prefills_only), back to 0 when each fill answers, failed ones included."""
    engine.delay = 0.01
    contexts = EngineContexts(engine, "e")
    first = asyncio.ensure_future(contexts.acquire(pieces("s", "a"), "A"))
    second = asyncio.ensure_future(contexts.acquire(pieces("t"), "A"))
    await asyncio.sleep(0)
    assert contexts.num_filling == 2            # "s" and "t"; "s/a" waits for "s"
    contexts.release(await second)
    contexts.release(await first)
    assert contexts.num_filling == 0
    engine.fail_next = 1
    with pytest.raises(EngineUnavailableError, match="injected"):
        await contexts.acquire(pieces("u"), "A")
    assert contexts.num_filling == 0


async def test_concurrent_calls_fill_each_new_prefix_once(engine):
    engine.delay = 0.01
    contexts = EngineContexts(engine, "e")
    first = asyncio.ensure_future(contexts.acquire(pieces("s", "a", "b"), "A"))
    await asyncio.sleep(0.015)  # s is filled, a is being filled
    second = await contexts.acquire(pieces("s", "a", "b", "c"), "B")
    contexts.release(await first)
    contexts.release(second)
    assert filled(engine) == [("s", None), ("s/a", "s"), ("s/a/b", "s/a"), ("s/a/b/c", "s/a/b")]
    assert list(contexts.prefix_hashes) == ["s/a/b/c", "s/a/b", "s/a", "s"]
    assert await contexts.evict_all() == 4 * 32 and contexts.num_cached_tokens == 0


async def test_only_contexts_no_call_forks_from_are_idle_kv(engine):
    """A running call counts its prompt, prefixes included, in the engine's load: the context
    it forks from is that same KV, so the engine's overflow counts only the contexts no call
    holds (counting both evicted the chunks filled ahead for waiting calls: simulated
    concurrent chains on a 58k-token cache, prefix hits 50% -> 19%)."""
    contexts = EngineContexts(engine, "e")
    held = await contexts.acquire(pieces("s", "a", "b"))   # a call forks b
    assert contexts.num_cached_tokens == 3 * 32
    assert contexts.num_idle_tokens == 2 * 32              # s and a: no call forks them
    contexts.release(held)
    assert contexts.num_idle_tokens == 3 * 32


async def test_a_context_filled_ahead_is_reserved_until_a_call_forks_it(engine):
    """prefill_ahead releases its chain with release_ahead: the leaf counts in
    num_ahead_tokens (the policy's kv_free_tokens keeps its room) until a call forks it or
    it is evicted; stale contexts do not count."""
    contexts = EngineContexts(engine, "e")
    contexts.release(await contexts.acquire(pieces("stale")))
    contexts.release_ahead(await contexts.acquire(pieces("s", "a")))
    assert contexts.num_ahead_tokens == 32                 # s/a only: not s, not "stale"
    chain = await contexts.acquire(pieces("s", "a", "b"))   # the waiting call forks it
    assert contexts.num_ahead_tokens == 0
    contexts.release(chain)
    contexts.release_ahead(await contexts.acquire(pieces("t")))
    assert contexts.num_ahead_tokens == 32
    await contexts.evict_all()
    assert contexts.num_ahead_tokens == 0
