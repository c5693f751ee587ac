"""Start `parrot-serve` in a subprocess for a benchmark (bench_manager.py, load_test.py).

The config is written to a temporary YAML; the server's first stdout lines give its URL and
the admin token it generated. Engines are simulated with zero latency, so what is measured is
the manager.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]


def zero_latency_engines(count: int, *, in_process: bool) -> list[dict[str, Any]]:
    """`count` simulated engines that cost no time, with capacities nothing reaches."""
    return [{"name": f"sim-{i}", "kind": "simulated", "in_process": in_process,
             "latency_capacity": 1 << 20, "throughput_capacity": 1 << 20,
             "params": {"zero_latency": True, "num_blocks": 1 << 16}} for i in range(count)]


async def start_parrot_serve(config: dict[str, Any], *, pipe_stderr: bool = False,
                             timeout_s: float = 120.0, log_level: str = "WARNING"
                             ) -> tuple[asyncio.subprocess.Process, str, str]:
    """(process, URL, admin token) of a parrot-serve started from `config` (port 0); its log
    (at `log_level`) goes to this process's stderr unless piped."""
    path = Path(tempfile.mkdtemp()) / "parrot-serve.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "parrot.cli.serve", "--config", str(path), "--log-level",
        log_level, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE if pipe_stderr else None,
        cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stdout is not None
    ready = (await asyncio.wait_for(proc.stdout.readline(), timeout_s)).decode()
    token = (await asyncio.wait_for(proc.stdout.readline(), 10)).decode()
    url = re.search(r"ready at (\S+)", ready)
    admin = re.search(r"admin token \(generated\): (\S+)", token)
    if not (url and admin):
        raise RuntimeError(f"parrot-serve did not start: {ready!r} {token!r}")
    return proc, url.group(1), admin.group(1)
