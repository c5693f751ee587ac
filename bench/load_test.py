"""Load test of the front door: parrot-serve (a subprocess) with simulated engine processes
spoken to over HTTP, driven over HTTP by this process.

  A. 1,000 concurrent sessions, each a small DAG in one submit_batch (two calls read one
     document, a third merges their outputs), one `get` of the merge, then DELETE.
  B. a burst of 10,000 calls: 100 sessions × 100 independent calls (32 tokens each) submitted
     at once, every output fetched, then the sessions deleted.

With --in-process-engines the simulated engines run inside parrot-serve (no engine HTTP hop):
the front door and the manager alone.

Reported: failed calls, spurious re-dispatches (the manager's "engine ... unavailable" log
lines while every engine process is alive), the manager's overhead per call from the call
timings (ready → dispatched: the scheduler; dispatched → finished: the engine round trips on
zero-latency engines), end-to-end latency, and the manager process's RSS before, at the peak,
and after the sessions are deleted.

    python bench/load_test.py [--sessions 1000] [--burst-sessions 100] [--burst-calls 100]
                                [--engines 2] [--out docs/LOAD_TEST.md]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from parrot.sim.summary import percentile  # noqa: E402
from serve_subprocess import start_parrot_serve, zero_latency_engines  # noqa: E402

DOC = "The quarterly report says revenue grew in every region while costs stayed flat. " * 3


class Manager:
    """parrot-serve in a subprocess: its URL, admin token, RSS and warning lines."""

    def __init__(self, proc: asyncio.subprocess.Process, url: str, admin: str) -> None:
        self.proc, self.url, self.admin = proc, url, admin
        self.ps = psutil.Process(proc.pid)
        self.warnings: list[str] = []
        self.peak_rss = 0
        assert proc.stderr is not None
        self._drain = asyncio.create_task(self._read_stderr(proc.stderr))
        self._sampler = asyncio.create_task(self._sample_rss())

    @classmethod
    async def start(cls, num_engines: int, in_process: bool) -> Manager:
        config = {"manager": {"port": 0}, "policy": {"name": "app_centric"},
                  "engines": zero_latency_engines(num_engines, in_process=in_process)}
        proc, url, admin = await start_parrot_serve(config, pipe_stderr=True)
        return cls(proc, url, admin)

    async def _read_stderr(self, stream: asyncio.StreamReader) -> None:
        async for line in stream:
            self.warnings.append(line.decode(errors="replace").rstrip())

    async def _sample_rss(self) -> None:
        while True:
            self.peak_rss = max(self.peak_rss, self.rss())
            await asyncio.sleep(0.05)

    def rss(self) -> int:
        return self.ps.memory_info().rss

    def engines_alive(self) -> bool:
        children = self.ps.children()
        return all(c.is_running() and c.status() != psutil.STATUS_ZOMBIE
                                      for c in children)

    async def allocated_blocks(self, http: aiohttp.ClientSession) -> int:
        """Python objects alive in the manager (admin stats), after a full collection there."""
        async with http.get("/v1/stats", headers={"Authorization": f"Bearer {self.admin}"}
                            ) as resp:
            return (await resp.json())["allocated_blocks"]

    def redispatches(self) -> int:
        return sum("unavailable" in line for line in self.warnings)

    async def stop(self) -> None:
        self._sampler.cancel()
        self.proc.terminate()
        await asyncio.wait_for(self.proc.wait(), 60)
        self._drain.cancel()


class Client:
    def __init__(self, http: aiohttp.ClientSession) -> None:
        self.http = http
        self.failures: list[str] = []

    async def post(self, path: str, body: dict[str, Any] | None, token: str | None = None
                   ) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with self.http.post(path, json=body, headers=headers) as resp:
            reply = await resp.json()
            if resp.status != 200:
                self.failures.append(f"{path}: {resp.status} {reply}")
            return reply

    async def session(self) -> tuple[str, str]:
        reply = await self.post("/v1/sessions", None)
        return reply["session_id"], reply["token"]

    async def delete(self, sid: str, token: str) -> None:
        async with self.http.delete(f"/v1/sessions/{sid}",
                                    headers={"Authorization": f"Bearer {token}"}) as resp:
            if resp.status != 200:
                self.failures.append(f"delete: {resp.status}")

    async def call_overheads(self, sid: str, token: str) -> list[tuple[float, float]]:
        """(ready→dispatched, dispatched→finished) seconds per call, from the call graph."""
        async with self.http.get(f"/v1/sessions/{sid}/graph",
                                 headers={"Authorization": f"Bearer {token}"}) as resp:
            graph = await resp.json()
        return [(n["timings"]["dispatched"] - n["timings"]["ready"],
                 n["timings"]["finished"] - n["timings"]["dispatched"])
                for n in graph["nodes"] if n["kind"] == "call" and n["state"] == "done"]


def dag(sid: str, index: int) -> dict[str, Any]:
    doc = {"name": "doc", "in_out": "input", "value": f"Document {index}. {DOC}"}
    return {"session_id": sid, "calls": [
        {"prompt": "Summarize the first half of {{input:doc}}\nSummary: {{output:s1}}",
         "placeholders": [doc], "sampling": {"max_tokens": 8}},
        {"prompt": "Summarize the second half of {{input:doc}}\nSummary: {{output:s2}}",
         "placeholders": [doc], "sampling": {"max_tokens": 8}},
        {"prompt": "Merge {{input:s1}} and {{input:s2}} into one line: {{output:final}}",
         "placeholders": [{"name": "s1", "in_out": "input", "ref": {"call": 0, "output": "s1"}},
                          {"name": "s2", "in_out": "input", "ref": {"call": 1, "output": "s2"}}],
         "sampling": {"max_tokens": 8}}]}


async def dag_session(client: Client, index: int, overheads: list, e2e: list) -> None:
    sid, token = await client.session()
    started = time.perf_counter()
    reply = await client.post("/v1/submit_batch", dag(sid, index), token)
    final = reply["results"][2]["placeholders"][-1]["semantic_var_id"]
    await client.post("/v1/get", {"session_id": sid, "semantic_var_id": final}, token)
    e2e.append(time.perf_counter() - started)
    overheads.extend(await client.call_overheads(sid, token))
    await client.delete(sid, token)


async def burst_session(client: Client, index: int, num_calls: int, overheads: list,
                        e2e: list) -> None:
    sid, token = await client.session()
    started = time.perf_counter()
    reply = await client.post("/v1/submit_batch", {"session_id": sid, "calls": [
        {"prompt": f"Q{index}.{i}: {{{{input:q}}}} {{{{output:a}}}}",
         "placeholders": [{"name": "q", "in_out": "input", "value": f"question {i}"}],
         "sampling": {"max_tokens": 32}} for i in range(num_calls)]}, token)
    outputs = [r["placeholders"][-1]["semantic_var_id"] for r in reply["results"]]
    await asyncio.gather(*(client.post("/v1/get", {"session_id": sid, "semantic_var_id": v},
                                       token) for v in outputs))
    e2e.append(time.perf_counter() - started)
    overheads.extend(await client.call_overheads(sid, token))
    await client.delete(sid, token)


def summary(name: str, manager: Manager, client: Client, calls: int, seconds: float,
            overheads: list, e2e: list, rss_before: int, rss_after: int,
            blocks: tuple[int, int]) -> dict[str, Any]:
    mib = 1 << 20
    queue = [o[0] * 1e3 for o in overheads]
    engine = [o[1] * 1e3 for o in overheads]
    return {"workload": name, "calls": calls, "calls_done": len(overheads),
            "failed": len(client.failures), "redispatches": manager.redispatches(),
            "calls_per_s": calls / seconds,
            "sched_p50_ms": percentile(queue, 50), "sched_p99_ms": percentile(queue, 99),
            "run_p50_ms": percentile(engine, 50), "run_p99_ms": percentile(engine, 99),
            "e2e_p50_s": percentile(e2e, 50), "e2e_p99_s": percentile(e2e, 99),
            "rss_before_mib": rss_before / mib, "rss_peak_mib": manager.peak_rss / mib,
            "rss_after_mib": rss_after / mib, "rss_after_vs_before": rss_after / rss_before - 1,
            "objects_after_vs_before": blocks[1] / blocks[0] - 1 if blocks[0] else float("nan")}


async def phase(manager: Manager, make: Any, overheads: list, e2e: list) -> tuple[Client, float]:
    """Run one workload on its own client connections, closed before memory is measured
    (an open keep-alive connection holds buffers on the manager's side too)."""
    connector = aiohttp.TCPConnector(limit=256)
    async with aiohttp.ClientSession(base_url=manager.url, connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=900)) as http:
        client = Client(http)
        started = time.perf_counter()
        await asyncio.gather(*make(client, overheads, e2e))
        return client, time.perf_counter() - started


