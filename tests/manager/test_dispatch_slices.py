"""A scheduling round that places thousands of calls dispatches them in slices, yielding the
loop between slices: the same placements, in the same order, as a round carried out at once."""

from __future__ import annotations

import asyncio

from parrot.manager.admission import CALLS_PER_SLICE
from parrot.manager.manager import Manager
from parrot.policies.least_queue import LeastQueuePolicy
from parrot.serve_config import EngineSpec
from parrot.types import CallState
from tests.manager.conftest import submit
from tests.manager.fakes import RecordingEngine

NUM_CALLS = 5000


def dispatched(calls) -> int:
    return sum(c.state not in (CallState.PENDING, CallState.READY) for c in calls)


async def manager_with_engines(count: int) -> Manager:
    manager = Manager(LeastQueuePolicy())
    for i in range(count):
        await manager.add_engine(EngineSpec(name=f"e{i}", in_process=True),
                                 RecordingEngine(name=f"e{i}"))
    return manager


async def test_a_round_of_thousands_yields_to_the_loop_every_slice():
    manager = await manager_with_engines(2)
    session = manager.create_session()
    calls = [submit(manager, session, f"Item {i} {{{{output:y}}}}") for i in range(NUM_CALLS)]
    seen: list[int] = []

    async def observe() -> None:   # another task: what it sees between the loop's iterations
        while not seen or seen[-1] < NUM_CALLS:
            seen.append(dispatched(calls))
            await asyncio.sleep(0)

    observer = asyncio.create_task(observe())
    await asyncio.sleep(0)
    await manager.start()
    await asyncio.wait_for(observer, 30)
    steps = [b - a for a, b in zip(seen, seen[1:])]
    assert max(steps) <= CALLS_PER_SLICE, max(steps)
    assert len([s for s in steps if s > 0]) >= NUM_CALLS // CALLS_PER_SLICE
    assert len(manager.scheduler.round_stats) == 1   # one decision, carried out in slices
    await manager.close()


async def test_slices_place_what_a_round_at_once_places_in_its_order():
    placements = []
    for sliced in (False, True):
        manager = await manager_with_engines(3)
        session = manager.create_session()
        calls = [submit(manager, session, f"{'x' * (i % 7)} {{{{output:y}}}}")
                 for i in range(600)]
        if sliced:
            assert await manager.step_in_slices() == len(calls)
        else:
            assert manager.step() == len(calls)
        placements.append([(c.engine_id, c.timings["dispatched"]) for c in calls])
        await manager.close()
    assert [e for e, _ in placements[0]] == [e for e, _ in placements[1]]
    order = sorted(range(600), key=lambda i: placements[1][i][1])
    assert order == sorted(order)   # dispatched in the decision's order (stable on ties)


async def test_a_call_failed_between_slices_is_skipped_and_the_rest_dispatched():
    manager = await manager_with_engines(1)
    doomed, kept = manager.create_session(), manager.create_session()
    calls = [submit(manager, doomed if i % 2 else kept, f"Item {i} {{{{output:y}}}}")
             for i in range(4 * CALLS_PER_SLICE)]
    round_ = asyncio.create_task(manager.step_in_slices())
    await asyncio.sleep(0)   # the first slice is out
    manager.delete_session(doomed)
    placed = await round_
    assert placed < len(calls)
    assert all(c.state is CallState.FAILED for c in calls[1::2][CALLS_PER_SLICE:])
    assert all(c.state is not CallState.READY for c in calls[::2])
    await manager.close()


async def test_a_call_whose_engine_went_down_between_slices_is_queued_again():
    manager = await manager_with_engines(1)
    session = manager.create_session()
    calls = [submit(manager, session, f"Item {i} {{{{output:y}}}}")
             for i in range(3 * CALLS_PER_SLICE)]
    round_ = asyncio.create_task(manager.step_in_slices())
    await asyncio.sleep(0)
    manager.engines.get("e0").is_healthy = False
    assert await round_ == CALLS_PER_SLICE
    assert manager.scheduler.num_ready == len(calls) - CALLS_PER_SLICE
    assert {c.state for c in calls[CALLS_PER_SLICE:]} == {CallState.READY}
    await manager.close()
