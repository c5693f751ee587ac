"""Where and when a benchmark ran, for the results it records: the UTC time, the commit, the
GPU and the command line.

No torch and no CUDA here: a benchmark's driver process must not create a CUDA context of its
own (it would take memory from the engines it measures), so the GPU is named by nvidia-smi.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def device_name() -> str:
    """The machine's GPUs as nvidia-smi names them (distinct names, comma-separated), "no GPU"
    without nvidia-smi or GPUs, or "unknown GPU" when it fails."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "no GPU"
    try:
        names = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown GPU"
    return ", ".join(sorted(set(filter(None, map(str.strip, names.splitlines()))))) or "no GPU"


def commit() -> str:
    """The checkout's short commit, "+ changes" when its tracked files differ from it, or
    "unknown" outside a git checkout (the GPU machine gets a copy of the working tree)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                              capture_output=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, text=True, capture_output=True, timeout=10,
                               check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head} + changes" if dirty else head


def utc_now() -> str:
    """This minute, as results name it: "2026-12-05 21:36 UTC"."""
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


def provenance(argv: list[str] | None = None) -> dict[str, str]:
    """{date, commit, device, cpus, command}: `argv` (default sys.argv) as a shell line."""
    args = sys.argv if argv is None else argv
    return {"date": utc_now(), "commit": commit(), "device": device_name(),
            "cpus": str(os.cpu_count() or 0),
            "command": "python3 " + shlex.join(args)}
