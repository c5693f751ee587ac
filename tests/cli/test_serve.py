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


SLOW_SIM = """
manager: {shutdown_grace_s: 1}
policy: {name: least_queue}
engines:
  - {name: sim-0, kind: simulated}
"""


async def test_sigterm_answers_waiting_gets_within_the_grace_period(tmp_path):
    """Before: SIGTERM with long generations in flight took minutes and answered no `get`."""
    cfg = tmp_path / "slow.yaml"
    cfg.write_text(SLOW_SIM)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "parrot.cli.serve", "--config", str(cfg), "--port", "0",
        "--log-level", "WARNING", stdout=asyncio.subprocess.PIPE, cwd=ROOT)
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        url = re.search(r"ready at (\S+)", line).group(1)
        token_line = (await asyncio.wait_for(proc.stdout.readline(), 10)).decode()
        assert re.search(r"admin token \(generated\): \S{32,}", token_line)
        async with aiohttp.ClientSession(base_url=url) as http:
            async with http.post("/v1/sessions") as resp:
                session = await resp.json()
            auth = {"Authorization": f"Bearer {session['token']}"}
            async with http.post("/v1/submit", headers=auth, json={
                    "session_id": session["session_id"], "prompt": "Long: {{output:y}}",
                    "sampling": {"max_tokens": 4000}}) as resp:
                var = (await resp.json())["placeholders"][-1]["semantic_var_id"]

            async def get() -> tuple[int, dict]:
                async with http.post("/v1/get", headers=auth, json={
                        "session_id": session["session_id"], "semantic_var_id": var}) as resp:
                    return resp.status, await resp.json()

            waiting = asyncio.create_task(get())
            await asyncio.sleep(0.3)
            started = asyncio.get_running_loop().time()
            proc.send_signal(signal.SIGTERM)
            status, reply = await asyncio.wait_for(waiting, 15)
            assert (status, reply["error"]["type"]) == (503, "ShuttingDownError")
        assert await asyncio.wait_for(proc.wait(), 30) == 0
        assert asyncio.get_running_loop().time() - started < 15
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