async def measure(manager: Manager) -> tuple[int, int]:
    """(RSS, live Python objects) of the manager once idle."""
    await asyncio.sleep(2.0)  # idle: the manager's loop finishes its deferred frees
    async with aiohttp.ClientSession(base_url=manager.url) as http:
        blocks = await manager.allocated_blocks(http)
    await asyncio.sleep(0.5)
    return manager.rss(), blocks


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    manager = await Manager.start(args.engines, args.in_process_engines)
    results = []
    try:
        await phase(manager, lambda c, o, e: [dag_session(c, i, o, e) for i in range(50)],
                    [], [])  # warm-up
        for name, calls, make in (
                ("A: DAG sessions", args.sessions * 3,
                 lambda c, o, e: [dag_session(c, i, o, e) for i in range(args.sessions)]),
                ("B: burst", args.burst_sessions * args.burst_calls,
                 lambda c, o, e: [burst_session(c, i, args.burst_calls, o, e)
                                  for i in range(args.burst_sessions)])):
            rss_before, blocks_before = await measure(manager)
            manager.peak_rss = rss_before
            overheads: list = []
            e2e: list = []
            client, seconds = await phase(manager, make, overheads, e2e)
            rss_after, blocks_after = await measure(manager)
            results.append(summary(name, manager, client, calls, seconds, overheads, e2e,
                                   rss_before, rss_after, (blocks_before, blocks_after)))
            print(format_row(results[-1]), flush=True)
            if client.failures:
                print("first failures:", *client.failures[:5], sep="\n  ")
        assert manager.engines_alive(), "an engine process died during the test"
    finally:
        await manager.stop()
    return results


