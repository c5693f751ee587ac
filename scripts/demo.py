"""Start parrot-serve from a config, run an example application against it, stop the server.

    python scripts/demo.py [--config policies.yaml] [--example chain_summary] [-- example args]
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
from pathlib import Path

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


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(ROOT / "policies.yaml"))
    parser.add_argument("--example", default="chain_summary",
                        choices=["chain_summary", "map_reduce_summary", "multi_output"])
    parser.add_argument("--startup-timeout", type=float, default=600.0)
    args, example_args = parser.parse_known_args()
    sys.path.insert(0, str(ROOT))
    example = importlib.import_module(f"examples.{args.example}")
    proc, url = await start_server(args.config, args.startup_timeout)
    try:
        await example.main(["--url", url, *example_args])
    finally:
        proc.send_signal(signal.SIGTERM)
        await proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
