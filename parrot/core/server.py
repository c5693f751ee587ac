"""Assemble a running service from a ServeConfig: policy, manager, engines, HTTP server.

`ParrotServer` is what `parrot-serve` runs, and what tests and benchmarks start in-process.
Engines named in the config are started as subprocesses (or in this process with
`in_process: true`), and the HTTP server starts answering only once all of them are healthy.
"""

from __future__ import annotations

import logging

from aiohttp import web

from parrot.core.config import EngineSpec, ServeConfig
from parrot.core.engine_health import http_engine_settings
from parrot.core.front_door import front_door
from parrot.core.http_api import create_app
from parrot.core.manager import Manager
from parrot.core.wire import WireAPI
from parrot.engines.client import HttpEngine
from parrot.engines.factory import create_engine
from parrot.engines.launcher import EngineSpec as LaunchSpec
from parrot.engines.launcher import LaunchedEngine, launch_engines, stop_engines
from parrot.engines.protocol import Engine
from parrot.policies.registry import default_registry

log = logging.getLogger(__name__)

ENGINE_STARTUP_TIMEOUT_S = 600.0  # a cold builtin engine loads and converts its model first


class ParrotServer:
    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        policy = default_registry().create(config.policy.name, config.policy.params)
        self.manager = Manager(policy, config.manager)
        self._launched: list[LaunchedEngine] = []
        self._in_process: list[Engine] = []
        self._runner: web.AppRunner | None = None
        self.url: str | None = None

    async def start(self, host: str | None = None, port: int | None = None) -> str:
        await self.manager.start()
        try:
            await self._start_engines()
            api = WireAPI(self.manager, register_engine=self.register_remote)
            self._runner = web.AppRunner(create_app(api, front_door(api)),
                                         access_log=None)
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

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.manager.close()
        for engine in self._in_process:
            await engine.close()
        self._in_process.clear()
        await stop_engines(self._launched)
        self._launched.clear()
