from __future__ import annotations

from parrot.types import CallState, Criterion
from tests.manager.conftest import out, submit

CHUNK = "A long chunk of a document about parrots. " * 30  # ~1,300 characters


def chain_of_two(manager):
    """A short call and a consumer whose long chunk comes before the producer's output."""
    session = manager.create_session()
    first = submit(manager, session, "Summarize: {{input:c}} Summary: {{output:s}}", c="short")
    second = submit(manager, session,
                    "Next part: {{input:chunk}} Summary so far: {{input:prev}} New: {{output:s}}",
                    chunk=CHUNK, prev=out(first, "s"))
    return session, first, second


async def test_waiting_consumer_prefix_is_filled_while_producer_runs(manager, engine):
    engine.delay = 0.01
    session, first, second = chain_of_two(manager)
    await manager.get(session, out(second, "s"), Criterion.LATENCY)
    ops = [(op, cid) for op, cid, _ in engine.log]
    ahead = [cid for op, cid in ops if op == "fill" and cid.startswith("p-")
             and engine.contexts.get(cid, "").endswith(" Summary so far: ")]
    assert len(ahead) == 1
    assert engine.contexts[ahead[0]] == "Next part: " + CHUNK + " Summary so far: "
    # Filled before the producer's Generate finished, and forked by the consumer afterwards.
    first_generate = ops.index(("generate", f"c-{first.call_id}-0"))
    assert ops.index(("fill", ahead[0])) < first_generate + 1
    consumer_fill = [entry for entry in engine.log
                     if entry[0] == "fill" and entry[1] == f"c-{second.call_id}-0"]
    assert consumer_fill == [("fill", f"c-{second.call_id}-0", ahead[0])]
    assert second.prefill_ahead_decided


async def test_short_certain_prefix_is_not_prefilled(manager, engine):
    session = manager.create_session()
    first = submit(manager, session, "A {{input:c}} {{output:s}}", c="x")
    second = submit(manager, session, "B {{input:prev}} {{output:s}}", prev=out(first, "s"))
    await manager.get(session, out(second, "s"), Criterion.LATENCY)
    assert not [cid for op, cid, _ in engine.log if op == "fill" and cid.startswith("p-")]


async def test_prefill_ahead_cuts_the_contexts_the_call_will_fork(manager, engine):
    """The certain prefix holds a generated input: 400 characters the engine generated as one
    token. Prefill ahead must plan with the same token counts as the call itself, or it fills
    a context at a boundary the call never forks (100 tokens by characters, 1 by count)."""
    engine.delay = 0.01
    engine.outputs["Write: go "] = "g" * 400           # one generated token (the fake's count)
    session = manager.create_session()
    first = submit(manager, session, "Write: {{input:c}} {{output:g}}", c="go")
    await manager.get(session, out(first, "g"), Criterion.LATENCY)    # g known from here on
    second = submit(manager, session, "Then: {{input:g}} {{output:late}}", g=out(first, "g"))
    third = submit(manager, session,
                   CHUNK + "{{input:g}}" + "Q" * 100 + "{{input:late}} New: {{output:s}}",
                   g=out(first, "g"), late=out(second, "late"))
    await manager.get(session, out(third, "s"), Criterion.LATENCY)
    assert third.prefill_ahead_decided
    cached = [cid for op, cid, _ in engine.log if op == "fill" and cid.startswith("p-")]
    forked = {parent for op, _, parent in engine.log if op in ("fill", "generate") and parent}
    assert cached and all(cid in forked for cid in cached), (cached, engine.log)


async def test_a_prefix_filled_ahead_is_reserved_until_its_call_forks_it(manager, engine):
    """The policy's kv_free_tokens keeps the room of a context filled ahead (a stale one is
    free): it counts in num_ahead_tokens from its fill until the waiting call forks it."""
    import asyncio
    engine.delay = 0.05
    session, _, second = chain_of_two(manager)
    contexts = manager.engines.get("e0").contexts
    for _ in range(200):
        if contexts.num_ahead_tokens:
            break
        await asyncio.sleep(0.005)
    assert contexts.num_ahead_tokens > 0 and second.state is CallState.PENDING
    await manager.get(session, out(second, "s"), Criterion.LATENCY)
    assert second.prefill_ahead_decided and contexts.num_ahead_tokens == 0


async def test_no_prefix_is_filled_ahead_while_the_engine_has_other_prefill_queued(
        manager, engine):
    """Filled ahead, a prefix takes the prefill budget of calls already waiting on an engine
    that prefills first come, first served: only a producer whose own prompt is the engine's
    only queued prefill gets its consumer's prefix filled during its decode."""
    from parrot.manager.prefill_ahead import plan_ahead
    session, first, second = chain_of_two(manager)
    other = submit(manager, manager.create_session(), "Other: {{input:q}} {{output:a}}", q=CHUNK)
    state = manager.engines.get("e0")    # no await below: the scheduler places nothing
    state.add_call(first)
    pieces = plan_ahead(session, second, state, first)
    assert pieces and pieces[-1].text.endswith(" Summary so far: ")
    state.add_call(other)                # its prompt is not prefilled yet
    assert plan_ahead(session, second, state, first) == ()
    state.note_prompt_tokens(other.call_id, 400)    # now it is
    assert plan_ahead(session, second, state, first) == pieces
    state.contexts.num_filling = 1       # a prefix context being filled (ahead or for a call)
    assert plan_ahead(session, second, state, first) == ()
    state.contexts.num_filling = 0
    for call in (first, other):
        state.remove_call(call)
    assert state.prefilling == {}
    await manager.get(session, out(second, "s"), Criterion.LATENCY)


async def test_a_call_whose_whole_prompt_is_a_cached_prefix_has_no_prefill_queued(
        manager, engine):
    """A call that forks a prefix context holding its whole prompt sends no Fill: its prompt
    is prefilled once the context is, so it stops counting as queued prefill
    (EngineState.prefilling) before it generates rather than when it finishes."""
    session = manager.create_session()
    prompt = CHUNK + "{{input:q}}{{output:a}}"
    calls = [submit(manager, session, prompt, q="the same long question " * 20)
             for _ in range(2)]
    state = manager.engines.get("e0")
    queued_at_generate: dict[str, set[str]] = {}
    generate = engine.generate

    def spy(request):
        queued_at_generate[request.context_id] = {c for c, n in state.prefilling.items() if n}
        return generate(request)

    engine.generate = spy
    for call in calls:
        await manager.get(session, out(call, "a"), Criterion.LATENCY)
    own = [f"c-{call.call_id}-0" for call in calls]
    assert not [cid for op, cid, _ in engine.log if op == "fill" and cid in own]  # no Fill
    for call, context_id in zip(calls, own):
        assert call.call_id not in queued_at_generate[context_id]
