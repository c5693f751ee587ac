"""Does one tenant's big request stall everyone? `/healthz` latency while each stall case runs.

parrot-serve runs in a subprocess (simulated engine processes, zero latency, a tenant key), and
this process runs each case below in turn while a prober (a process of its own) sends
`GET /healthz` every ~10 ms on its own connection. Reported per case: the case's duration and
/healthz p50 / p99 / max over the probes sent while it ran (the goal: p99 <= 100 ms).

  batch      one `submit_batch` of 4,096 calls, then a `get` of the last call's output
  n16        `/v1/completions` with 256 prompts x n=16 (4,096 choices)
  regex      4 calls, each 48 inputs x 16 regex transforms over one 3M-character variable
  bodies     four clients without a key posting bodies just under 8 MiB, 32 times each

    python bench/healthz_stall.py [--cases batch,n16,regex,bodies] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import multiprocessing
import os
import platform
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from parrot.sim.summary import percentile  # noqa: E402
from serve_subprocess import start_parrot_serve, zero_latency_engines  # noqa: E402

KEY = "bench-tenant-key"
PROBE_INTERVAL_S = 0.01
GOAL_MS = 100.0


async def _session(http: aiohttp.ClientSession) -> tuple[str, dict[str, str]]:
    async with http.post("/v1/sessions", headers={"Authorization": f"Bearer {KEY}"}) as resp:
        data = await resp.json()
        assert resp.status == 200, data
    return data["session_id"], {"Authorization": f"Bearer {data['token']}"}


async def case_batch(http: aiohttp.ClientSession) -> str:
    sid, auth = await _session(http)
    calls = [{"prompt": f"Item {i}: summarise it. {{{{output:y}}}}",
              "sampling": {"max_tokens": 8}} for i in range(4096)]
    async with http.post("/v1/submit_batch", json={"session_id": sid, "calls": calls},
                         headers=auth) as resp:
        data = await resp.json()
        assert resp.status == 200, data
    last = data["results"][-1]["placeholders"][-1]["semantic_var_id"]
    async with http.post("/v1/get", json={"session_id": sid, "semantic_var_id": last,
                                          "timeout": 120}, headers=auth) as resp:
        await resp.read()
        return f"{len(data['results'])} calls, last get {resp.status}"


async def case_n16(http: aiohttp.ClientSession) -> str:
    body = {"model": "simulated", "prompt": [f"Prompt {i}: go on." for i in range(256)],
            "n": 16, "max_tokens": 8}
    async with http.post("/v1/completions", json=body,
                         headers={"Authorization": f"Bearer {KEY}"}) as resp:
        data = await resp.json()
        assert resp.status == 200, data
    return f"{len(data['choices'])} choices"


async def case_regex(http: aiohttp.ClientSession) -> str:
    sid, auth = await _session(http)
    async with http.post("/v1/variables", json={"session_id": sid, "name": "doc",
                                                "value": "a" * 3_000_000},
                         headers=auth) as resp:
        data = await resp.json()
        assert resp.status == 200, data
    doc = data["semantic_var_id"]
    # Each search backtracks over the value (no `b` in it) until its deadline.
    transforms = [{"type": "regex", "pattern": "((?:a+)+)b"}] * 16
    names = [f"x{i}" for i in range(48)]
    prompt = " ".join(f"{{{{input:{n}}}}}" for n in names) + " {{output:y}}"
    placeholders = [{"name": n, "in_out": "input", "semantic_var_id": doc,
                     "transforms": transforms} for n in names]
    statuses = []
    for _ in range(4):
        async with http.post("/v1/submit", json={"session_id": sid, "prompt": prompt,
                                                 "placeholders": placeholders},
                             headers=auth) as resp:
            data = await resp.json()
            assert resp.status == 200, data
        out = data["placeholders"][-1]["semantic_var_id"]
        async with http.post("/v1/get", json={"session_id": sid, "semantic_var_id": out,
                                              "timeout": 60}, headers=auth) as resp:
            statuses.append(resp.status)
    return f"gets answered {sorted(set(statuses))}"


async def case_bodies(http: aiohttp.ClientSession) -> str:
    # Just under max_body_bytes (8 MiB), so it is the missing key that refuses each one.
    body = b'{"calls": ["' + b"x" * ((8 << 20) - 64) + b'"]}'
    statuses: list[str] = []

    async def client() -> None:
        async with aiohttp.ClientSession(base_url=str(http._base_url)) as own:  # noqa: SLF001
            for _ in range(32):
                try:
                    async with own.post("/v1/submit_batch", data=body,
                                        headers={"Content-Type": "application/json"}) as resp:
                        statuses.append(str(resp.status))
                        await resp.read()
                except aiohttp.ClientError as exc:  # the server may close mid-upload
                    statuses.append(type(exc).__name__)

    await asyncio.gather(*(client() for _ in range(4)))
    return "answers " + ", ".join(f"{s} x{statuses.count(s)}" for s in sorted(set(statuses)))


CASES: dict[str, Callable[[aiohttp.ClientSession], Awaitable[str]]] = {
    "batch": case_batch, "n16": case_n16, "regex": case_regex, "bodies": case_bodies}


def probe(url: str, stop: Any, out: Any) -> None:
    """In its own process (the cases' clients must not delay the probes): GET /healthz every
    PROBE_INTERVAL_S until `stop` is set, then put (sent at, wall clock; latency in ms) of
    each probe on `out`."""
    async def run() -> list[tuple[float, float]]:
        samples: list[tuple[float, float]] = []
        async with aiohttp.ClientSession(base_url=url) as http:
            while not stop.is_set():
                sent, started = time.time(), time.perf_counter()
                async with http.get("/healthz") as resp:
                    await resp.read()
                samples.append((sent, (time.perf_counter() - started) * 1000))
                await asyncio.sleep(PROBE_INTERVAL_S)
        return samples

    out.put(asyncio.run(run()))


async def run_case(url: str, name: str) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    stop, out = ctx.Event(), ctx.Queue()
    prober = ctx.Process(target=probe, args=(url, stop, out))
    prober.start()
    await asyncio.sleep(1.0)  # the prober's interpreter starts
    began = time.time()
    async with aiohttp.ClientSession(base_url=url,
                                     timeout=aiohttp.ClientTimeout(total=300)) as http:
        outcome = await CASES[name](http)
    ended = time.time()
    elapsed = ended - began
    stop.set()
    probes = await asyncio.to_thread(out.get)
    prober.join()
    samples = [ms for sent, ms in probes if began <= sent <= ended]  # those the case overlapped
    return {"case": name, "seconds": elapsed, "probes": len(samples),
            "p50": percentile(samples, 50), "p99": percentile(samples, 99),
            "max": max(samples), "outcome": outcome}


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| case | duration (s) | probes | /healthz p50 (ms) | p99 (ms) | max (ms) | "
             f"p99 <= {GOAL_MS:g} ms | what the case got |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['seconds']:.1f} | {r['probes']} | {r['p50']:.1f} | "
                     f"{r['p99']:.1f} | {r['max']:.1f} | "
                     f"{'yes' if r['p99'] <= GOAL_MS else 'NO'} | {r['outcome']} |")
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--out", type=Path, help="append the run (command, machine, table)")
    args = parser.parse_args()
    names = args.cases.split(",")
    unknown = sorted(set(names) - set(CASES))
    if unknown:
        parser.error(f"unknown cases {unknown}; allowed: {list(CASES)}")
    config = {"manager": {"port": 0}, "policy": {"name": "app_centric"},
              "engines": zero_latency_engines(2, in_process=False),
              "tenants": [{"name": "bench", "api_key": KEY}]}
    load = os.getloadavg()
    proc, url, _ = await start_parrot_serve(config)
    try:
        rows = []
        for name in names:
            rows.append(await run_case(url, name))
            print(f"{name}: done", flush=True)
    finally:
        proc.terminate()
        await proc.wait()
    result = table(rows)
    print(result)
    if args.out:
        record = (f"\n## Run of {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC\n\n"
                  f"`python bench/healthz_stall.py --cases {args.cases}` on {platform.node()} "
                  f"({os.cpu_count()} CPUs, {platform.python_version()}; load average before "
                  f"the run {load[0]:.1f}, shared with other work)\n\n{result}\n")
        with args.out.open("a") as f:
            f.write(record)


if __name__ == "__main__":
    asyncio.run(main())
