"""Start engine processes (`python -m parrot.cli.engine`) and stop them again.

`parrot-serve` uses this for the engines its YAML names:

    engines = await launch_engines([LaunchSpec("e0", "simulated", {"zero_latency": True})])
    ... engines[0].url, engines[0].engine (an HttpEngine) ...
    await stop_engines(engines)

Each process listens on port 0 and reports its URL in a `READY <url>` stdout line; the launcher
waits for that line (with a timeout), then for /healthz. A failed start raises EngineLaunchError
with the tail of the process's stderr. `stop()` sends SIGTERM, then SIGKILL after a grace period.

Secrets: each engine gets its own random secret (in its environment, PARROT_ENGINE_SECRET), and
its `HttpEngine` client carries it; nothing else on the host can use the engine's port.

Lifetime: an engine never outlives the process that launched it. It runs with
--exit-with-parent (PR_SET_PDEATHSIG on Linux, plus a watchdog on a stdin pipe only this process
holds: when we die, even by SIGKILL, the pipe closes and the engine stops). Each engine leads a
process group of its own, which `stop()` signals as a whole (helpers an engine forks go too).
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
import secrets
import signal
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Mapping, Sequence

from parrot.engines.client import HttpEngine, HttpEngineSettings
from parrot.errors import EngineError

log = logging.getLogger(__name__)

STDERR_TAIL_LINES = 40
_REPO_ROOT = Path(__file__).resolve().parents[2]


class EngineLaunchError(EngineError):
    """An engine process did not start (it exited, or did not become ready in time)."""


@dataclass(frozen=True)
class LaunchSpec:
    """One engine process to start (the serve config's `EngineSpec` says which, and more)."""

    name: str
    kind: str  # an EngineKind value that runs in an engine process (not "remote")
    params: Mapping[str, Any] = field(default_factory=dict)
    host: str = "127.0.0.1"
    register_url: str | None = None
    secret: str | None = None  # None: a random one per process


class EngineProcess:
    """One engine subprocess; `start()` returns its URL once it is healthy."""

    def __init__(self, spec: LaunchSpec, *, python: str = sys.executable,
                 startup_timeout_s: float = 60.0, grace_s: float = 5.0) -> None:
        self.spec = spec
        self.url: str | None = None
        self.secret = spec.secret or secrets.token_urlsafe(32)
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

    async def wait(self) -> int | None:
        """Until the process exits (at once when it never started); its exit code."""
        if self._proc is None:
            return None
        return await self._proc.wait()

    @property
    def stderr_tail(self) -> str:
        return "".join(self._stderr_tail)

    def command(self) -> list[str]:
        spec = self.spec
        cmd = [self._python, "-m", "parrot.cli.engine", "--kind", str(spec.kind),
               "--name", spec.name, "--params", json.dumps(dict(spec.params)),
               "--host", spec.host, "--port", "0", "--exit-with-parent"]
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
        env["PARROT_ENGINE_SECRET"] = self.secret
        env["PARROT_PARENT_PID"] = str(os.getpid())
        # Progress bars (a first start's weight conversion, downloads) redraw one line with
        # \r: relayed line by line they would arrive at the end as one long log line. The
        # engine logs each start-up phase with its time instead.
        env.setdefault("TQDM_DISABLE", "1")
        env.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        # Said at once: a builtin engine's first line of its own comes after torch's import.
        log.info("engine %s (%s): starting its process", self.spec.name, self.spec.kind)
        # stdin is a pipe we never write to: the engine's parent watchdog (EOF = we are gone).
        self._proc = await asyncio.create_subprocess_exec(
            *self.command(), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=env, start_new_session=True)
        self._readers.append(asyncio.create_task(self._drain_stderr()))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._startup_timeout_s
        try:
            self.url = await asyncio.wait_for(self._read_ready_line(), self._startup_timeout_s)
            self._readers.append(asyncio.create_task(self._drain_stdout()))
            client = HttpEngine(self.url, secret=self.secret)
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
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), self._grace_s)
            except TimeoutError:
                log.warning("engine %s ignored SIGTERM for %.1fs; killing it", self.spec.name,
                            self._grace_s)
                _signal_group(proc.pid, signal.SIGKILL)
                await proc.wait()
            _signal_group(proc.pid, signal.SIGKILL)  # anything the engine forked and left
        if proc is not None and proc.stdin is not None:
            proc.stdin.close()
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
        relay.log(logging.getLevelNamesMapping()[match.group(1)], "%s", match.group(2))


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone already


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


async def launch_engines(specs: Sequence[LaunchSpec], *, startup_timeout_s: float = 60.0,
                         grace_s: float = 5.0, settings: HttpEngineSettings | None = None
                         ) -> list[LaunchedEngine]:
    """Start all engines concurrently; if any fails, stop the others and raise its error.
    `settings` are the clients' timeouts and pool size."""
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
    urls = [r for r in results if isinstance(r, str)]
    return [LaunchedEngine(p.spec.name, url,
                           HttpEngine(url, name=p.spec.name, secret=p.secret, settings=settings),
                           p)
            for p, url in zip(processes, urls)]


async def stop_engines(engines: Sequence[LaunchedEngine]) -> None:
    await asyncio.gather(*(e.stop() for e in engines))
