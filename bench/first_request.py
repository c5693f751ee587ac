"""Start-up to the first served request: parrot-serve from a config, timed from the process's
start to "ready", then one streamed completion through the OpenAI route.

    python bench/first_request.py --config configs/serving_h200_llama7b.yaml \\
        [--engine-param tokenizer=$PWD/.tok] [--runs 2]

Run it on a fresh machine (no Triton cache) for the cold start; a second run in the same
command is the warm start (the compiled kernels cached on disk). The engines' start-up log
(each phase with its time) goes to stderr as it happens.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_serving import serve_config  # noqa: E402
from serve_subprocess import start_parrot_serve  # noqa: E402


async def one_run(config: dict, prompt: str, max_tokens: int, log_level: str
                  ) -> tuple[float, float]:
    """(seconds to ready, seconds to the first request's last token after ready)."""
    started = time.perf_counter()
    proc, url, _ = await start_parrot_serve(config, timeout_s=900.0, log_level=log_level)
    ready = time.perf_counter() - started
    try:
        async with aiohttp.ClientSession() as client:
            async with client.get(f"{url}/v1/models") as reply:
                model = (await reply.json())["data"][0]["id"]
            body = {"model": model, "prompt": prompt, "max_tokens": max_tokens,
                    "ignore_eos": True}
            t0 = time.perf_counter()
            async with client.post(f"{url}/v1/completions", json=body) as reply:
                assert reply.status == 200, await reply.text()
                await reply.json()
            return ready, time.perf_counter() - t0
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 60)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", type=Path, required=True)
    p.add_argument("--engine-param", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--runs", type=int, default=2, help="the first cold, the rest warm")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--log-level", default="INFO",
                   help="parrot-serve's (INFO: the engines' start-up phases, as they happen)")
    args = p.parse_args(argv)
    config = serve_config(args.config, None, args.engine_param)
    rows = []
    for i in range(args.runs):
        ready, first = asyncio.run(one_run(config, "Once upon a time " * 20, args.max_tokens,
                                         args.log_level))
        rows.append((i, ready, first))
        print(f"run {i}: ready after {ready:.1f} s, first request {first * 1000:.0f} ms, "
              f"start-up to first served request {ready + first:.1f} s", file=sys.stderr)
    print("| run | start to ready (s) | first request (ms) | to first served request (s) |")
    print("|---|---|---|---|")
    for i, ready, first in rows:
        print(f"| {'cold' if i == 0 else 'warm'} | {ready:.1f} | {first * 1000:.0f} | "
              f"{ready + first:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
