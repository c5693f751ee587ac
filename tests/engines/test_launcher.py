from __future__ import annotations

import argparse
import asyncio
import os
import signal
from pathlib import Path

import pytest

from parrot.cli.engine import load_params
from parrot.engines.launcher import (EngineLaunchError, EngineProcess, LaunchSpec,
                                     launch_engines, stop_engines)
from parrot.engines.protocol import FillRequest, GenerateRequest
from parrot.sampling import SamplingParams


async def test_engines_start_serve_and_stop() -> None:
    specs = [LaunchSpec("e0", "simulated", {"zero_latency": True}),
             LaunchSpec("e1", "simulated", {"zero_latency": True, "num_blocks": 64})]
    engines = await launch_engines(specs, startup_timeout_s=30)
    try:
        assert [e.name for e in engines] == ["e0", "e1"]
        assert len({e.url for e in engines}) == 2
        info = await engines[1].engine.info()
        assert (info.name, info.kind, info.num_blocks_total) == ("e1", "simulated", 64)
        await engines[0].engine.fill(FillRequest("p", text="abcd" * 10))
        result = await engines[0].engine.generate_all(
            GenerateRequest("c", "p", SamplingParams(max_tokens=4)))
        assert len(result.text) == 16
    finally:
        await stop_engines(engines)
    # SIGTERM is a clean shutdown
    assert [e.process.returncode for e in engines] == [0, 0]
    assert not await engines[0].engine.healthz()


async def test_a_failed_start_reports_the_stderr_tail() -> None:
    good = LaunchSpec("good", "simulated", {"zero_latency": True})
    bad = LaunchSpec("bad", "simulated", {"num_blocks": 0})
    with pytest.raises(EngineLaunchError) as info:
        await launch_engines([good, bad], startup_timeout_s=30)
    message = str(info.value)
    assert "'bad'" in message and "exit code 2" in message
    assert "num_blocks: 0 is out of range" in message


async def test_stop_kills_after_the_grace_period() -> None:
    process = EngineProcess(LaunchSpec("e", "simulated", {}), grace_s=0.2)
    await process.start()
    assert process.pid is not None
    # make the engine ignore SIGTERM: stop() has to fall back to SIGKILL
    os.kill(process.pid, signal.SIGSTOP)
    assert await process.stop() == -signal.SIGKILL


def test_duplicate_names_are_rejected() -> None:
    spec = LaunchSpec("same", "simulated")
    with pytest.raises(EngineLaunchError, match="duplicate"):
        asyncio.run(launch_engines([spec, spec]))


def test_cli_reads_params_from_yaml_or_json(tmp_path: Path) -> None:
    config = tmp_path / "engine.yaml"
    config.write_text("profile: a100_llama13b\nnum_blocks: 100\n")
    assert load_params(argparse.Namespace(config=str(config), params=None)) == \
        {"profile": "a100_llama13b", "num_blocks": 100}
    assert load_params(argparse.Namespace(config=None, params='{"zero_latency": true}')) == \
        {"zero_latency": True}
    with pytest.raises(ValueError, match="mapping"):
        load_params(argparse.Namespace(config=None, params="[1]"))


async def test_a_launched_engine_serves_only_with_its_secret() -> None:
    import aiohttp

    engines = await launch_engines([LaunchSpec("e0", "simulated", {"zero_latency": True})],
                                   startup_timeout_s=30)
    try:
        url = engines[0].url
        async with aiohttp.ClientSession() as session:
            async with session.post(url + "/v1/engine/fill",
                                    json={"context_id": "a", "text": "stolen"}) as resp:
                assert resp.status == 401
                assert (await resp.json())["error"]["type"] == "UnauthorizedError"
        assert (await engines[0].engine.fill(FillRequest("a", text="x" * 8))).context_len == 2
        other = (await launch_engines([LaunchSpec("e1", "simulated", {})], startup_timeout_s=30))
        try:
            assert other[0].process.secret != engines[0].process.secret  # one per engine
        finally:
            await stop_engines(other)
    finally:
        await stop_engines(engines)


_PARENT = """
import asyncio, sys
from parrot.engines.launcher import LaunchSpec, launch_engines
async def main():
    engines = await launch_engines([LaunchSpec("orphan", "simulated", {})], startup_timeout_s=30)
    print(engines[0].process.pid, flush=True)
    await asyncio.sleep(120)
asyncio.run(main())
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


async def test_engines_die_when_parrot_serve_is_killed() -> None:
    # Reproduction: kill -9 of parrot-serve left its engine processes running.
    import os
    import sys

    parent = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _PARENT, stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    try:
        assert parent.stdout is not None
        engine_pid = int(await asyncio.wait_for(parent.stdout.readline(), 30))
        assert _alive(engine_pid)
        parent.kill()  # SIGKILL: no cleanup code of the parent runs
        await parent.wait()
        for _ in range(100):
            if not _alive(engine_pid):
                break
            await asyncio.sleep(0.05)
        assert not _alive(engine_pid), "the engine outlived its parent"
    finally:
        if parent.returncode is None:
            parent.kill()
            await parent.wait()


def test_an_engine_without_a_secret_or_manager_refuses_to_start() -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PARROT_ENGINE_SECRET"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    done = subprocess.run([sys.executable, "-m", "parrot.cli.engine", "--kind", "simulated",
                           "--name", "e"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "PARROT_ENGINE_SECRET" in done.stderr
