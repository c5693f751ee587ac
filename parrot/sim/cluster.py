"""A simulated Parrot cluster on the virtual clock: one Manager, N in-process simulated engines.

    cluster = ClusterSpec(policy="app_centric", num_engines=4, profile="a100_llama13b")
    result = run_simulation(cluster, chain_summary, WorkloadSpec(), mode="parrot", seed=0)

Everything runs on a `VirtualClockEventLoop`: engines sleep for their latency model's iteration
times and clients for their network delays, so minutes of traffic take seconds, and a run is a
deterministic function of (cluster, workload, mode, seed).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Awaitable, Callable, Mapping

from parrot.serve_config import EngineSpec, ManagerConfig
from parrot.manager.manager import Manager
from parrot.engines.simulated import SimulatedEngine, SimulatedEngineConfig
from parrot.errors import ConfigError
from parrot.frontend.session import MODES, Session
from parrot.frontend.transport import InProcessTransport
from parrot.policies.registry import default_registry
from parrot.sim.clock import run_virtual
from parrot.sim.network import NetworkDelay
from parrot.sim.probe import ProbedEngine
from parrot.sim.workloads.base import AppRecord
from parrot.sim.workloads.spec import WorkloadSpec
from parrot.types import EngineKind
from parrot.validation import Checks, is_number


# The engines' work counters a simulated run records per engine (results.json `engines[]`),
# comparable with a live run's `engine_counters`.
WORK_COUNTERS = ("num_steps", "step_ms", "prefill_tokens", "decode_tokens", "generated_tokens")

MAX_ENGINES = 1024
# A simulated get may wait as long as the simulated traffic lasts.
SIM_MANAGER = ManagerConfig(default_get_timeout_s=7 * 86400.0, max_get_timeout_s=7 * 86400.0)


class ClusterConfigError(ConfigError):
    """A cluster parameter is invalid; the message names it and what is allowed."""


_CHECK = Checks("", ClusterConfigError)


@dataclass(frozen=True)
class ClusterSpec:
    policy: str = "app_centric"
    policy_params: Mapping[str, Any] = field(default_factory=dict)
    num_engines: int = 1
    profile: str = "a100_llama13b"
    engine_params: Mapping[str, Any] = field(default_factory=dict)  # over the profile
    latency_capacity: int | None = 6144      # None: auto, the paper's rule on the profile
    throughput_capacity: int | None = None   # None: the share of the profile's KV cache
    network_delay_s: tuple[float, float] = (0.2, 0.3)

    def __post_init__(self) -> None:
        _CHECK.number("num_engines", self.num_engines, minimum=1, maximum=MAX_ENGINES,
                      integer=True)
        delay = self.network_delay_s
        _CHECK.require(isinstance(delay, (tuple, list)) and len(delay) == 2
                       and all(map(is_number, delay)) and 0 <= delay[0] <= delay[1],
                       "network_delay_s", delay,
                       "(low, high) seconds with 0 <= low <= high")
        # Fail here, not inside the event loop: unknown policy names, bad params, bad profile.
        default_registry().create(self.policy, dict(self.policy_params))
        self.engine_config()
        for i in range(self.num_engines):
            self.engine_spec(i)

    def engine_config(self) -> SimulatedEngineConfig:
        return SimulatedEngineConfig.from_mapping({"profile": self.profile,
                                                   **self.engine_params})

    def engine_spec(self, index: int) -> EngineSpec:
        return EngineSpec(name=f"sim-{index}", kind=EngineKind.SIMULATED, in_process=True,
                          latency_capacity=self.latency_capacity,
                          throughput_capacity=self.throughput_capacity,
                          params={"profile": self.profile, **self.engine_params})


@dataclass
class RunResult:
    """What one (cluster, workload, mode) run produced."""

    records: list[AppRecord]
    engines: list[dict[str, Any]]          # EngineState.describe() per engine at the end
    duration_s: float                      # loop-clock time from start to the last app
    wall_s: float                          # real seconds the run took
    network_messages: int
    peak_kv_tokens: int | None = None      # sum over engines of each one's peak KV in use
    tpot_s: list[float] = field(default_factory=list)  # per Generate, after its first token
    # the same, per engine (by name): what each engine's TPOT is judged against a target by
    tpot_s_by_engine: dict[str, list[float]] = field(default_factory=dict)


ProgressFn = Callable[[AppRecord], None]
WorkloadFn = Callable[[Any, WorkloadSpec], Awaitable[list[AppRecord]]]


class SimEnv:
    """The `Env` of a simulated run: sessions through the in-process transport."""

    def __init__(self, manager: Manager, mode: str, spec: ClusterSpec, seed: int,
                 on_app: ProgressFn | None) -> None:
        _CHECK.one_of("mode", mode, MODES)
        self.manager, self.mode = manager, mode
        self._spec, self._seed, self._on_app = spec, seed, on_app
        self._loop_time: Callable[[], float] | None = None
        self.delays: list[NetworkDelay] = []

    def new_session(self, app_id: str) -> tuple[Session, NetworkDelay]:
        low, high = self._spec.network_delay_s
        delay = NetworkDelay(low, high, f"{self._seed}|{app_id}")
        self.delays.append(delay)
        transport = InProcessTransport(self.manager, delay)
        return Session(transport=transport, mode=self.mode), delay

    def now(self) -> float:
        import asyncio

        return asyncio.get_running_loop().time()

    def app_done(self, record: AppRecord) -> None:
        if self._on_app is not None:
            self._on_app(record)


async def _simulate(spec: ClusterSpec, workload: WorkloadFn, workload_spec: WorkloadSpec,
                    mode: str, seed: int, on_app: ProgressFn | None) -> RunResult:
    import asyncio

    policy = default_registry().create(spec.policy, dict(spec.policy_params))
    manager = Manager(policy, SIM_MANAGER)
    engines: list[ProbedEngine] = []
    await manager.start()
    try:
        config = spec.engine_config()
        for i in range(spec.num_engines):
            engine_spec = spec.engine_spec(i)
            engine = ProbedEngine(SimulatedEngine(engine_spec.name, config))
            await engine.start()
            engines.append(engine)
            await manager.add_engine(engine_spec, engine)
        env = SimEnv(manager, mode, spec, seed, on_app)
        started = asyncio.get_running_loop().time()
        records = await workload(env, workload_spec)
        duration = max((r.finished for r in records), default=started) - started
        probes = {spec.engine_spec(i).name: e for i, e in enumerate(engines)}
        described = []
        for state in manager.engines:
            stats = await state.engine.stats()   # steps, model time, tokens
            described.append({**state.describe(), **probes[state.engine_id].describe(),
                              **{k: stats.counter(k) for k in WORK_COUNTERS}})
        return RunResult(records, described, duration, 0.0,
                         sum(d.num_messages for d in env.delays),
                         peak_kv_tokens=sum(e.readings.peak_kv_tokens for e in engines),
                         tpot_s=[t for e in engines for t in e.readings.tpot_s],
                         tpot_s_by_engine={name: list(e.readings.tpot_s)
                                           for name, e in probes.items()})
    finally:
        await manager.close()
        for engine in engines:
            await engine.close()


def run_simulation(spec: ClusterSpec, workload: WorkloadFn, workload_spec: WorkloadSpec, *,
                   mode: str = "parrot", seed: int = 0,
                   on_app: ProgressFn | None = None) -> RunResult:
    """Run `workload` on a fresh simulated cluster on a fresh virtual-clock loop."""
    wall = time.perf_counter()
    result = run_virtual(_simulate(spec, workload, workload_spec, mode, seed, on_app))
    result.wall_s = time.perf_counter() - wall
    return result
