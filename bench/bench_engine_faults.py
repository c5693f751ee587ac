"""Engine reliability under load: a burst through the connection pool, then a frozen engine.

The manager runs in this process; the engines are simulated-kind `parrot-engine` subprocesses
reached over HTTP with their secrets (as parrot-serve runs them).

  A. burst: N calls x T tokens submitted at once over 2 engines. Reports failed calls,
     placements (== calls when nothing was re-dispatched), re-dispatches, wall time.
  B. freeze: C clients run two-call chains back to back on 2 engines; one engine gets SIGSTOP
     for S seconds, then SIGCONT. Reports time to detect the freeze, time to re-admit it,
     failed calls, re-dispatches, and the slowest `get`.

    python bench/bench_engine_faults.py [--calls 8000] [--tokens 32] [--freeze-s 20]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import signal
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from parrot.serve_config import EngineSpec, ManagerConfig  # noqa: E402
from parrot.manager.engine_health import http_engine_settings  # noqa: E402
from parrot.manager.manager import Manager  # noqa: E402
from parrot.manager.requests import SubmitRequest  # noqa: E402
from parrot.engines.launcher import LaunchSpec, launch_engines, stop_engines  # noqa: E402
from parrot.errors import ParrotError  # noqa: E402
from parrot.policies.least_queue import LeastQueuePolicy  # noqa: E402
from parrot.types import Criterion  # noqa: E402


def _submit(manager: Manager, session, prompt: str, value: str, max_tokens: int):
    return manager.submit(session, SubmitRequest.from_json({
        "session_id": session.session_id, "prompt": prompt,
        "placeholders": [{"name": "x", "in_out": "input", "value": value},
                         {"name": "y", "in_out": "output",
                          "sampling": {"max_tokens": max_tokens}}]}))


async def _start(config: ManagerConfig, params: dict, names: list[str]):
    engines = await launch_engines([LaunchSpec(n, "simulated", params) for n in names],
                                   startup_timeout_s=120, settings=http_engine_settings(config))
    manager = Manager(LeastQueuePolicy(), config)
    await manager.start()
    for launched in engines:
        await manager.add_engine(EngineSpec(name=launched.name), launched.engine)
    return manager, engines


async def burst(num_calls: int, tokens: int) -> dict:
    config = ManagerConfig()
    manager, engines = await _start(config, {"zero_latency": True}, ["sim-0", "sim-1"])
    loop = asyncio.get_running_loop()
    try:
        session = manager.create_session()
        started = loop.time()
        calls = [_submit(manager, session, "Burst {{input:x}} {{output:y}}", str(i), tokens)
                 for i in range(num_calls)]
        results = await asyncio.gather(
            *(manager.get(session, c.outputs["y"].var_id, Criterion.THROUGHPUT, timeout=3600)
              for c in calls), return_exceptions=True)
        wall = loop.time() - started
        return {"calls": num_calls, "failed": sum(isinstance(r, BaseException) for r in results),
                "placements": sum(n for _, n in manager.scheduler.round_stats),
                "re-dispatches": sum(c.attempts for c in calls), "wall_s": round(wall, 1),
                "healthy_engines": sum(e.is_healthy for e in manager.engines)}
    finally:
        await manager.close()
        await stop_engines(engines)


async def freeze(freeze_s: float, clients: int) -> dict:
    config = ManagerConfig(max_call_retries=4)
    params = {"decode_base_ms": 10.0, "decode_per_seq_ms": 0.0, "decode_per_token_ms": 0.0}
    manager, engines = await _start(config, params, ["sim-0", "sim-1"])
    loop = asyncio.get_running_loop()
    stop, latencies, failed, calls = asyncio.Event(), [], [], []

    async def client() -> None:
        session = manager.create_session()
        while not stop.is_set():
            first = _submit(manager, session, "Q {{input:x}} {{output:y}}", "q", 16)
            second = _submit(manager, session, "R {{input:x}} {{output:y}}", "r", 16)
            calls.extend((first, second))
            t = loop.time()
            for call in (first, second):
                try:
                    await manager.get(session, call.outputs["y"].var_id, Criterion.LATENCY)
                except ParrotError as exc:
                    failed.append(exc)
            latencies.append(loop.time() - t)

    async def health_edge(state: bool) -> float:
        while manager.engines.get("sim-1").is_healthy != state:
            await asyncio.sleep(0.01)
        return loop.time()

    tasks = [asyncio.create_task(client()) for _ in range(clients)]
    try:
        await asyncio.sleep(2.0)
        pid = engines[1].process.pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        frozen_at = loop.time()
        detected = await health_edge(False) - frozen_at
        await asyncio.sleep(max(freeze_s - detected, 0))
        os.kill(pid, signal.SIGCONT)
        resumed_at = loop.time()
        readmitted = await health_edge(True) - resumed_at
        await asyncio.sleep(2.0)
        stop.set()
        await asyncio.gather(*tasks)
        return {"freeze_s": freeze_s, "clients": clients, "detected_after_s": round(detected, 2),
                "readmitted_after_s": round(readmitted, 2), "calls": len(calls),
                "failed": len(failed), "re-dispatches": sum(c.attempts for c in calls),
                "slowest_get_s": round(max(latencies), 2),
                "heartbeat": f"{config.engine_heartbeat_interval_s:g} s / "
                             f"{config.engine_heartbeat_timeout_s:g} s"}
    finally:
        stop.set()
        await manager.close()
        await stop_engines(engines)


def _table(title: str, row: dict) -> str:
    keys = list(row)
    return "\n".join([f"### {title}", "", "| " + " | ".join(keys) + " |",
                      "|" + "---|" * len(keys), "| " + " | ".join(str(row[k]) for k in keys)
                      + " |", ""])


async def main(args: argparse.Namespace) -> None:
    out = [f"Machine: {platform.node()} ({os.cpu_count()} CPUs), "
           f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M UTC}; command: "
           f"`python bench/bench_engine_faults.py --calls {args.calls} --tokens {args.tokens} "
           f"--freeze-s {args.freeze_s} --clients {args.clients}`", ""]
    out.append(_table("A. burst over 2 simulated engine processes",
                      await burst(args.calls, args.tokens)))
    out.append(_table("B. one of 2 engines frozen (SIGSTOP) under load",
                      await freeze(args.freeze_s, args.clients)))
    print("\n".join(out))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=8000)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--freeze-s", type=float, default=20.0)
    parser.add_argument("--clients", type=int, default=16)
    asyncio.run(main(parser.parse_args()))
