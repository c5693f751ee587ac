"""Requests that submit many calls yield the loop between slices (admission.Slices), a big
body is parsed beside the loop (server/off_loop.py), and a stopping server cancels the calls
whose variables it failed. "The loop stays responsive" is measured as the longest gap between
the ticks of a coroutine that asks to run every millisecond (front_door.loop_gaps), with
bounds generous enough for a loaded 2-core machine."""

from __future__ import annotations

import asyncio
import json
import logging

from parrot.manager.admission import CALLS_PER_SLICE
from parrot.serve_config import EngineSpec
from parrot.manager.manager import Manager
from parrot.errors import ShuttingDownError
from parrot.policies.least_queue import LeastQueuePolicy
from parrot.types import CallState
from tests.manager.conftest import out, submit
from tests.manager.fakes import RecordingEngine
from tests.server.front_door import call, config, loop_gaps, new_session, running


async def _watch(session, seen: list[int], stop: asyncio.Event) -> None:
    while not stop.is_set():
        seen.append(len(session.calls))
        await asyncio.sleep(0)


async def test_a_large_batch_is_submitted_in_slices_that_yield_the_loop():
    async with running(config()) as (server, http):
        sid, auth = await new_session(http)
        session = server.manager.sessions.get(sid)
        total = CALLS_PER_SLICE * 8
        body = {"session_id": sid, "calls": [{"prompt": f"{i} {{{{output:y}}}}",
                                              "sampling": {"max_tokens": 1}}
                                             for i in range(total)]}
        seen: list[int] = []
        stop = asyncio.Event()
        watcher = asyncio.create_task(_watch(session, seen, stop))
        reply = await server.api.handle("POST", "/v1/submit_batch", body,
                                        auth["Authorization"].removeprefix("Bearer "))
        stop.set()
        await watcher
        assert len(reply.results) == total
        between = {n for n in seen if 0 < n < total}
        assert len(between) >= 4, sorted(between)  # other tasks ran mid-batch, several times


async def test_an_openai_request_of_many_choices_is_submitted_in_slices():
    async with running(config()) as (server, http):
        seen: list[int] = []
        stop = asyncio.Event()

        async def watch_sessions() -> None:
            while not stop.is_set():
                seen.append(sum(len(s.calls) for s in server.manager.sessions))
                await asyncio.sleep(0)

        watcher = asyncio.create_task(watch_sessions())
        body = {"model": "simulated", "prompt": [f"p{i}" for i in range(64)], "n": 8,
                "max_tokens": 1}
        async with http.post("/v1/completions", json=body) as resp:
            assert resp.status == 200
            assert len((await resp.json())["choices"]) == 512
        stop.set()
        await watcher
        assert len({n for n in seen if 0 < n < 512}) >= 4


async def test_the_loop_keeps_ticking_while_a_4096_call_batch_is_submitted():
    """Parsed, decoded, submitted and answered: no step holds the loop for long (without the
    slices, the whole batch was one block). The calls wait on an unset variable, so what is
    measured is the request, not the engine."""
    async with running(config()) as (_, http):
        sid, auth = await new_session(http)
        _, var, _ = await call(http, "POST", "/v1/variables", {"session_id": sid}, auth)
        text = " ".join(f"w{i}" for i in range(300))
        body = json.dumps({"session_id": sid, "calls": [
            {"prompt": f"{i} {text} {{{{input:x}}}} {{{{output:y}}}}", "placeholders": [
                {"name": "x", "in_out": "input", "semantic_var_id": var["semantic_var_id"]}]}
            for i in range(4096)]}).encode()
        async with loop_gaps() as gaps:
            status, reply, _ = await call(http, "POST", "/v1/submit_batch", raw=body,
                                          headers=auth)
        assert status == 200
        assert len(reply["results"]) == 4096 and all("error" not in r for r in reply["results"])
        assert max(gaps) < 0.5, max(gaps)


async def test_a_big_body_is_parsed_beside_the_loop():
    """Two million numbers (6 MB) take seconds to parse in Python's number hook: on the loop
    that held every other request for all of it."""
    async with running(config()) as (_, http):
        sid, auth = await new_session(http)
        body = json.dumps({"session_id": sid, "prompt": "{{output:y}}",
                           "pad": [7] * 2_000_000}).encode()
        async with loop_gaps() as gaps:
            status, reply, _ = await call(http, "POST", "/v1/submit", raw=body, headers=auth)
        assert status == 400 and "unknown field(s) ['pad']" in reply["error"]["message"]
        assert max(gaps) < 0.5, max(gaps)


class _GatedEngine(RecordingEngine):
    """Generates only once `gate` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.generating = asyncio.Event()

    async def generate(self, request):  # type: ignore[override]
        self.generating.set()
        await self.gate.wait()
        async for chunk in super().generate(request):
            yield chunk


async def test_stopping_cancels_running_calls_instead_of_setting_their_values_twice(caplog):
    """What ParrotServer.stop does: fail every unfinished variable, then cancel the calls still
    running, so none of them publishes into a failed variable while the server stops."""
    caplog.set_level(logging.ERROR)
    manager = Manager(LeastQueuePolicy())
    await manager.start()
    engine = _GatedEngine()
    try:
        await manager.add_engine(EngineSpec(name="e0", in_process=True), engine)
        session = manager.create_session()
        running_call = submit(manager, session, "{{input:x}} {{output:y}}", x="hi")
        await asyncio.wait_for(engine.generating.wait(), 5)
        manager.sessions.fail_unfinished(ShuttingDownError("stopping"))
        manager.cancel_running_calls()
        engine.gate.set()              # the engine answers after all
        await asyncio.sleep(0.1)
        assert running_call.state is CallState.FAILED
        var = session.variables[out(running_call, "y")]
        assert isinstance(var.error, ShuttingDownError) and var.value is None
        assert "set twice" not in caplog.text and "crashed" not in caplog.text, caplog.text
    finally:
        await manager.close()
