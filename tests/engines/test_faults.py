"""Fault injection against real engine processes under load.

The manager runs in this process; the engines are `parrot-engine` subprocesses (simulated kind)
reached over HTTP with their secrets, exactly as parrot-serve runs them. Faults are real signals:
SIGKILL (a dead engine), SIGSTOP/SIGCONT (a frozen one), and a restart of a killed engine that
registers again under its name.
"""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import dataclass, field

import pytest

from parrot.serve_config import EngineSpec, ManagerConfig
from parrot.manager.engine_health import http_engine_settings
from parrot.manager.manager import Manager
from parrot.engines.launcher import LaunchedEngine, LaunchSpec, launch_engines, stop_engines
from parrot.errors import CallFailedError, EngineUnavailableError, ParrotError
from parrot.policies.least_queue import LeastQueuePolicy
from parrot.types import CallState, Criterion
from tests.manager.conftest import out, submit

pytestmark = pytest.mark.slow

HEARTBEAT = {"engine_heartbeat_interval_s": 0.2, "engine_heartbeat_timeout_s": 1.0}
# A call decodes 16 tokens at ~10 ms per iteration: ~0.2 s on an idle engine.
SIM = {"decode_base_ms": 10.0, "decode_per_seq_ms": 0.0, "decode_per_token_ms": 0.0,
       "prefill_per_token_ms": 0.0}
GET_BOUND_S = 6.0  # detection (≤ 1.2 s) + the re-dispatched call on a loaded engine


async def _launch(names: list[str], config: ManagerConfig) -> list[LaunchedEngine]:
    return await launch_engines([LaunchSpec(n, "simulated", SIM) for n in names],
                                startup_timeout_s=60, settings=http_engine_settings(config))


async def _manager(config: ManagerConfig, engines: list[LaunchedEngine]) -> Manager:
    manager = Manager(LeastQueuePolicy(), config)
    await manager.start()
    for launched in engines:
        await manager.add_engine(EngineSpec(name=launched.name), launched.engine)
    return manager


@dataclass
class _Load:
    """Clients that each run two-call chains back to back and time every `get`."""

    manager: Manager
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    latencies: list[float] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    calls: list = field(default_factory=list)

    async def client(self, index: int) -> None:
        loop = asyncio.get_running_loop()
        session = self.manager.create_session()
        round_ = 0
        while not self.stop.is_set():
            first = submit(self.manager, session, "Q {{input:x}} {{output:y}}",
                           x=f"client {index} round {round_}",
                           y={"in_out": "output", "sampling": {"max_tokens": 16}})
            second = submit(self.manager, session, "R {{input:y}} {{output:z}}",
                            y=out(first, "y"),
                            z={"in_out": "output", "sampling": {"max_tokens": 16}})
            self.calls += [first, second]
            started = loop.time()
            try:
                await self.manager.get(session, out(second, "z"), Criterion.LATENCY,
                                       timeout=30)
            except ParrotError as exc:
                self.errors.append(exc)
            self.latencies.append(loop.time() - started)
            round_ += 1


