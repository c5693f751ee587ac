"""A scheduling round waits, after its wake, while the loop's next turns keep bringing more ready
calls (at most COALESCE_TURNS turns and `manager.round_coalesce_ms`): calls made ready in
consecutive turns share one round; a lone call is placed one turn after its wake; a loop that
never stops bringing work still gets its round within the time bound."""

from __future__ import annotations

import asyncio
import time

import pytest

from parrot.errors import ConfigError
from parrot.manager.manager import Manager
from parrot.manager.scheduler import COALESCE_TURNS
from parrot.policies.least_queue import LeastQueuePolicy
from parrot.serve_config import EngineSpec, ManagerConfig
from parrot.types import CallState
from tests.manager.conftest import submit
from tests.manager.fakes import RecordingEngine


async def started_manager(coalesce_ms: float) -> Manager:
    manager = Manager(LeastQueuePolicy(), ManagerConfig(round_coalesce_ms=coalesce_ms))
    await manager.add_engine(EngineSpec(name="e0", in_process=True), RecordingEngine(name="e0"))
    await manager.start()
    await asyncio.sleep(0)   # the scheduling task waits for its first wake
    return manager


async def submit_one_per_turn(manager: Manager, count: int) -> list:
    """`count` calls, each submitted in a turn of the loop of its own."""
    session = manager.create_session()
    calls = []
    for i in range(count):
        calls.append(submit(manager, session, f"Turn {i}: {{{{output:y}}}}"))
        await asyncio.sleep(0)
    return calls


async def until_dispatched(calls) -> None:
    async def wait() -> None:
        while any(c.state in (CallState.PENDING, CallState.READY) for c in calls):
            await asyncio.sleep(0)
    await asyncio.wait_for(wait(), 5)


@pytest.mark.parametrize("coalesce_ms, rounds", [(5.0, 1), (0.0, 4)])
async def test_calls_ready_in_consecutive_turns_share_one_round(coalesce_ms, rounds):
    manager = await started_manager(coalesce_ms)
    calls = await submit_one_per_turn(manager, 4)
    await until_dispatched(calls)
    placed = [n for _, n in manager.scheduler.round_stats]
    assert placed == [4] if rounds == 1 else placed == [1, 1, 1, 1], placed
    await manager.close()


async def test_a_lone_call_is_placed_one_turn_after_its_wake():
    manager = await started_manager(5.0)
    session = manager.create_session()
    call = submit(manager, session, "Alone: {{output:y}}")
    turns = 0
    while call.state is CallState.READY:
        await asyncio.sleep(0)
        turns += 1
    # its wake, the quiet turn the scheduler waits for, the round
    assert turns <= 3, turns
    assert [n for _, n in manager.scheduler.round_stats] == [1]
    await manager.close()


async def test_more_turns_of_work_than_the_limit_get_more_rounds():
    manager = await started_manager(1000.0)   # the turn limit, not the time, ends the wait
    calls = await submit_one_per_turn(manager, 3 * COALESCE_TURNS)
    await until_dispatched(calls)
    placed = [n for _, n in manager.scheduler.round_stats]
    assert sum(placed) == 3 * COALESCE_TURNS
    assert len(placed) >= 3 and max(placed) <= COALESCE_TURNS + 1, placed
    await manager.close()


async def test_a_loop_that_keeps_bringing_work_gets_its_round_within_the_time_bound():
    manager = await started_manager(20.0)
    session = manager.create_session()
    first = submit(manager, session, "First: {{output:y}}")
    started = time.perf_counter()

    async def busy() -> None:   # every turn wakes the scheduler and takes 10 ms
        while True:
            manager.scheduler.wake()
            time.sleep(0.010)
            await asyncio.sleep(0)

    spinner = asyncio.create_task(busy())
    await until_dispatched([first])
    waited = time.perf_counter() - started
    spinner.cancel()
    # 20 ms of coalescing and the turn that passed it (10 ms); without the bound its
    # COALESCE_TURNS turns would take 80 ms
    assert waited < 0.020 + 0.035, waited
    assert len(manager.scheduler.round_stats) == 1
    await manager.close()


@pytest.mark.parametrize("value", [-1.0, 5000.0, "soon"])
def test_round_coalesce_ms_is_validated(value):
    with pytest.raises(ConfigError, match="round_coalesce_ms"):
        ManagerConfig(round_coalesce_ms=value)