COLUMNS = ("workload", "calls", "failed", "redispatches", "calls_per_s", "sched_p50_ms",
           "sched_p99_ms", "run_p50_ms", "run_p99_ms", "e2e_p50_s", "e2e_p99_s",
           "rss_before_mib", "rss_peak_mib", "rss_after_mib", "rss_after_vs_before",
           "objects_after_vs_before")


def format_row(row: dict[str, Any]) -> str:
    def cell(key: str) -> str:
        value = row[key]
        if key in ("rss_after_vs_before", "objects_after_vs_before"):
            return f"{value:+.1%}"
        return f"{value:.1f}" if isinstance(value, float) else str(value)
    return "| " + " | ".join(cell(k) for k in COLUMNS) + " |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--burst-sessions", type=int, default=100)
    parser.add_argument("--burst-calls", type=int, default=100)
    parser.add_argument("--engines", type=int, default=2)
    parser.add_argument("--in-process-engines", action="store_true",
                        help="engines inside parrot-serve's process (no engine HTTP hop)")
    parser.add_argument("--out", default=None, help="append the table to this markdown file")
    args = parser.parse_args()
    header = "| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS)
    print(header)
    results = asyncio.run(run(args))
    if args.out:
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        with open(args.out, "a") as out:
            out.write(f"\n### {stamp} — {platform.node()}, {os.cpu_count()} CPUs, "
                      f"Python {platform.python_version()}\n\n"
                      f"`python bench/load_test.py {' '.join(sys.argv[1:])}`\n\n"
                      f"{header}\n" + "\n".join(format_row(r) for r in results) + "\n")


if __name__ == "__main__":
    main()
