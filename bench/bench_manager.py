"""Manager overhead: calls/s through the HTTP API and scheduling-decision latency.

Engines are zero-latency simulated engines inside the server process, so every number here is
the manager's own cost (HTTP parsing, DAG, deduction, prefix hashing, policy, context
bookkeeping), not the model's.

  A. decision latency: 1,000 READY calls queued at once on 16 engines; one scheduling round
     places them all. Reported per call (round time / 1,000) and per round, p50/p99 over trials.
     The scale row does the same with 10,000 queued calls on 64 engines.
  B. HTTP throughput: parrot-serve in a subprocess (16 engines, --http-engines), a client
     process with C concurrent workers, each doing submit + get per call (the worst case:
     every call is fetched).
  C. HTTP throughput, Parrot style: each worker submits a chain of 10 dependent calls and gets
     only the last one (values flow inside the service).
  D. as C, with the chain sent in one `submit_batch` message, as the frontend does.
  E. as B, with 1,000 concurrent sessions (one worker each, over the client's connection pool).
  F. manager memory per idle session: RSS grown by creating N sessions in process, / N.

    python bench/bench_manager.py [--trials 30] [--calls 3000] [--out docs/BENCH_MANAGER.md]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import platform
import signal
import sys
import time
from dataclasses import dataclass
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
from provenance import provenance  # noqa: E402

NUM_ENGINES = 16
QUEUED = 1000
# The scale row: a large deployment's queue and engine count.
SCALE_ENGINES = 64
SCALE_QUEUED = 10_000
NUM_SESSIONS = 50
IDLE_SESSIONS = 20_000
WIDE_SESSIONS = 1000


async def _manager_with_engines(policy_name: str, num_engines: int
                                ) -> tuple[Manager, list[SimulatedEngine]]:
    manager = Manager(default_registry().create(policy_name), ManagerConfig())
    engines = []
    for i in range(num_engines):
        engine = SimulatedEngine(f"sim-{i}", SimulatedEngineConfig.from_mapping(
            {"zero_latency": True, "num_blocks": 1 << 16}))
        await engine.start()
        engines.append(engine)
        await manager.add_engine(EngineSpec(name=f"sim-{i}", in_process=True,
                                            throughput_capacity=1 << 20,
                                            latency_capacity=1 << 20), engine)
    return manager, engines


async def decision_latency(policy_name: str, trials: int, num_engines: int = NUM_ENGINES,
                           queued: int = QUEUED) -> dict[str, float]:
    manager, engines = await _manager_with_engines(policy_name, num_engines)
    # No scheduler task: rounds are run by hand so each one sees exactly `queued` calls.
    per_call, per_round = [], []
    for trial in range(trials):
        sessions = [manager.create_session() for _ in range(NUM_SESSIONS)]
        outputs = []
        for i in range(queued):
            session = sessions[i % len(sessions)]
            call = manager.submit(session, SubmitRequest.from_json({
                "session_id": session.session_id,
                "prompt": f"System prompt of app {i % 8}. User {{{{input:q}}}}: {{{{output:a}}}}",
                "placeholders": [{"name": "q", "in_out": "input", "value": f"q{trial}-{i}"}],
                "sampling": {"max_tokens": 8}}))
            outputs.append((session, call.outputs["a"].var_id))
        # A latency `get` in every session is waiting, so each round also re-deduces the
        # objectives of all the session graphs.
        waiters = [asyncio.create_task(manager.get(s, v, Criterion.LATENCY))
                   for s, v in outputs[:len(sessions)]]
        await asyncio.sleep(0)
        assert manager.scheduler.num_ready == queued
        started = time.perf_counter()
        placed = manager.step()
        elapsed = time.perf_counter() - started
        assert placed == queued, placed
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


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def idle_session_bytes(count: int) -> float:
    """RSS grown by `count` idle sessions (created, never used), per session."""
    manager, engines = await _manager_with_engines("app_centric", 1)
    manager.create_session()  # first-use allocations out of the measurement
    gc.collect()
    before = _rss_bytes()
    sessions = [manager.create_session() for _ in range(count)]
    gc.collect()
    grown = _rss_bytes() - before
    for session in sessions:
        manager.delete_session(session)
    await manager.close()
    for engine in engines:
        await engine.close()
    return grown / count


async def start_server(policy: str, num_engines: int = NUM_ENGINES
                       ) -> tuple[asyncio.subprocess.Process, str]:
    proc, url, _ = await start_admin_server(policy, num_engines)
    return proc, url


async def start_admin_server(policy: str, num_engines: int = NUM_ENGINES
                             ) -> tuple[asyncio.subprocess.Process, str, str]:
    """(process, URL, admin token) of parrot-serve with `num_engines` zero-latency engines."""
    config = {"manager": {"port": 0}, "policy": {"name": policy},
              "engines": zero_latency_engines(num_engines, in_process=True)}
    return await start_parrot_serve(config, timeout_s=60)


@dataclass(frozen=True)
class HttpRun:
    """One HTTP workload: the client's calls/s, and what the server spent per call: its CPU
    (user + system, the process's /proc counters; None off Linux) and its scheduling rounds'
    time (`parrot_policy_decision_seconds`). On a shared 2-core machine the client and other
    jobs move calls/s by ±10-30%; the server's CPU per call moves far less."""

    calls_per_s: float
    server_us_per_call: float | None
    decision_us_per_call: float


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of process `pid` so far (Linux's /proc; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def decision_s(url: str, admin: str) -> float:
    """The server's scheduling rounds' total time so far, from its /metrics."""
    async with aiohttp.ClientSession(base_url=url) as http:
        async with http.get("/metrics", headers={"Authorization": f"Bearer {admin}"}) as resp:
            text = await resp.text()
    for line in text.splitlines():
        if line.startswith("parrot_policy_decision_seconds_sum"):
            return float(line.split()[-1])
    raise RuntimeError("the server's /metrics has no parrot_policy_decision_seconds_sum")


async def measured_throughput(proc: asyncio.subprocess.Process, url: str, admin: str,
                              num_calls: int, concurrency: int, chain: int,
                              batched: bool = False) -> HttpRun:
    """`http_throughput`, with the server's CPU and rounds per call over the run."""
    cpu, rounds = process_cpu_s(proc.pid), await decision_s(url, admin)
    started = time.perf_counter()
    rate = await http_throughput(url, num_calls, concurrency, chain, batched)
    calls = rate * (time.perf_counter() - started)   # (the run's calls: rate x its time)
    cpu_after = process_cpu_s(proc.pid)
    rounds_after = await decision_s(url, admin)
    server = None if cpu is None or cpu_after is None else 1e6 * (cpu_after - cpu) / calls
    return HttpRun(rate, server, 1e6 * (rounds_after - rounds) / calls)


def chain_batch(chain: int) -> list[dict]:
    """D's submit_batch calls: `chain` dependent calls, each binding the previous one's
    output by reference (the first a literal)."""
    return [{"prompt": "Go on: {{input:x}} {{output:y}}", "sampling": {"max_tokens": 4},
             "placeholders": [{"name": "x", "in_out": "input", "value": "start"} if i == 0
                              else {"name": "x", "in_out": "input",
                                    "ref": {"call": i - 1, "output": "y"}}]}
            for i in range(chain)]


async def http_throughput(url: str, num_calls: int, concurrency: int, chain: int,
                          batched: bool = False) -> float:
    """Calls per second; each worker (a session of its own) runs chains of `chain` calls and
    gets the last value. The client pools at most 100 connections, whatever the sessions."""
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
                    reply = await post("/v1/submit_batch",
                                       {"session_id": sid, "calls": chain_batch(chain)}, token)
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


def _machine() -> str:
    """The machine, the code and the moment a table was measured on (provenance.py's, with
    what a CPU benchmark adds: the host, its processor and Python, the load average)."""
    where = provenance()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"{where['date']} — {platform.node()} ({where['cpus']} cores, "
            f"{platform.processor() or platform.machine()}, Python {platform.python_version()}) "
            f"— commit {where['commit']} — load average at start {load}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--policies", nargs="+", default=["least_queue", "app_centric"])
    parser.add_argument("--scale-trials", type=int, default=5,
                        help="trials of the 10,000 queued x 64 engines round (0: skip)")
    parser.add_argument("--no-http", action="store_true", help="decision latency only")
    parser.add_argument("--http-engines", type=int, default=NUM_ENGINES,
                        help="engines of the HTTP runs' server (B-E)")
    parser.add_argument("--out", default=None, help="append the table to this markdown file")
    args = parser.parse_args()
    machine = _machine()
    # First: memory freed by the later runs would be reused by the sessions and hide them.
    idle = await idle_session_bytes(IDLE_SESSIONS)
    rows = []
    for policy in args.policies:
        d = await decision_latency(policy, args.trials)
        scale = (await decision_latency(policy, args.scale_trials, SCALE_ENGINES, SCALE_QUEUED)
                 if args.scale_trials > 0 else None)
        http: tuple[HttpRun, ...] = ()
        if not args.no_http:
            proc, url, admin = await start_admin_server(policy, args.http_engines)
            try:
                await http_throughput(url, 200, 8, 1)  # warm-up
                http = (await measured_throughput(proc, url, admin, args.calls,
                                                  args.concurrency, 1),
                        await measured_throughput(proc, url, admin, args.calls,
                                                  args.concurrency, 10),
                        await measured_throughput(proc, url, admin, args.calls,
                                                  args.concurrency, 10, batched=True),
                        await measured_throughput(proc, url, admin,
                                                  max(args.calls, WIDE_SESSIONS),
                                                  WIDE_SESSIONS, 1))
            finally:
                proc.send_signal(signal.SIGTERM)
                await proc.wait()
        rows.append((policy, d, scale, http))
    lines = [
        f"### bench_manager — {machine}",
        "",
        f"`{' '.join(['python', 'bench/bench_manager.py', *sys.argv[1:]])}`; zero-latency "
        f"simulated engines in the server process. Decision latency: {QUEUED:,} queued calls "
        f"on {NUM_ENGINES} engines, and {SCALE_QUEUED:,} on {SCALE_ENGINES}. HTTP: "
        f"{args.http_engines} engines, {args.concurrency} concurrent sessions (B–D) and "
        f"{WIDE_SESSIONS:,} (E).",
        "",
        "| policy | decision p50 / p99 (µs/call) | round of 1,000 p50 / p99 (ms) "
        "| 10,000 × 64: decision p50 / p99 (µs/call) | 10,000 × 64: round p50 / p99 (ms) "
        "| HTTP calls/s: B submit+get each | C chains of 10 | D chains in one submit_batch "
        "| E submit+get, 1,000 sessions |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def pair(d: dict[str, float] | None, unit: str) -> str:
        if d is None:
            return "—"
        if unit == "us":
            return f"{d['per_call_p50_us']:.1f} / {d['per_call_p99_us']:.1f}"
        return f"{d['round_p50_ms']:.1f} / {d['round_p99_ms']:.1f}"

    for policy, d, scale, http in rows:
        rates = (" | ".join(f"{r.calls_per_s:,.0f}" for r in http) if http
                 else " | ".join(["—"] * 4))
        lines.append(f"| {policy} | {pair(d, 'us')} | {pair(d, 'ms')} | {pair(scale, 'us')} "
                     f"| {pair(scale, 'ms')} | {rates} |")
    if any(http for *_, http in rows):
        lines += ["", "The server's CPU per call in the same HTTP runs (µs: all of the server "
                  "process, its in-process engines included; in parentheses its scheduling "
                  "rounds' share):", "",
                  "| policy | B | C | D | E |", "|---|---:|---:|---:|---:|"]
        for policy, _, _, http in rows:
            if http:
                lines.append(f"| {policy} | " + " | ".join(
                    f"{'—' if r.server_us_per_call is None else f'{r.server_us_per_call:.0f}'}"
                    f" ({r.decision_us_per_call:.0f})" for r in http) + " |")
    lines += ["", f"Manager RSS per idle session (F, {IDLE_SESSIONS:,} sessions created in "
              f"process): {idle / 1024:.1f} KB."]
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
