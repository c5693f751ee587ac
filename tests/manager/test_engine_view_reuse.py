"""EngineState.view: an engine running no latency call gives the view it gave last while
nothing it is made from changed (most of a large pool's engines between two rounds); every
change shows in the next view, which equals one made afresh."""

from __future__ import annotations

import random

from parrot.manager.prefix import PrefixPiece
from parrot.serve_config import EngineSpec
from parrot.types import Criterion
from tests.manager.conftest import out, submit
from tests.manager.fakes import RecordingEngine


async def test_an_idle_engine_gives_its_last_view_until_something_changes(manager, engine):
    state = manager.engines.get("e0")
    first = state.view()
    assert state.view() is first                      # nothing changed: the same snapshot
    session = manager.create_session()
    call = submit(manager, session, "{{input:q}} {{output:a}}", q="x" * 40)
    state.add_call(call, Criterion.THROUGHPUT)
    busy = state.view()
    assert busy is not first and busy.num_running_calls == 1
    assert state.view() is busy
    state.is_healthy = False                          # health is read every time
    assert not state.view().is_healthy
    state.is_healthy = True
    state.remove_call(call)
    assert state.view() == first and state.view().num_running_calls == 0
    state.contexts.release_ahead(await state.contexts.acquire((PrefixPiece("y" * 400, "q"),)))
    assert state.view().kv_free_tokens == first.kv_free_tokens - state.contexts.num_ahead_tokens
    await manager.get(session, out(call, "a"), Criterion.LATENCY)


async def test_an_engine_running_latency_calls_is_viewed_afresh(manager, engine):
    state = manager.engines.get("e0")
    session = manager.create_session()
    call = submit(manager, session, "{{input:q}} {{output:a}}", q="x" * 40)
    state.add_call(call, Criterion.LATENCY)
    # its application may start waiting on it at any time (Call.has_waiting_consumer)
    assert state.view() is not state.view()
    state.remove_call(call)
    await manager.get(session, out(call, "a"), Criterion.LATENCY)


async def test_every_change_shows_in_the_next_view(manager, engine):
    """Random runs of the changes an engine's accounting sees; after each, the view equals
    one made afresh (EngineState.make_view)."""
    state = manager.engines.get("e0")
    session = manager.create_session()
    rng = random.Random(7)
    calls = [submit(manager, session, ("A system prompt shared by some. " * 8 if i % 2 else "")
                    + "{{input:q}} {{output:a}}", q="q" * rng.randrange(1, 200))
             for i in range(12)]
    running: list = []
    reused = 0   # checks of an engine running no latency call: its view may be the last one
    for _ in range(400):
        op = rng.randrange(6)
        idle = [c for c in calls if c not in running]
        if op == 0 and idle:
            call = rng.choice(idle)
            # mostly throughput work: an engine running no latency call keeps its view
            state.add_call(call, rng.choice((Criterion.THROUGHPUT,) * 6
                                            + (Criterion.LATENCY, None)))
            running.append(call)
        elif op == 1 and running:
            # latency calls leave first half of the time (None counts as latency)
            latency = [c for c in running if state.running[c.call_id].is_throughput is False]
            call = rng.choice(latency) if latency and rng.random() < 0.5 else \
                rng.choice(running)
            running.remove(call)
            state.remove_call(call)
        elif op == 2 and running:
            state.note_prefilled(rng.choice(running).call_id)
        elif op == 3 and running:
            state.note_prompt_tokens(rng.choice(running).call_id, rng.randrange(1, 300))
        elif op == 4:
            state.is_healthy = not state.is_healthy
        else:
            state.view()      # a round that changes nothing
        reused += state.num_latency_calls == 0
        assert state.view() == state.make_view()
    assert reused > 100
    for call in running:
        state.remove_call(call)
    state.is_healthy = True
    for call in calls:
        await manager.get(session, out(call, "a"), Criterion.LATENCY)


async def test_an_engine_back_with_a_new_spec_is_viewed_with_it(manager):
    await manager.add_engine(EngineSpec(name="e0", in_process=True),
                             RecordingEngine(window=2048))
    state = manager.engines.get("e0")
    before = state.view()
    manager.health.mark_down(state, "killed")
    await manager.add_engine(EngineSpec(name="e0", in_process=True, speed=2.0),
                             RecordingEngine(window=4096))
    after = state.view()
    assert after.speed == 2.0 and before.speed == 1.0 and after.is_healthy
