"""parrot-serve as a user runs it: a subprocess from a YAML file, /healthz, SIGTERM."""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from pathlib import Path

import aiohttp

from parrot.cli.serve import main

ROOT = Path(__file__).resolve().parents[2]


async def test_serves_sim_config_until_sigterm():
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "parrot.cli.serve", "--config", str(ROOT / "configs/sim.yaml"),
        "--port", "0", "--log-level", "WARNING", stdout=asyncio.subprocess.PIPE, cwd=ROOT)
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        url = re.search(r"ready at (\S+)", line).group(1)
        async with aiohttp.ClientSession() as http:
            async with http.get(url + "/healthz") as resp:
                assert resp.status == 200
                assert await resp.json() == {"status": "ok", "engines": 2, "healthy_engines": 2}
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def test_bad_config_exits_2_with_the_problem(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("policy:\n  name: fastest\n")
    assert main(["--config", str(bad)]) == 2
    assert "unknown policy 'fastest'" in capsys.readouterr().err
    bad.write_text("engines:\n  - name: e\n    kind: gpu\n")
    assert main(["--config", str(bad)]) == 2
    assert "engines['e'].kind" in capsys.readouterr().err
    assert main(["--config", str(tmp_path / "missing.yaml")]) == 2
