"""Where a call's CPU goes in parrot-serve: py-spy on the server process under bench_manager's load.

Starts parrot-serve (16 zero-latency simulated engines, so no model time), runs one of
bench_manager's HTTP workloads against it while py-spy samples the server process, and sums
the samples by what each was doing: the first frame from the leaf up that matches a category
(`CATEGORIES`) names it, so the shares add up to 100% of the server's busy samples.

    python bench/profile_manager.py each|batch [--policy app_centric] [--calls 6000]
        [--svg /tmp/manager_profile_batch.svg] [--raw FILE]

Needs py-spy (`pip install py-spy`) and permission to sample a child process.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_manager import http_throughput, start_server  # noqa: E402

# (category, substrings of a py-spy frame), tried in order on each frame from the leaf up.
CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("JSON encode/decode", ("json/", "json_body.py", "read_json", "json_response")),
    ("wire types (codec, typed messages)", ("wire_types/", "requests.py", "sampling.py")),
    ("submit checks + template parse", ("submission.py", "template.py", "admission.py",
                                        "_check_prompt_chars")),
    ("DAG (SessionGraph)", ("dag.py", "networkx")),
    ("deduction", ("deduction.py",)),
    ("prefix hashing / index", ("prefix.py",)),
    ("policy + engine views", ("policies/", "placement_check.py", "EnginePool.views",
                               "EngineState.view")),
    ("scheduler (queue, call views)", ("scheduler.py",)),
    ("metrics + logging", ("metrics.py", "prometheus_client", "logging/")),
    ("engine protocol + executor + contexts", ("executor.py", "contexts.py", "engine_pool.py",
                                               "engine_health.py")),
    ("simulated engine (zero latency)", ("engines/",)),
    ("manager lifecycle (submit, publish, state)", ("manager.py", "nodes.py", "lifecycle.py",
                                                    "streams.py", "sessions.py")),
    ("HTTP (aiohttp, routes)", ("aiohttp", "http_api.py", "wire_routes.py", "multidict",
                                "yarl")),
    ("event loop, tasks", ("asyncio/", "uvloop", "runners.py")),
)

WORKLOADS = {"each": (1, False), "batch": (10, True)}   # (chain length, one submit_batch)


def categorise(collapsed: Path) -> tuple[collections.Counter[str], int]:
    """Samples per category of py-spy's raw (collapsed stack) output, and the total."""
    counts: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        total += int(n)
        category = "other"
        for frame in reversed(stack.split(";")):
            hit = next((name for name, marks in CATEGORIES if any(m in frame for m in marks)),
                       None)
            if hit is not None:
                category = hit
                break
        counts[category] += int(n)
    return counts, total


async def profile(workload: str, policy: str, calls: int, out: Path, fmt: str) -> float:
    """Calls/s of the workload while py-spy records the server into `out` (format `fmt`)."""
    spy_bin = shutil.which("py-spy")
    if spy_bin is None:
        sys.exit("profile_manager needs py-spy: pip install py-spy")
    proc, url = await start_server(policy)
    try:
        await http_throughput(url, 200, 8, 1)  # warm-up
        spy = subprocess.Popen([spy_bin, "record", "-p", str(proc.pid), "-r", "200", "-f", fmt,
                                "-o", str(out), "--nonblocking"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        await asyncio.sleep(1.0)  # py-spy attached
        chain, batched = WORKLOADS[workload]
        rate = await http_throughput(url, calls, 32, chain, batched=batched)
        spy.send_signal(signal.SIGINT)
        spy.wait()
    finally:
        proc.send_signal(signal.SIGTERM)
        await proc.wait()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload", choices=sorted(WORKLOADS))
    parser.add_argument("--policy", default="app_centric")
    parser.add_argument("--calls", type=int, default=6000)
    parser.add_argument("--svg", default=None, help="also record a flame graph here")
    parser.add_argument("--raw", default=None, help="keep py-spy's collapsed stacks here")
    args = parser.parse_args()
    raw = Path(args.raw) if args.raw else Path(tempfile.mkdtemp()) / "stacks.txt"
    rate = asyncio.run(profile(args.workload, args.policy, args.calls, raw, "raw"))
    counts, total = categorise(raw)
    print(f"{args.workload}, {args.policy}: {rate:.0f} calls/s while sampled; "
          f"{total} busy samples of the server\n")
    print("| where | share of the server's busy samples |\n|---|---:|")
    for name, n in counts.most_common():
        print(f"| {name} | {100 * n / max(total, 1):.1f}% |")
    if args.svg:
        asyncio.run(profile(args.workload, args.policy, args.calls, Path(args.svg),
                            "flamegraph"))


if __name__ == "__main__":
    main()
