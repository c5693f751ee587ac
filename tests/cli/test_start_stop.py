"""Starting and stopping as a user meets it: a taken port, a config without engines, Ctrl-C
twice, a standalone engine with a wrong admin token, `parrot --help`, live mode without
a config. Each problem is one line, never a traceback; nothing waits silently."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

from parrot.cli.main import main as parrot_main

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

SLOW_SIM = """
manager: {shutdown_grace_s: 30}
policy: {name: least_queue}
engines:
  - {name: sim-0, kind: simulated, in_process: true}
"""


def test_a_port_in_use_is_one_line_before_any_engine_starts(tmp_path):
    # an engine that would hold the start for 30 s (a URL nothing answers): the taken port
    # must be said before it is waited for
    cfg = tmp_path / "remote.yaml"
    cfg.write_text("policy: {name: least_queue}\n"
                   "engines: [{name: r, kind: remote, url: 'http://127.0.0.1:9'}]\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "parrot.cli.serve", "--config", str(cfg),
             "--port", str(port), "--log-level", "WARNING"],
            capture_output=True, text=True, env=ENV, timeout=90, cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    assert f"cannot listen on 127.0.0.1:{port}: the address is already in use" in done.stderr
    assert "Traceback" not in done.stderr
    assert time.monotonic() - started < 20   # not after the engine's 30 s


async def _serve(config: Path) -> tuple[asyncio.subprocess.Process, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "parrot.cli.serve", "--config", str(config), "--port", "0",
        "--log-level", "WARNING", stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=ENV)
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
    match = re.search(r"ready at (\S+)", line)
    assert match, line
    return proc, match.group(1)


async def test_ctrl_c_drains_with_a_countdown_and_a_second_stops_within_2_s(tmp_path):
    cfg = tmp_path / "slow.yaml"
    cfg.write_text(SLOW_SIM)
    proc, url = await _serve(cfg)
    try:
        assert proc.stdout is not None
        await proc.stdout.readline()   # the generated admin token
        async with aiohttp.ClientSession(base_url=url) as http:
            async with http.post("/v1/sessions") as resp:
                session = await resp.json()
            async with http.post("/v1/submit", headers={
                    "Authorization": f"Bearer {session['token']}"}, json={
                    "session_id": session["session_id"], "prompt": "Long: {{output:y}}",
                    "sampling": {"max_tokens": 4000}}) as resp:   # ~90 s on this profile
                assert resp.status == 200
        await asyncio.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        stopping = (await asyncio.wait_for(proc.stdout.readline(), 10)).decode()
        assert "waiting up to 30 s for 1 running output(s); Ctrl-C again stops now" in stopping
        countdown = (await asyncio.wait_for(proc.stdout.readline(), 10)).decode()
        assert "draining: 1 output(s) still running, 25 s left" in countdown
        proc.send_signal(signal.SIGINT)
        started = asyncio.get_running_loop().time()
        assert await asyncio.wait_for(proc.wait(), 10) == 0
        assert asyncio.get_running_loop().time() - started < 2.0
        assert "stopping now" in (await proc.stdout.read()).decode()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_a_config_without_engines_warns(tmp_path):
    cfg = tmp_path / "empty.yaml"
    cfg.write_text("policy: {name: least_queue}\nengines: []\n")
    proc, _ = await _serve(cfg)
    try:
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
        assert proc.stderr is not None
        err = (await proc.stderr.read()).decode()
        assert "warning: the config names no engines" in err and "Traceback" not in err
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_an_engine_with_a_wrong_admin_token_stops_after_a_few_tries():
    from parrot.serve_config import ServeConfig
    from parrot.server.service import ParrotServer

    server = ParrotServer(ServeConfig.from_mapping(
        {"manager": {"admin_token": "the-right-admin-token"}}))
    url = await server.start(port=0)
    try:
        env = {k: v for k, v in ENV.items() if k != "PARROT_ENGINE_SECRET"}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "parrot.cli.engine", "--kind", "simulated", "--name", "e0",
            "--params", '{"zero_latency": true}', "--register-url", url,
            "--log-level", "ERROR", stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
            env={**env, "PARROT_ADMIN_TOKEN": "a-wrong-admin-token-xx"})
        try:
            assert await asyncio.wait_for(proc.wait(), 30) == 2
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert proc.stderr is not None
        err = (await proc.stderr.read()).decode()
        assert err.count("\n") == 1, err
        assert "refused the admin token (wrong token; HTTP 401)" in err
        assert "stopped after 3 refusals" in err
        assert not server.manager.engines   # nothing registered
    finally:
        await server.stop()


def test_parrot_help_exits_0(capsys):
    assert parrot_main(["--help"]) == 0
    assert "parrot serve ARGS" in capsys.readouterr().out


def test_bench_live_without_config_is_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "parrot.cli.bench", "--workload",
                           "chain_summary", "--mode", "live", "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, env=ENV, timeout=60, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1, done.stderr
    assert "--mode live needs --config" in done.stderr


async def test_a_launched_engine_stops_at_once_on_sigterm():
    """What parrot-serve's launcher starts (--exit-with-parent): SIGTERM ends it at once, not
    after the launcher's 5-s grace and a SIGKILL."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "parrot.cli.engine", "--kind", "simulated", "--name", "e0",
        "--params", '{"zero_latency": true}', "--exit-with-parent", "--log-level", "ERROR",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        env={**ENV, "PARROT_ENGINE_SECRET": "a-secret-for-the-test"})
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        assert line.startswith("READY "), line
        proc.send_signal(signal.SIGTERM)
        started = asyncio.get_running_loop().time()
        assert await asyncio.wait_for(proc.wait(), 10) == 0
        assert asyncio.get_running_loop().time() - started < 2.0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