async def _watch_health(manager: Manager, name: str, log: list[tuple[float, bool]],
                        stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    last = None
    while not stop.is_set():
        healthy = manager.engines.get(name).is_healthy
        if healthy != last:
            log.append((loop.time(), healthy))
            last = healthy
        await asyncio.sleep(0.02)


async def _until_finished(calls: list) -> None:
    for _ in range(100):
        if all(c.state.is_finished for c in calls):
            return
        await asyncio.sleep(0.05)


async def test_kill_freeze_and_restart_under_load_lose_nothing() -> None:
    config = ManagerConfig(max_call_retries=4, no_engine_grace_s=5.0, **HEARTBEAT)
    engines = await _launch(["e0", "e1", "e2"], config)
    restarted: list[LaunchedEngine] = []
    manager = await _manager(config, engines)
    load = _Load(manager)
    health: dict[str, list[tuple[float, bool]]] = {"e0": [], "e1": []}
    loop = asyncio.get_running_loop()
    try:
        clients = [asyncio.create_task(load.client(i)) for i in range(12)]
        watchers = [asyncio.create_task(_watch_health(manager, n, log, load.stop))
                    for n, log in health.items()]
        await asyncio.sleep(1.5)
        os.kill(engines[0].process.pid, signal.SIGKILL)             # e0 dies
        await asyncio.sleep(1.5)
        frozen_at = loop.time()
        os.kill(engines[1].process.pid, signal.SIGSTOP)             # e1 freezes
        await asyncio.sleep(2.0)
        restarted = await _launch(["e0"], config)                   # e0 comes back elsewhere
        await manager.add_engine(EngineSpec(name="e0"), restarted[0].engine)
        e0_done_at_restart = manager.engines.get("e0").num_calls_done
        await asyncio.sleep(2.0)
        e1_done_at_freeze_end = manager.engines.get("e1").num_calls_done
        resumed_at = loop.time()
        os.kill(engines[1].process.pid, signal.SIGCONT)             # e1 resumes
        await asyncio.sleep(2.5)
        load.stop.set()
        await asyncio.wait_for(asyncio.gather(*clients, *watchers), 60)
        await _until_finished(load.calls)  # a call frees its context after publishing

        # nothing lost, nothing answered twice: every call finished exactly once with a value
        assert load.errors == []
        assert load.calls and all(c.state is CallState.DONE for c in load.calls)
        assert max(load.latencies) < GET_BOUND_S, max(load.latencies)
        # the freeze was detected within the heartbeat timeout, and the engine re-admitted
        down_at = next(t for t, healthy in health["e1"] if not healthy)
        assert down_at - frozen_at < 1.0 + 0.2 + 1.3  # timeout + interval + CI jitter
        up_at = next(t for t, healthy in health["e1"] if healthy and t > down_at)
        assert up_at - resumed_at < 1.5
        assert manager.engines.get("e1").num_calls_done > e1_done_at_freeze_end
        # the killed engine was noticed at once; its restart took calls again
        assert health["e0"][1][1] is False
        assert manager.engines.get("e0").num_calls_done > e0_done_at_restart
        assert manager.engines.get("e0").engine is restarted[0].engine
        # re-dispatch only where a fault was: at most the calls running on e0 and e1 then
        assert sum(c.attempts for c in load.calls) <= 2 * 12
        # the resumed engine aborted what it was doing for us and holds no stray work
        for _ in range(50):
            stats = await manager.engines.get("e1").engine.stats()
            if stats.num_running == stats.num_waiting == 0:
                break
            await asyncio.sleep(0.1)
        assert stats.num_running == stats.num_waiting == 0
    finally:
        load.stop.set()
        await manager.close()
        for launched in engines:
            if launched.process.returncode is None:
                os.kill(launched.process.pid, signal.SIGCONT)
        await stop_engines(engines + restarted)


async def test_with_the_only_engine_killed_calls_fail_clearly_and_submits_are_refused() -> None:
    # Reproduction: with the only engine killed, in-flight and new calls never failed, gets
    # timed out after 30 s and submits still returned 200.
    config = ManagerConfig(no_engine_grace_s=1.0, **HEARTBEAT)
    engines = await _launch(["only"], config)
    manager = await _manager(config, engines)
    loop = asyncio.get_running_loop()
    try:
        session = manager.create_session()
        long_call = submit(manager, session, "Q {{input:x}} {{output:y}}", x="in flight",
                           y={"in_out": "output", "sampling": {"max_tokens": 500}})
        await asyncio.sleep(0.5)
        assert long_call.state is CallState.RUNNING
        os.kill(engines[0].process.pid, signal.SIGKILL)
        killed_at = loop.time()
        with pytest.raises(CallFailedError, match="no engine can take the call"):
            await manager.get(session, out(long_call, "y"), Criterion.LATENCY, timeout=30)
        assert loop.time() - killed_at < 1.0 + 1.0
        with pytest.raises(EngineUnavailableError, match="every engine is down"):
            submit(manager, session, "Q {{input:x}} {{output:y}}", x="new")
    finally:
        await manager.close()
        await stop_engines(engines)


async def test_a_burst_over_a_small_pool_places_every_call_once() -> None:
    # Reproduction: a burst much larger than the connection pool failed with 424 "engine ...
    # failed ... ConnectionTimeoutError" although the engines were alive, and re-dispatched
    # calls (2,000 calls, 3,500 placements).
    config = ManagerConfig(engine_pool_size=8, engine_connect_timeout_s=1.0, **HEARTBEAT)
    engines = await launch_engines(
        [LaunchSpec(n, "simulated", {"zero_latency": True}) for n in ("b0", "b1")],
        startup_timeout_s=60, settings=http_engine_settings(config))
    manager = await _manager(config, engines)
    try:
        session = manager.create_session()
        calls = [submit(manager, session, "Burst {{input:x}} {{output:y}}", x=str(i),
                        y={"in_out": "output", "sampling": {"max_tokens": 32}})
                 for i in range(600)]
        await asyncio.wait_for(asyncio.gather(
            *(manager.get(session, out(c, "y"), Criterion.THROUGHPUT) for c in calls)), 120)
        await _until_finished(calls)
        bad = [(c.state, c.attempts, c.error) for c in calls
               if c.state is not CallState.DONE or c.attempts]
        assert not bad, (len(bad), bad[:3])
        placed = sum(n for _, n in manager.scheduler.round_stats)
        assert placed == len(calls)
        assert all(e.is_healthy for e in manager.engines)
    finally:
        await manager.close()
        await stop_engines(engines)


async def _start_joiner(manager_url: str, admin_token: str) -> tuple[asyncio.subprocess.Process,
                                                                     str]:
    """A hand-started engine: no secret given, so it makes one and registers with it."""
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k != "PARROT_ENGINE_SECRET"}
    env |= {"PARROT_ADMIN_TOKEN": admin_token,
            "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "parrot.cli.engine", "--kind", "simulated", "--name", "joiner",
        "--params", '{"zero_latency": true}', "--register-url", manager_url,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, env=env)
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
    assert line.startswith("READY "), line
    return proc, line.split()[1]


