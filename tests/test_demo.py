"""scripts/demo.py runs the example application twice (Parrot's DAG, a request-level client)
and prints both times and their ratio."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("example", ["chain_summary", "multi_output"])
def test_demo_prints_both_times_and_the_ratio(tmp_path, example):
    config = tmp_path / "sim.yaml"
    config.write_text(yaml.safe_dump({
        "policy": {"name": "app_centric"},
        "engines": [{"name": "sim-0", "kind": "simulated", "in_process": True,
                     "params": {"profile": "a100_llama13b", "zero_latency": True}}]}))
    done = subprocess.run([sys.executable, str(ROOT / "scripts/demo.py"), "--config",
                           str(config), "--example", example, "--network-delay-ms", "20"],
                          capture_output=True, text=True, timeout=180, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "20 ms network round trip per message (emulated)" in out
    parrot_s = float(re.search(r"Parrot \(application DAG\): +([\d.]+) s", out).group(1))
    baseline_s = float(re.search(r"request-level client: +([\d.]+) s", out).group(1))
    ratio = float(re.search(r"ratio \(request-level / Parrot\): ([\d.]+)x", out).group(1))
    assert ratio == pytest.approx(baseline_s / parrot_s, rel=0.05)  # times printed rounded
