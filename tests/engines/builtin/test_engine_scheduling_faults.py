"""A builtin engine whose batch scheduler raises: its requests fail with a typed error, the loop
backs off (the event loop keeps running), the engine says it is unhealthy (also over HTTP),
the manager moves its calls to another engine, and it recovers once scheduling works again."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer

from parrot.serve_config import EngineSpec, ManagerConfig
from parrot.manager.manager import Manager
from parrot.engines.builtin.engine_loop import RETRY_MAX_S, RETRY_MIN_S
from parrot.engines.builtin.batch_scheduler import Batch, BatchScheduler
from parrot.engines.protocol import FillRequest, GenerateRequest
from parrot.engines.server import create_app
from parrot.errors import EngineUnavailableError
from parrot.policies.base import CallView, EngineView, Placement, Policy
from parrot.sampling import SamplingParams
from parrot.types import Criterion
from tests.manager.conftest import out, submit

# A spinning loop never yields: this test would hang, and the timeout makes that a failure.
pytestmark = pytest.mark.timeout(20)


class Switch:
    """Whether the scheduler is broken, and how often it was asked to schedule."""

    def __init__(self) -> None:
        self.broken = False
        self.num_schedules = 0


def flaky_scheduler(switch: Switch) -> type[BatchScheduler]:
    class Flaky(BatchScheduler):
        def schedule(self, *, decode_only: bool = False) -> Batch | None:
            switch.num_schedules += 1
            if switch.broken:
                raise RuntimeError("scheduler bug")
            return super().schedule(decode_only=decode_only)

    return Flaky


async def ticks_during(seconds: float) -> int:
    """How many times a plain task gets the event loop in `seconds` (1 ms sleeps)."""
    loop = asyncio.get_running_loop()
    end, ticks = loop.time() + seconds, 0
    while loop.time() < end:
        await asyncio.sleep(0.001)
        ticks += 1
    return ticks


async def wait_healthy(engine, timeout: float) -> float:
    loop = asyncio.get_running_loop()
    started = loop.time()
    while not await engine.healthz():
        assert loop.time() - started < timeout, "engine did not become healthy"
        await asyncio.sleep(0.01)
    return loop.time() - started


async def test_a_raising_scheduler_fails_requests_backs_off_and_recovers(tiny_bundle,
                                                                         make_engine):
    switch = Switch()
    engine = make_engine(tiny_bundle, scheduler_type=flaky_scheduler(switch))
    await engine.fill(FillRequest("ok", token_ids=(5, 6, 7)))
    assert await engine.healthz()

    switch.broken = True
    with pytest.raises(EngineUnavailableError, match="unhealthy.*scheduler bug"):
        await engine.fill(FillRequest("a", token_ids=(8, 9)))
    assert not await engine.healthz()
    # New work is refused at once (the manager sends it elsewhere), not queued behind the bug.
    with pytest.raises(EngineUnavailableError, match="unhealthy"):
        await engine.generate_all(GenerateRequest("g", "ok", SamplingParams(max_tokens=2)))

    # The loop awaits on its error path: other tasks keep running, and scheduling is retried
    # a few times per second at most (a spinning loop would never let `ticks_during` return).
    before = switch.num_schedules
    ticks = await ticks_during(0.5)
    retries = switch.num_schedules - before
    assert ticks > 50
    assert 1 <= retries <= 12   # back-off doubling from RETRY_MIN_S: ~6 in 0.5 s
    assert not await engine.healthz()

    switch.broken = False
    assert await wait_healthy(engine, timeout=RETRY_MAX_S + 1.0) <= RETRY_MAX_S + 1.0
    await engine.fill(FillRequest("b", token_ids=(8, 9)))
    out = await engine.generate_all(GenerateRequest("g", "b", SamplingParams(
        max_tokens=3, ignore_eos=True)))
    assert len(out.token_ids) == 3
    engine.check_invariants()


async def test_close_ends_a_back_off_at_once(tiny_bundle, make_engine):
    switch = Switch()
    engine = make_engine(tiny_bundle, scheduler_type=flaky_scheduler(switch))
    await engine.fill(FillRequest("ok", token_ids=(5, 6, 7)))
    switch.broken = True
    with pytest.raises(EngineUnavailableError):
        await engine.fill(FillRequest("a", token_ids=(8,)))
    await asyncio.sleep(8 * RETRY_MIN_S)  # into a longer back-off
    loop = asyncio.get_running_loop()
    started = loop.time()
    await engine.close()
    assert loop.time() - started < RETRY_MAX_S / 2


async def test_engine_server_healthz_is_503_while_scheduling_fails(tiny_bundle, make_engine):
    switch = Switch()
    engine = make_engine(tiny_bundle, scheduler_type=flaky_scheduler(switch))
    server = TestServer(create_app(engine))
    await server.start_server()
    try:
        async with ClientSession() as http:
            url = str(server.make_url("/healthz"))
            async with http.get(url) as response:
                assert (response.status, await response.json()) == (200, {"ok": True})
            switch.broken = True
            with pytest.raises(EngineUnavailableError):
                await engine.fill(FillRequest("a", token_ids=(8,)))
            async with http.get(url) as response:
                assert (response.status, await response.json()) == (503, {"ok": False})
            switch.broken = False
            await wait_healthy(engine, timeout=RETRY_MAX_S + 1.0)
            async with http.get(url) as response:
                assert response.status == 200
    finally:
        await server.close()


class FirstHealthy(Policy):
    """Every ready call on the first healthy engine, in the order engines joined."""

    name = "first-healthy"

    def schedule(self, *, calls: Sequence[CallView],
                 engines: Sequence[EngineView]) -> list[Placement]:
        healthy = [e for e in engines if e.is_healthy]
        return [Placement(c.call_id, healthy[0].engine_id) for c in calls] if healthy else []


async def test_the_manager_moves_calls_off_an_engine_whose_scheduler_raises(smollm2_bundle,
                                                                            make_engine):
    switch = Switch()
    switch.broken = True
    broken = make_engine(smollm2_bundle, scheduler_type=flaky_scheduler(switch))
    good = make_engine(smollm2_bundle)
    manager = Manager(FirstHealthy(), ManagerConfig(engine_heartbeat_interval_s=0.05))
    await manager.add_engine(EngineSpec(name="broken", in_process=True), broken)
    await manager.add_engine(EngineSpec(name="good", in_process=True), good)
    await manager.start()
    try:
        session = manager.create_session()
        call = submit(manager, session, "Say hi: {{output:a}}", a={
            "in_out": "output", "sampling": {"max_tokens": 3, "ignore_eos": True}})
        text = await manager.get(session, out(call, "a"), Criterion.LATENCY, timeout=10)
        assert text and call.engine_id == "good" and call.attempts == 1
        assert not manager.engines.get("broken").is_healthy
        switch.broken = False  # fixed: the engine heals, the manager's probe re-admits it
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RETRY_MAX_S + 2.0
        while not manager.engines.get("broken").is_healthy:
            assert loop.time() < deadline, "the healed engine was not re-admitted"
            await asyncio.sleep(0.02)
    finally:
        await manager.close()
