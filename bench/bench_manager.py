"""Manager overhead: calls/s through the HTTP API and scheduling-decision latency.

Engines are zero-latency simulated engines inside the server process, so every number here is
the manager's own cost (HTTP parsing, DAG, deduction, prefix hashing, policy, context
bookkeeping), not the model's.

  A. decision latency: 1,000 READY calls queued at once on 16 engines; one scheduling round
     places them all. Reported per call (round time / 1,000) and per round, p50/p99 over trials.
  B. HTTP throughput: parrot-serve in a subprocess, a client process with C concurrent
     workers, each doing submit + get per call (the worst case: every call is fetched).
  C. HTTP throughput, Parrot style: each worker submits a chain of 10 dependent calls and gets
     only the last one (values flow inside the service).
  D. as C, with the chain sent in one `submit_batch` message, as the frontend does.

    python bench/bench_manager.py [--trials 30] [--calls 3000] [--out docs/bench_manager.md]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import signal
import sys
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from parrot.serve_config import EngineSpec, ManagerConfig  # noqa: E402
from parrot.manager.manager import Manager  # noqa: E402
from parrot.manager.requests import SubmitRequest  # noqa: E402
from parrot.engines.simulated import SimulatedEngine, SimulatedEngineConfig  # noqa: E402
from parrot.policies.registry import default_registry  # noqa: E402
from parrot.sim.summary import percentile  # noqa: E402
from parrot.types import Criterion  # noqa: E402
from serve_subprocess import start_parrot_serve, zero_latency_engines  # noqa: E402

NUM_ENGINES = 16
QUEUED = 1000


async def decision_latency(policy_name: str, trials: int) -> dict[str, float]:
    manager = Manager(default_registry().create(policy_name), ManagerConfig())
    engines = []
    for i in range(NUM_ENGINES):
        engine = SimulatedEngine(f"sim-{i}", SimulatedEngineConfig.from_mapping(
            {"zero_latency": True, "num_blocks": 1 << 16}))
        await engine.start()
        engines.append(engine)
        await manager.add_engine(EngineSpec(name=f"sim-{i}", in_process=True,
                                            throughput_capacity=1 << 20,
                                            latency_capacity=1 << 20), engine)
    # No scheduler task: rounds are run by hand so each one sees exactly 1,000 queued calls.
    per_call, per_round = [], []
    for trial in range(trials):
        sessions = [manager.create_session() for _ in range(50)]
        outputs = []
        for i in range(QUEUED):
            session = sessions[i % len(sessions)]
            call = manager.submit(session, SubmitRequest.from_json({
                "session_id": session.session_id,
                "prompt": f"System prompt of app {i % 8}. User {{{{input:q}}}}: {{{{output:a}}}}",
                "placeholders": [{"name": "q", "in_out": "input", "value": f"q{trial}-{i}"}],
                "sampling": {"max_tokens": 8}}))
            outputs.append((session, call.outputs["a"].var_id))
        # A latency `get` in every session is waiting, so each round also re-deduces the
        # objectives of all 50 session graphs.
        waiters = [asyncio.create_task(manager.get(s, v, Criterion.LATENCY))
                   for s, v in outputs[:len(sessions)]]
        await asyncio.sleep(0)
        assert manager.scheduler.num_ready == QUEUED
        started = time.perf_counter()
        placed = manager.step()
        elapsed = time.perf_counter() - started
        assert placed == QUEUED, placed
        per_round.append(elapsed)
        per_call.append(elapsed / placed)
        await asyncio.gather(*waiters, *(manager.get(s, v, Criterion.LATENCY) for s, v in outputs))
        for session in sessions:
            manager.delete_session(session)
    await manager.close()
    for engine in engines:
        await engine.close()
    return {"per_call_p50_us": percentile(per_call, 50) * 1e6,
            "per_call_p99_us": percentile(per_call, 99) * 1e6,
            "round_p50_ms": percentile(per_round, 50) * 1e3,
            "round_p99_ms": percentile(per_round, 99) * 1e3}


async def start_server(policy: str) -> tuple[asyncio.subprocess.Process, str]:
    config = {"manager": {"port": 0}, "policy": {"name": policy},
              "engines": zero_latency_engines(NUM_ENGINES, in_process=True)}
    proc, url, _ = await start_parrot_serve(config, timeout_s=60)
    return proc, url


async def http_throughput(url: str, num_calls: int, concurrency: int, chain: int,
                          batched: bool = False) -> float:
    """Calls per second; each worker runs chains of `chain` calls and gets the last value."""
    async with aiohttp.ClientSession(base_url=url) as http:
        async def post(path: str, body: dict, token: str) -> dict:
            async with http.post(path, json=body,
                                 headers={"Authorization": f"Bearer {token}"}) as resp:
                data = await resp.json()
                if resp.status != 200:
                    raise RuntimeError(data)
                return data

        async def worker(n_chains: int) -> None:
            async with http.post("/v1/sessions") as resp:
                s = await resp.json()
            sid, token = s["session_id"], s["token"]
            for _ in range(n_chains):
                binding = {"name": "x", "in_out": "input", "value": "start"}
                if batched:
                    calls = [{"prompt": "Go on: {{input:x}} {{output:y}}", "sampling":
                              {"max_tokens": 4}, "placeholders": [
                                  binding if i == 0 else
                                  {"name": "x", "in_out": "input",
                                   "ref": {"call": i - 1, "output": "y"}}]}
                             for i in range(chain)]
                    reply = await post("/v1/submit_batch", {"session_id": sid, "calls": calls},
                                       token)
                    var = reply["results"][-1]["placeholders"][-1]["semantic_var_id"]
                    await post("/v1/get", {"session_id": sid, "semantic_var_id": var,
                                           "criteria": "latency"}, token)
                    continue
                for _ in range(chain):
                    reply = await post("/v1/submit", {
                        "session_id": sid, "prompt": "Go on: {{input:x}} {{output:y}}",
                        "placeholders": [binding], "sampling": {"max_tokens": 4}}, token)
                    var = reply["placeholders"][-1]["semantic_var_id"]
                    binding = {"name": "x", "in_out": "input", "semantic_var_id": var}
                await post("/v1/get", {"session_id": sid, "semantic_var_id": var,
                                       "criteria": "latency"}, token)

        chains_per_worker = max(1, num_calls // (concurrency * chain))
        started = time.perf_counter()
        await asyncio.gather(*(worker(chains_per_worker) for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return concurrency * chains_per_worker * chain / elapsed


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--out", default=None, help="append the table to this markdown file")
    args = parser.parse_args()
    rows = []
    for policy in ("least_queue", "app_centric"):
        d = await decision_latency(policy, args.trials)
        proc, url = await start_server(policy)
        try:
            await http_throughput(url, 200, 8, 1)  # warm-up
            each = await http_throughput(url, args.calls, args.concurrency, 1)
            chained = await http_throughput(url, args.calls, args.concurrency, 10)
            batched = await http_throughput(url, args.calls, args.concurrency, 10, batched=True)
        finally:
            proc.send_signal(signal.SIGTERM)
            await proc.wait()
        rows.append((policy, d, each, chained, batched))
    lines = [
        f"### bench_manager — {datetime.date.today()} — {platform.node()} "
        f"({os.cpu_count()} cores, {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()})",
        "",
        f"`python bench/bench_manager.py --trials {args.trials} --calls {args.calls} "
        f"--concurrency {args.concurrency}`; {NUM_ENGINES} zero-latency simulated engines "
        f"in the server process; decision latency with {QUEUED} queued calls.",
        "",
        "| policy | decision p50 (µs/call) | decision p99 (µs/call) | round of 1,000 p50 (ms) "
        "| round p99 (ms) | HTTP calls/s, submit+get each | HTTP calls/s, chains of 10 "
        "| HTTP calls/s, chains of 10 in one submit_batch |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for policy, d, each, chained, batched in rows:
        lines.append(f"| {policy} | {d['per_call_p50_us']:.1f} | {d['per_call_p99_us']:.1f} | "
                     f"{d['round_p50_ms']:.2f} | {d['round_p99_ms']:.2f} | {each:.0f} | "
                     f"{chained:.0f} | {batched:.0f} |")
    table = "\n".join(lines) + "\n"
    print(table)
    if args.out:
        with open(args.out, "a") as f:
            f.write("\n" + table)


if __name__ == "__main__":
    try:
        import uvloop
    except ImportError:
        asyncio.run(main())
    else:
        uvloop.run(main())
