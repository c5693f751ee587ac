"""Start parrot-serve from a config, run an example application on it twice, stop the server.

    python scripts/demo.py [--config policies.yaml] [--example chain_summary]
                           [--network-delay-ms MS] [-- example args]

The same application runs first as Parrot runs it (the whole DAG submitted at once; values flow
inside the service; only the final value comes back), then as a request-level client runs it
(`parrot.Session(mode="baseline")`: the client renders each prompt and sends it only once the
values it needs came back, as with any completion API). Both times and their ratio are
printed. The runs do the same work: each reads its own part of the document (so the second
finds none of the first's prompts in the engines' prefix cache) of the same length, and every
call generates exactly its max_tokens (ignore_eos), so an early end of turn cannot favour
either. Parrot goes first, so any warm-up favours the baseline.

A client reaches a service over a network: `--network-delay-ms` (default 200, the low end of
the paper's 200-300 ms setting; 0 for none) is the round trip every client-service message
pays, emulated by the client. This is where a request-level client loses most, one round trip
per call of its chain; Parrot sends the whole DAG and gets the one value back.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import re
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
READY = re.compile(r"parrot-serve ready at (\S+)")


async def start_server(config: str, timeout_s: float) -> tuple[asyncio.subprocess.Process, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "parrot.cli.serve", "--config", config, "--port", "0",
        "--log-level", "WARNING", stdout=asyncio.subprocess.PIPE, cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            proc.kill()
            raise TimeoutError(f"parrot-serve did not start within {timeout_s:.0f} s")
        line = await asyncio.wait_for(proc.stdout.readline(), remaining)
        if not line:
            raise RuntimeError(f"parrot-serve exited with status {await proc.wait()}")
        print(line.decode().rstrip(), flush=True)
        match = READY.search(line.decode())
        if match:
            return proc, match.group(1)


def application(name: str, example: ModuleType, run: int) -> Callable[[], Awaitable[Any]]:
    """The example's application as a coroutine factory; `run` (0, 1) picks the part of the
    document it reads, so the two runs share no prompt."""
    if name == "multi_output":
        tasks = ["Explain why parrots can imitate speech.", "Explain why owls hunt at night."]
        return lambda: example.run(tasks[run])
    chunks_per_run = 4 if name == "chain_summary" else 8
    chunks = example.document_chunks(2 * chunks_per_run, 256)
    mine = chunks[run * chunks_per_run:(run + 1) * chunks_per_run]
    if name == "chain_summary":
        first, refine = example.first_summary, example.refine_summary
        return lambda: _chain(first, refine, mine, 48)
    return lambda: _map_reduce(example, mine, 32)


async def _chain(first: Any, refine: Any, chunks: list[str], max_tokens: int) -> str:
    """examples/chain_summary.py's chain, every call generating exactly max_tokens."""
    import parrot

    first, refine = (f.options(max_tokens=max_tokens, ignore_eos=True) for f in (first, refine))
    summary = first(chunk=chunks[0])
    for chunk in chunks[1:]:
        summary = refine(previous=summary, chunk=chunk)
    return str(await summary.aget(parrot.LATENCY))


async def _map_reduce(example: ModuleType, chunks: list[str], max_tokens: int) -> str:
    """examples/map_reduce_summary.py's application, every call generating exactly
    max_tokens."""
    import parrot

    mapper = example.map_summary.options(max_tokens=max_tokens, ignore_eos=True)
    parts = [mapper(chunk=chunk) for chunk in chunks]
    reducer = example.reduce_function(len(parts)).options(max_tokens=max_tokens,
                                                          ignore_eos=True)
    final = reducer(**{f"part{i}": part for i, part in enumerate(parts)})
    return str(await final.aget(parrot.LATENCY))


WARM_UP = {"chain_summary": ("first_summary", "chunk"),
           "map_reduce_summary": ("map_summary", "chunk"), "multi_output": ("translate", "title")}


async def warm_up(url: str, name: str, example: ModuleType) -> None:
    """One untimed one-token call of the example's first function: the first request pays
    one-time costs (e.g. the manager loading the chat-template renderer: ~3 s measured on a
    2-core VM), which would otherwise be charged to whichever run goes first."""
    import parrot

    function, placeholder = WARM_UP[name]
    async with parrot.Session(url):
        out = getattr(example, function).options(max_tokens=1)(**{placeholder: "warm-up"})
        await out.aget()


async def timed(url: str, mode: str, app: Callable[[], Awaitable[Any]],
                delay_s: float) -> tuple[float, Any]:
    import parrot

    delay = (lambda: delay_s) if delay_s > 0 else None
    started = time.perf_counter()
    async with parrot.Session(url, mode=mode, delay=delay):
        result = await app()
    return time.perf_counter() - started, result


def show(result: Any) -> str:
    """The result's first line (past its end of turn a model, made to go on, rambles)."""
    def line(value: Any) -> str:
        text = (str(value).strip().splitlines() or [""])[0]
        return text if len(text) <= 160 else text[:157] + "..."
    if isinstance(result, dict):
        return "\n".join(f"  {key}: {line(value)}" for key, value in result.items())
    return "  " + line(result)


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(ROOT / "policies.yaml"))
    parser.add_argument("--example", default="chain_summary",
                        choices=["chain_summary", "map_reduce_summary", "multi_output"])
    parser.add_argument("--network-delay-ms", type=float, default=200.0,
                        help="emulated client-service round trip per message (default 200)")
    parser.add_argument("--startup-timeout", type=float, default=600.0)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    example = importlib.import_module(f"examples.{args.example}")
    proc, url = await start_server(args.config, args.startup_timeout)
    delay_s = args.network_delay_ms / 1000.0
    try:
        await warm_up(url, args.example, example)
        print(f"\n{args.example}, run as Parrot runs it (the whole DAG in the service) ...",
              flush=True)
        parrot_s, result = await timed(url, "parrot", application(args.example, example, 0),
                                       delay_s)
        print(show(result))
        print(f"\n{args.example} again, as a request-level client runs it (each call sent "
              "once the client has its inputs) ...", flush=True)
        baseline_s, result = await timed(url, "baseline",
                                         application(args.example, example, 1), delay_s)
        print(show(result))
    finally:
        proc.send_signal(signal.SIGTERM)
        await proc.wait()
    network = f", {args.network_delay_ms:g} ms network round trip per message (emulated)" \
        if args.network_delay_ms else ", no network (client and service on one host)"
    print(f"\nend-to-end time{network}:")
    print(f"  Parrot (application DAG):  {parrot_s:8.3f} s")
    print(f"  request-level client:      {baseline_s:8.3f} s")
    print(f"  ratio (request-level / Parrot): {baseline_s / parrot_s:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
