"""The virtual-clock event loop: instant, exact and deterministic simulated time."""

from __future__ import annotations

import asyncio
import random
import socket
import time

import pytest

from parrot.sim.clock import VirtualClockDeadlockError, VirtualClockEventLoop, run_virtual


def now() -> float:
    return asyncio.get_running_loop().time()


def test_an_hour_of_sleeps_in_many_tasks_takes_no_wall_time():
    rng = random.Random(7)
    plans = [[rng.choice([0.25, 0.5, 1.0, 7.5, 60.0]) for _ in range(40)] for _ in range(200)]
    plans[0].append(3600.0 - sum(plans[0]))  # the longest task ends at exactly one hour

    async def sleeper(durations: list[float], stamps: list[float]) -> None:
        for duration in durations:
            await asyncio.sleep(duration)
            stamps.append(now())

    async def main() -> list[list[float]]:
        stamps: list[list[float]] = [[] for _ in plans]
        async with asyncio.TaskGroup() as tg:
            for durations, out in zip(plans, stamps):
                tg.create_task(sleeper(durations, out))
        assert now() == 3600.0
        return stamps

    started = time.perf_counter()
    stamps = run_virtual(main())
    assert time.perf_counter() - started < 1.0
    for durations, got in zip(plans, stamps):
        expected, t = [], 0.0
        for duration in durations:
            t += duration
            expected.append(t)
        assert got == expected  # exact, not approximately


def test_event_order_is_deterministic_and_follows_deadlines():
    async def main() -> list[tuple[float, str]]:
        log: list[tuple[float, str]] = []

        async def worker(name: str, delays: list[float]) -> None:
            for delay in delays:
                await asyncio.sleep(delay)
                log.append((now(), name))

        async with asyncio.TaskGroup() as tg:
            for i in range(50):
                tg.create_task(worker(f"w{i}", [(i % 7) * 0.1, 1.0, (i % 3) * 2.0]))
        return log

    first, second = run_virtual(main()), run_virtual(main())
    assert first == second
    assert [t for t, _ in first] == sorted(t for t, _ in first)
    assert first[0] == (0.0, "w0")


def test_timers_futures_events_and_timeouts():
    async def main() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        seen = []
        future = loop.create_future()
        loop.call_later(7.0, future.set_result, "late")
        event = asyncio.Event()
        loop.call_at(5.0, event.set)
        await event.wait()
        seen.append(("event", now()))
        seen.append((await future, now()))
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.sleep(100.0), timeout=3.0)
        seen.append(("wait_for", now()))
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(2.5):
                await asyncio.Event().wait()
        seen.append(("timeout", now()))
        queue: asyncio.Queue[int] = asyncio.Queue()
        loop.call_later(0.5, queue.put_nowait, 42)
        seen.append((str(await queue.get()), now()))
        return seen

    assert run_virtual(main()) == [("event", 5.0), ("late", 7.0), ("wait_for", 10.0),
                                   ("timeout", 12.5), ("42", 13.0)]


def test_start_time_and_sleeps_longer_than_a_day():
    async def main() -> float:
        assert now() == 100.0
        await asyncio.sleep(3 * 86400.0)  # asyncio splits waits at one day
        return now()

    assert run_virtual(main(), start_time=100.0) == 100.0 + 3 * 86400.0


def test_executor_work_takes_no_virtual_time():
    async def main() -> tuple[str, float, list[str]]:
        loop = asyncio.get_running_loop()
        order: list[str] = []

        async def ticker() -> None:
            await asyncio.sleep(1.0)
            order.append("tick")

        task = asyncio.create_task(ticker())
        result = await loop.run_in_executor(None, lambda: time.sleep(0.02) or "done")
        order.append("thread")
        assert await asyncio.to_thread(str.upper, "x") == "X"
        await task
        return result, now(), order

    assert run_virtual(main()) == ("done", 1.0, ["thread", "tick"])


def test_deadlock_raises_instead_of_hanging():
    async def main() -> None:
        await asyncio.Event().wait()

    with pytest.raises(VirtualClockDeadlockError, match="no task can ever be woken"):
        run_virtual(main())


def test_real_file_descriptors_are_refused():
    loop = VirtualClockEventLoop()
    left, right = socket.socketpair()
    try:
        with pytest.raises(RuntimeError, match="does no real I/O"):
            loop.add_reader(left.fileno(), lambda: None)
        with pytest.raises(RuntimeError, match="does no real I/O"):
            loop.add_writer(right.fileno(), lambda: None)
    finally:
        left.close()
        right.close()
        loop.close()


def test_loop_time_is_virtual_outside_run_virtual_too():
    loop = VirtualClockEventLoop(start_time=2.0)
    try:
        handle_times: list[float] = []
        loop.call_later(4.0, lambda: handle_times.append(loop.time()))
        loop.run_until_complete(asyncio.sleep(10.0))
        assert handle_times == [6.0]
        assert loop.time() == 12.0
    finally:
        loop.close()
