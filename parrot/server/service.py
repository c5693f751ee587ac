"""Assemble a running service from a ServeConfig: policy, manager, engines, HTTP server.

`ParrotServer` is what `parrot-serve` runs, and what tests and benchmarks start in-process.
Engines named in the config are started as subprocesses (or in this process with
`in_process: true`), and the HTTP server starts answering only once all of them are healthy.

Without `manager.admin_token` in the config a random one is generated (`admin_token`;
parrot-serve prints it): engine registration is never open to anyone.

Shutdown (`shutdown`, what SIGTERM runs): stop admitting sessions and calls (503), give running
calls `shutdown_grace_s` to finish, fail what is left with a ShuttingDownError (so every waiting
`get` is answered), stop the HTTP server, then the engines.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets

from aiohttp import web

from parrot.serve_config import EngineSpec, ServeConfig
from parrot.manager.engine_health import http_engine_settings
from parrot.manager.engine_supervisor import EngineSupervisor, RestartPolicy
from parrot.server.front_door import front_door
from parrot.server.http_api import JsonAppRunner, create_app
from parrot.manager.manager import Manager
from parrot.server.tenants import AccessControl
from parrot.server.wire_routes import WireAPI
from parrot.engines.client import HttpEngine
from parrot.engines.factory import create_engine
from parrot.engines.launcher import LaunchedEngine, LaunchSpec, launch_engines, stop_engines
from parrot.engines.protocol import Engine
from parrot.errors import ShuttingDownError
from parrot.policies.registry import default_registry

log = logging.getLogger(__name__)

ENGINE_STARTUP_TIMEOUT_S = 600.0  # a cold builtin engine loads and converts its model first
# When the server stops, every waiting `get` has been answered: a connection still busy gets
# this long, not aiohttp's default 60 s of silence after the grace period.
STOP_CONNECTIONS_S = 1.0


class ParrotServer:
    def __init__(self, config: ServeConfig) -> None:
        self.admin_token_generated = config.manager.admin_token is None
        if self.admin_token_generated:
            config = dataclasses.replace(config, manager=dataclasses.replace(
                config.manager, admin_token=secrets.token_urlsafe(32)))
        self.config = config
        self.admin_token: str = config.manager.admin_token  # type: ignore[assignment]
        policy = default_registry().create(config.policy.name, config.policy.params)
        self.manager = Manager(policy, config.manager)
        self.api = WireAPI(self.manager, register_engine=self.register_remote,
                           access=AccessControl(config.tenants, self.admin_token))
        self._launched: list[LaunchedEngine] = []
        self.supervisor: EngineSupervisor | None = None
        self._in_process: list[Engine] = []
        self._runner: JsonAppRunner | None = None
        self.url: str | None = None

    @property
    def app(self) -> web.Application | None:
        """The HTTP application, once started."""
        return self._runner.app if self._runner is not None else None

    @property
    def launched(self) -> tuple[LaunchedEngine, ...]:
        """The engine processes this server started (in the config's order)."""
        return tuple(self._launched)

    async def start(self, host: str | None = None, port: int | None = None) -> str:
        await self.manager.start()
        try:
            await self._start_engines()
            self._runner = JsonAppRunner(create_app(self.api, front_door(self.api)),
                                         self.config.manager.request_header_timeout_s,
                                         shutdown_timeout_s=STOP_CONNECTIONS_S)
            await self._runner.setup()
            site = web.TCPSite(self._runner, host or self.config.manager.host,
                               self.config.manager.port if port is None else port)
            await site.start()
        except BaseException:
            await self.stop()
            raise
        sockets = site._server.sockets  # type: ignore[union-attr]
        bound_host, bound_port = sockets[0].getsockname()[:2]
        self.url = f"http://{bound_host}:{bound_port}"
        return self.url

    async def _start_engines(self) -> None:
        launch = [s for s in self.config.engines if s.kind != "remote" and not s.in_process]
        if launch:
            self._launched = await launch_engines(
                [LaunchSpec(s.name, s.kind, dict(s.params)) for s in launch],
                startup_timeout_s=ENGINE_STARTUP_TIMEOUT_S,
                settings=http_engine_settings(self.config.manager))
        by_name = {e.name: e.engine for e in self._launched}
        for spec in self.config.engines:
            if spec.name in by_name:
                await self.manager.add_engine(spec, by_name[spec.name])
            elif spec.kind == "remote":
                await self.register_remote(spec)
            else:
                engine = create_engine(spec.kind, spec.name, dict(spec.params))
                await engine.start()
                self._in_process.append(engine)
                await self.manager.add_engine(spec, engine)
        if self._launched:
            m = self.config.manager
            self.supervisor = EngineSupervisor(
                self.manager, self._launched, self.config.engines,
                RestartPolicy(m.engine_restart_max, m.engine_restart_window_s,
                              m.engine_restart_backoff_s),
                settings=http_engine_settings(m), startup_timeout_s=ENGINE_STARTUP_TIMEOUT_S)
            self.supervisor.start()

    async def register_remote(self, spec: EngineSpec) -> None:
        """Add an engine reached by URL (from the config or `POST /v1/engines`)."""
        assert spec.url is not None
        engine = HttpEngine(spec.url, name=spec.name, secret=spec.params.get("secret"),
                            settings=http_engine_settings(self.config.manager))
        try:
            await engine.wait_healthy(timeout=30.0)
            await self.manager.add_engine(spec, engine)
        except BaseException:
            await engine.close()
            raise
        self._in_process.append(engine)

    def unfinished_outputs(self) -> int:
        """Variables a call is still producing (what a drain waits for)."""
        return sum(1 for session in self.manager.sessions
                   for var in session.variables.values()
                   if var.producer is not None and not var.is_finished)

    async def shutdown(self, grace_s: float | None = None) -> None:
        """Drain, then stop: what parrot-serve does on SIGTERM (see the module docstring)."""
        grace = self.config.manager.shutdown_grace_s if grace_s is None else grace_s
        self.api.is_draining = True
        producing = [var.wait_finished() for session in self.manager.sessions
                     for var in session.variables.values()
                     if var.producer is not None and not var.is_finished]
        if producing and grace > 0:
            waits = [asyncio.ensure_future(w) for w in producing]
            _, pending = await asyncio.wait(waits, timeout=grace)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            log.info("shutdown: %d of %d producing variables unfinished after %g s",
                     len(pending), len(waits), grace)
        await self.stop(f"the service is shutting down; the call did not finish within its "
                        f"{grace:g} s grace period")

    async def stop(self, reason: str = "the service stopped") -> None:
        """Stop now: unfinished variables fail with ShuttingDownError (their `get`s answer)."""
        self.api.is_draining = True
        self.manager.sessions.fail_unfinished(ShuttingDownError(reason))
        # Their variables failed: the calls still running must not publish into them later
        # (while the HTTP server and engines stop, a call would otherwise finish and set a
        # failed variable a second time).
        self.manager.cancel_running_calls()
        await asyncio.sleep(0)  # let the woken `get` handlers write their answers
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.supervisor is not None:   # before the engines stop: not crashes
            await self.supervisor.close()
            self.supervisor = None
        await self.manager.close()
        for engine in self._in_process:
            await engine.close()
        self._in_process.clear()
        await stop_engines(self._launched)
        self._launched.clear()
