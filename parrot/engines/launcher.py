"""Start engine processes (`python -m parrot.cli.engine`) and stop them again.

`parrot-serve` uses this for the engines its YAML names:

    engines = await launch_engines([EngineSpec("e0", "simulated", {"zero_latency": True})])
    ... engines[0].url, engines[0].engine (an HttpEngine) ...
    await stop_engines(engines)

Each process listens on port 0 and reports its URL in a `READY <url>` stdout line; the launcher
waits for that line (with a timeout), then for /healthz. A failed start raises EngineLaunchError
with the tail of the process's stderr. `stop()` sends SIGTERM, then SIGKILL after a grace period.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from parrot.engines.client import HttpEngine
from parrot.errors import EngineError

log = logging.getLogger(__name__)

STDERR_TAIL_LINES = 40
_REPO_ROOT = Path(__file__).resolve().parents[2]


class EngineLaunchError(EngineError):
    """An engine process did not start (it exited, or did not become ready in time)."""


@dataclass(frozen=True)
class EngineSpec:
    name: str
    kind: str  # "simulated" | "builtin"
    params: Mapping[str, Any] = field(default_factory=dict)
    host: str = "127.0.0.1"
    register_url: str | None = None


class EngineProcess:
    """One engine subprocess; `start()` returns its URL once it is healthy."""

    def __init__(self, spec: EngineSpec, *, python: str = sys.executable,
                 startup_timeout_s: float = 60.0, grace_s: float = 5.0) -> None:
        self.spec = spec
        self.url: str | None = None
        self._python = python
        self._startup_timeout_s = startup_timeout_s
        self._grace_s = grace_s
        self._proc: asyncio.subprocess.Process | None = None
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._readers: list[asyncio.Task[None]] = []

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.returncode

    @property
    def stderr_tail(self) -> str:
        return "".join(self._stderr_tail)

    def command(self) -> list[str]:
        spec = self.spec
        cmd = [self._python, "-m", "parrot.cli.engine", "--kind", spec.kind, "--name", spec.name,
               "--params", json.dumps(dict(spec.params)), "--host", spec.host, "--port", "0"]
        if spec.register_url:
            cmd += ["--register-url", spec.register_url]
        # the child logs at our level; its lines are relayed into our log (relay_line)
        cmd += ["--log-level", logging.getLevelName(log.getEffectiveLevel())]
        return cmd

    async def start(self) -> str:
        env = dict(os.environ)
        # the child must import this very package, wherever the parent was started from
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_REPO_ROOT),
                                                          env.get("PYTHONPATH")]))
        self._proc = await asyncio.create_subprocess_exec(
            *self.command(), stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=env)
        self._readers.append(asyncio.create_task(self._drain_stderr()))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._startup_timeout_s
        try:
            self.url = await asyncio.wait_for(self._read_ready_line(), self._startup_timeout_s)
            self._readers.append(asyncio.create_task(self._drain_stdout()))
            client = HttpEngine(self.url)
            try:
                await client.wait_healthy(max(deadline - loop.time(), 0.1))
            finally:
                await client.close()
        except BaseException as exc:
            reason = "timed out" if isinstance(exc, asyncio.TimeoutError) else "failed"
            await self.stop()
            if not isinstance(exc, Exception):
                raise
            raise EngineLaunchError(
                f"engine {self.spec.name!r} ({self.spec.kind}) {reason} starting "
                f"(exit code {self.returncode}): {exc}\n--- stderr tail ---\n{self.stderr_tail}"
            ) from exc
        log.info("engine %s started (pid %s) at %s", self.spec.name, self.pid, self.url)
        return self.url

    async def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after the grace period; returns the exit code."""
        proc = self._proc
        if proc is not None and proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), self._grace_s)
            except asyncio.TimeoutError:
                log.warning("engine %s ignored SIGTERM for %.1fs; killing it", self.spec.name,
                            self._grace_s)
                proc.kill()
                await proc.wait()
        # let the readers see EOF so the stderr tail is complete, then drop them
        if self._readers:
            await asyncio.wait(self._readers, timeout=1.0)
        for task in self._readers:
            task.cancel()
        await asyncio.gather(*self._readers, return_exceptions=True)
        self._readers.clear()
        return self.returncode

    async def _read_ready_line(self) -> str:
        assert self._proc is not None and self._proc.stdout is not None
        while True:
            line = await self._proc.stdout.readline()
            if not line:
                await self._proc.wait()
                raise EngineLaunchError("process exited before printing READY")
            text = line.decode(errors="replace").strip()
            if text.startswith("READY "):
                return text.split(maxsplit=1)[1]

    async def _drain_stdout(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        while await self._proc.stdout.readline():
            pass

    async def _drain_stderr(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        relay = logging.getLogger(f"parrot.engine.{self.spec.name}")
        while line := await self._proc.stderr.readline():
            text = line.decode(errors="replace")
            self._stderr_tail.append(text)
            relay_line(relay, text)


_LOG_LINE = re.compile(r"^\S+ \S+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) (.*)$", re.S)


def relay_line(relay: logging.Logger, text: str) -> None:
    """Re-log one stderr line of an engine process at its own level (INFO when it is not a
    log line, e.g. a traceback's)."""
    match = _LOG_LINE.match(text.rstrip("\n"))
    if match is None:
        relay.info("%s", text.rstrip("\n"))
    else:
        relay.log(logging.getLevelName(match.group(1)), "%s", match.group(2))


@dataclass
class LaunchedEngine:
    """A running engine process and a client for it."""

    name: str
    url: str
    engine: HttpEngine
    process: EngineProcess

    async def stop(self) -> int | None:
        await self.engine.close()
        return await self.process.stop()


async def launch_engines(specs: Sequence[EngineSpec], *, startup_timeout_s: float = 60.0,
                         grace_s: float = 5.0) -> list[LaunchedEngine]:
    """Start all engines concurrently; if any fails, stop the others and raise its error."""
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise EngineLaunchError(f"duplicate engine names in {names}")
    processes = [EngineProcess(s, startup_timeout_s=startup_timeout_s, grace_s=grace_s)
                 for s in specs]
    results = await asyncio.gather(*(p.start() for p in processes), return_exceptions=True)
    failures = [r for r in results if isinstance(r, BaseException)]
    if failures:
        await asyncio.gather(*(p.stop() for p in processes))
        raise failures[0]
    return [LaunchedEngine(p.spec.name, url, HttpEngine(url, name=p.spec.name), p)
            for p, url in zip(processes, results)]  # type: ignore[arg-type]


async def stop_engines(engines: Sequence[LaunchedEngine]) -> None:
    await asyncio.gather(*(e.stop() for e in engines))
