"""Live mode: the same workloads against a real `parrot-serve` (ParrotServer in this process,
its engines as configured) over HTTP, in real time."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any
from collections.abc import Mapping

from parrot.serve_config import PolicySpec, ServeConfig
from parrot.server.service import ParrotServer
from parrot.frontend.session import Session
from parrot.frontend.transport import HttpTransport
from parrot.wire_types import EngineList
from parrot.sim.cluster import ProgressFn, RunResult, WorkloadFn
from parrot.sim.network import NetworkDelay
from parrot.sim.workloads.base import AppRecord
from parrot.sim.workloads.spec import WorkloadSpec


class LiveEnv:
    def __init__(self, url: str, mode: str, delay_s: tuple[float, float], seed: int,
                 on_app: ProgressFn | None) -> None:
        self.url, self.mode = url, mode
        self._delay_s, self._seed, self._on_app = delay_s, seed, on_app
        self.delays: list[NetworkDelay] = []

    def new_session(self, app_id: str) -> tuple[Session, NetworkDelay]:
        delay = NetworkDelay(*self._delay_s, seed=f"{self._seed}|{app_id}")
        self.delays.append(delay)
        return Session(transport=HttpTransport(self.url, delay), mode=self.mode), delay

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    def app_done(self, record: AppRecord) -> None:
        if self._on_app is not None:
            self._on_app(record)

def with_engine_params(config: ServeConfig, params: Mapping[str, Any]) -> ServeConfig:
    """`config` with `params` over every engine's own params (a variant's engine settings,
    e.g. the builtin engine's `shared_prefix_min_group` to turn the shared-prefix kernel off)."""
    if not params:
        return config
    engines = tuple(dataclasses.replace(e, params={**e.params, **params}) for e in config.engines)
    return dataclasses.replace(config, engines=engines)



def as_remote(config: ServeConfig, urls: Mapping[str, str],
              secrets: Mapping[str, str] | None = None) -> ServeConfig:
    """`config` with each engine named in `urls` reached by URL (a process started once and
    shared by many runs) instead of launched per run; `secrets` are the engines' own secrets
    (every engine endpoint is authenticated)."""
    secrets = secrets or {}
    engines = tuple(dataclasses.replace(e, kind="remote", url=urls[e.name],
                                        params={"secret": secrets[e.name]}
                                        if e.name in secrets else {})
                    if e.name in urls else e for e in config.engines)
    return dataclasses.replace(config, engines=engines)


async def _engines(url: str, admin_token: str) -> list[dict[str, Any]]:
    transport = HttpTransport(url)
    try:  # the prefix-cache counters are the admin's only
        reply = await transport.request("GET", "/v1/engines", EngineList, token=admin_token)
        return [engine.to_wire() for engine in reply.engines]
    finally:
        await transport.close()


async def run_live_async(config: ServeConfig, policy: str, policy_params: dict[str, Any],
                         workload: WorkloadFn, workload_spec: WorkloadSpec, *, mode: str,
                         seed: int, delay_s: tuple[float, float],
                         on_app: ProgressFn | None = None) -> RunResult:
    """Start a ParrotServer with `policy` on a free port, run the workload, stop it."""
    config = dataclasses.replace(config, policy=PolicySpec(policy, dict(policy_params)))
    server = ParrotServer(config)
    url = await server.start(port=0)
    wall = time.perf_counter()
    try:
        env = LiveEnv(url, mode, delay_s, seed, on_app)
        started = env.now()
        records = await workload(env, workload_spec)
        duration = max((r.finished for r in records), default=started) - started
        engines = await _engines(url, server.admin_token)
        return RunResult(records, engines, duration, time.perf_counter() - wall,
                         sum(d.num_messages for d in env.delays))
    finally:
        # Engines reached by URL outlive this manager: hand back the KV of the prefix
        # contexts it cached there, so the next run starts with an empty cache.
        for state in server.manager.engines:
            try:
                await state.contexts.evict_all()
            except Exception:  # noqa: BLE001 - a lost engine has freed them already
                pass
        await server.stop()


def run_live(*args: Any, **kwargs: Any) -> RunResult:
    return asyncio.run(run_live_async(*args, **kwargs))
