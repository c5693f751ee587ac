"""Restart engine processes that parrot-serve launched when they exit on their own.

An engine process can die (a CUDA error, the OOM killer, a bug): without a supervisor its
engine stays down until an operator starts it again. `EngineSupervisor` waits on every
launched process; when one exits while the service runs, it marks the engine down at once
(its calls are re-dispatched, docs/RELIABILITY.md — the exit is proof, no heartbeat needed),
starts a new process from the same `LaunchSpec` (a new port and secret) after a back-off, and
re-admits the engine under its name with the new client (an empty prefix cache).

Crash loops are bounded: at most `max_restarts` restarts within `window_s` (the back-off
doubles from `backoff_s` with each restart in the window, up to 60 s); past that the engine
stays down and an ERROR says why. `max_restarts: 0` turns restarting off. A process that
fails to start counts as a restart.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import deque
from collections.abc import Callable, Sequence

from parrot.serve_config import EngineSpec
from parrot.manager.manager import Manager
from parrot.engines.client import HttpEngine, HttpEngineSettings
from parrot.engines.launcher import EngineProcess, LaunchedEngine

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 60.0


@dataclasses.dataclass(frozen=True)
class RestartPolicy:
    max_restarts: int = 5        # within window_s; 0: never restart
    window_s: float = 600.0
    backoff_s: float = 1.0       # before the first restart in the window; doubles after


class EngineSupervisor:
    """Watches launched engine processes and restarts those that exit (module docstring).

    `launched` is the server's list: a restarted engine's entry is replaced in it, so the
    server's `stop` stops the current process."""

    def __init__(self, manager: Manager, launched: list[LaunchedEngine],
                 specs: Sequence[EngineSpec], policy: RestartPolicy, *,
                 settings: HttpEngineSettings | None = None, startup_timeout_s: float = 600.0,
                 clock: Callable[[], float] | None = None) -> None:
        self._manager, self._launched = manager, launched
        self._specs = {s.name: s for s in specs}
        self._policy, self._settings = policy, settings
        self._startup_timeout_s = startup_timeout_s
        self._clock = clock
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._history: dict[str, deque[float]] = {}
        self.restarts: dict[str, int] = {}
        self._closing = False

    def start(self) -> None:
        if self._policy.max_restarts <= 0:
            return
        for launched in self._launched:
            self._watch(launched.name)

    async def close(self) -> None:
        """Stop watching (before the server stops its engines: those exits are not crashes)."""
        self._closing = True
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        self._tasks.clear()

    def _watch(self, name: str) -> None:
        self._tasks[name] = asyncio.create_task(self._supervise(name), name=f"supervise-{name}")

    def _current(self, name: str) -> LaunchedEngine:
        return next(e for e in self._launched if e.name == name)

    async def _supervise(self, name: str) -> None:
        loop = asyncio.get_running_loop()
        now = self._clock or loop.time
        while not self._closing:
            launched = self._current(name)
            code = await launched.process.wait()
            if self._closing:
                return
            self._mark_down(name, f"its process exited with code {code}")
            tail = launched.process.stderr_tail.strip().splitlines()[-5:]
            history = self._history.setdefault(name, deque())
            while history and now() - history[0] > self._policy.window_s:
                history.popleft()
            if len(history) >= self._policy.max_restarts:
                log.error("engine %s exited with code %s; not restarting: %d restarts within "
                          "%g s (engine_restart_max); it stays down. Last stderr: %s", name,
                          code, len(history), self._policy.window_s, " | ".join(tail))
                return
            delay = min(self._policy.backoff_s * 2 ** len(history), MAX_BACKOFF_S)
            history.append(now())
            log.error("engine %s exited with code %s; restarting it in %.1f s. Last stderr: %s",
                      name, code, delay, " | ".join(tail))
            await asyncio.sleep(delay)
            if not await self._restart(name, launched):
                continue  # the failed start is a restart of the window: the loop decides
            self.restarts[name] = self.restarts.get(name, 0) + 1

    def _mark_down(self, name: str, reason: str) -> None:
        state = self._manager.engines.get(name)
        if state is not None:
            self._manager.health.mark_down(state, reason)

    async def _restart(self, name: str, old: LaunchedEngine) -> bool:
        process = EngineProcess(old.process.spec, startup_timeout_s=self._startup_timeout_s)
        try:
            url = await process.start()
        except Exception as exc:  # noqa: BLE001 - logged; the supervisor loop decides
            log.error("engine %s failed to restart: %s", name, exc)
            # watch the failed process object: its wait() returns at once, and the loop
            # counts it against the window
            self._replace(old, LaunchedEngine(name, old.url, old.engine, process))
            return False
        client = HttpEngine(url, name=name, secret=process.secret, settings=self._settings)
        new = LaunchedEngine(name, url, client, process)
        self._replace(old, new)
        await old.engine.close()
        try:
            await self._manager.add_engine(self._specs[name], client)
        except Exception as exc:  # noqa: BLE001 - a new process the manager refuses
            log.error("engine %s restarted at %s but was not re-admitted: %s", name, url, exc)
            await process.stop()
            return False
        log.warning("engine %s restarted (pid %s) at %s and re-admitted", name, process.pid,
                    url)
        return True

    def _replace(self, old: LaunchedEngine, new: LaunchedEngine) -> None:
        index = self._launched.index(old)
        self._launched[index] = new
