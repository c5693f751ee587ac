"""At most the engine's batch of calls run their requests on one engine process at once; the
rest wait in the manager, latency-critical first (parrot/manager/call_slots.py)."""

from __future__ import annotations

import asyncio

from parrot.engines.protocol import (LATENCY_PRIORITY, THROUGHPUT_PRIORITY, EngineInfo,
                                     FillRequest, FillResult, ServingLimits)
from parrot.manager.call_slots import CallSlots
from parrot.manager.manager import Manager
from parrot.policies.least_queue import LeastQueuePolicy
from parrot.serve_config import EngineSpec, ManagerConfig
from parrot.types import Criterion
from tests.manager.conftest import out, submit
from tests.manager.fakes import RecordingEngine


async def test_waiters_go_latency_first_then_in_arrival_order():
    slots = CallSlots(1)
    order: list[str] = []
    release = asyncio.Event()

    async def run(name: str, priority: int) -> None:
        async with slots.held(priority):
            order.append(name)
            await release.wait()

    first = asyncio.create_task(run("first", THROUGHPUT_PRIORITY))
    await asyncio.sleep(0)
    queued = (("t1", THROUGHPUT_PRIORITY), ("t2", THROUGHPUT_PRIORITY),
              ("lat", LATENCY_PRIORITY))
    waiting = [asyncio.create_task(run(n, p)) for n, p in queued]
    await asyncio.sleep(0)
    assert (slots.num_held, slots.num_waiting) == (1, 3)
    release.set()
    await asyncio.gather(first, *waiting)
    assert order == ["first", "lat", "t1", "t2"]
    assert (slots.num_held, slots.num_waiting) == (0, 0)


async def test_a_cancelled_waiter_gives_up_its_place_and_a_raised_limit_lets_waiters_go():
    slots = CallSlots(1)
    release = asyncio.Event()
    ran: list[int] = []

    async def run(n: int) -> None:
        async with slots.held(THROUGHPUT_PRIORITY):
            ran.append(n)
            await release.wait()

    tasks = [asyncio.create_task(run(n)) for n in range(4)]
    await asyncio.sleep(0)
    tasks[1].cancel()
    await asyncio.sleep(0)
    assert ran == [0] and slots.num_waiting == 2
    slots.set_limit(3)
    await asyncio.sleep(0)
    assert ran == [0, 2, 3] and slots.num_held == 3
    release.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert (slots.num_held, slots.num_waiting) == (0, 0)


class RemoteEngine(RecordingEngine):
    """An engine process (as the manager sees one) that runs 2 sequences at a time."""

    is_remote = True
    in_flight = 0
    most_in_flight = 0

    async def info(self) -> EngineInfo:
        info = await super().info()
        return EngineInfo(info.name, info.kind, info.model, info.max_context_len,
                          info.block_size, info.num_blocks_total,
                          serving=ServingLimits(max_num_seqs=2, max_batch_tokens=4096,
                                                kv_cache_tokens=1 << 20))

    async def fill(self, request: FillRequest) -> FillResult:
        self.in_flight += 1   # a call's first request: it holds its slot from here...
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        return await super().fill(request)

    async def free_context(self, context_id: str) -> None:
        await super().free_context(context_id)
        self.in_flight -= 1   # ...to its last


class InProcessEngine(RemoteEngine):
    is_remote = False


async def run_calls(config: ManagerConfig, kind: type[RemoteEngine] = RemoteEngine
                    ) -> RemoteEngine:
    manager = Manager(LeastQueuePolicy(), config)
    engine = kind(delay=0.01)
    await manager.add_engine(EngineSpec(name="e0", in_process=True), engine)
    await manager.start()
    session = manager.create_session()
    calls = [submit(manager, session, f"Item {i} {{{{output:y}}}}") for i in range(8)]
    await asyncio.gather(*(manager.get(session, out(c, "y"), Criterion.THROUGHPUT)
                           for c in calls))
    await manager.close()
    return engine


async def test_an_engine_process_runs_at_most_its_batch_of_calls_at_once():
    assert (await run_calls(ManagerConfig())).most_in_flight == 2
    assert (await run_calls(ManagerConfig(engine_max_calls=3))).most_in_flight == 3
    assert (await run_calls(ManagerConfig(engine_max_calls=0))).most_in_flight == 8
    # no requests on a wire: not bounded
    assert (await run_calls(ManagerConfig(), InProcessEngine)).most_in_flight == 8