async def _until(predicate, timeout_s: float = 20.0) -> None:
    for _ in range(int(timeout_s / 0.05)):
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not reached in time")


async def test_an_engine_joining_by_url_proves_its_secret_and_reregisters_after_a_restart(
) -> None:
    import aiohttp

    from parrot.serve_config import ServeConfig
    from parrot.server.service import ParrotServer

    server = ParrotServer(ServeConfig(manager=ManagerConfig(
        admin_token="admin-token-of-the-test", **HEARTBEAT)))
    manager_url = await server.start(port=0)
    manager = server.manager
    procs: list[asyncio.subprocess.Process] = []
    try:
        proc, first_url = await _start_joiner(manager_url, "admin-token-of-the-test")
        procs.append(proc)
        await _until(lambda: len(manager.engines) == 1)
        async with aiohttp.ClientSession() as http:  # its port is closed to anyone else
            async with http.post(first_url + "/v1/engine/fill",
                                 json={"context_id": "a", "text": "x"}) as resp:
                assert resp.status == 401
        session = manager.create_session()
        call = submit(manager, session, "A {{input:x}} {{output:y}}", x="1")
        await manager.get(session, out(call, "y"), Criterion.LATENCY, timeout=10)
        assert call.engine_id == "joiner"

        proc.kill()  # the engine dies ...
        await proc.wait()
        await _until(lambda: not manager.engines.get("joiner").is_healthy)
        # ... and is started again
        proc, second_url = await _start_joiner(manager_url, "admin-token-of-the-test")
        procs.append(proc)
        await _until(lambda: manager.engines.get("joiner").is_healthy)
        assert manager.engines.get("joiner").engine.url == second_url != first_url
        call = submit(manager, session, "B {{input:x}} {{output:y}}", x="2")
        value = await manager.get(session, out(call, "y"), Criterion.LATENCY, timeout=10)
        assert value and call.attempts == 0
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.terminate()
                await proc.wait()
        await server.stop()


async def test_parrot_serve_restarts_a_launched_engine_that_dies() -> None:
    """A launched engine killed with SIGKILL is marked down at once (the exit is proof),
    started again under its name (new port, new secret) and takes calls; a crash loop stops
    after engine_restart_max restarts in the window, leaving the engine down."""
    from parrot.serve_config import ServeConfig
    from parrot.server.service import ParrotServer

    server = ParrotServer(ServeConfig(
        manager=ManagerConfig(engine_restart_max=2, engine_restart_window_s=600,
                              engine_restart_backoff_s=0.05, **HEARTBEAT),
        engines=(EngineSpec(name="e0", kind="simulated", params=SIM),)))
    await server.start(port=0)
    manager = server.manager
    try:
        first = server.launched[0]
        session = manager.create_session()
        call = submit(manager, session, "A {{input:x}} {{output:y}}", x="1")
        assert await manager.get(session, out(call, "y"), Criterion.LATENCY, timeout=10)

        os.kill(first.process.pid, signal.SIGKILL)
        await _until(lambda: server.supervisor.restarts.get("e0") == 1)
        second = server.launched[0]
        assert second.process.pid != first.process.pid and second.url != first.url
        state = manager.engines.get("e0")
        assert state.is_healthy and state.engine is second.engine
        call = submit(manager, session, "B {{input:x}} {{output:y}}", x="2")
        assert await manager.get(session, out(call, "y"), Criterion.LATENCY, timeout=10)

        os.kill(second.process.pid, signal.SIGKILL)                  # restart 2 of 2
        await _until(lambda: server.supervisor.restarts.get("e0") == 2)
        third = server.launched[0]
        os.kill(third.process.pid, signal.SIGKILL)                   # one too many
        await _until(lambda: not manager.engines.get("e0").is_healthy, timeout_s=5)
        await asyncio.sleep(0.5)
        assert server.supervisor.restarts["e0"] == 2 and server.launched[0] is third
        assert not manager.engines.get("e0").is_healthy
    finally:
        await server.stop()
    assert server.launched == ()


async def test_no_restart_when_turned_off_or_when_the_server_stops() -> None:
    from parrot.serve_config import ServeConfig
    from parrot.server.service import ParrotServer

    server = ParrotServer(ServeConfig(
        manager=ManagerConfig(engine_restart_max=0, **HEARTBEAT),
        engines=(EngineSpec(name="e0", kind="simulated", params=SIM),)))
    await server.start(port=0)
    try:
        first = server.launched[0]
        os.kill(first.process.pid, signal.SIGKILL)
        await _until(lambda: not server.manager.engines.get("e0").is_healthy, timeout_s=5)
        await asyncio.sleep(0.3)
        assert server.launched[0] is first                          # not restarted
    finally:
        await server.stop()
