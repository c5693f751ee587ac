"""Streams tell the truth across a re-dispatch (docs/RELIABILITY.md): two launched engines,
sampled variable streams and OpenAI streams running on both, one engine SIGKILLed mid-stream.
Every variable stream's pieces concatenate to the final value or it ends with an error event;
every OpenAI stream ends each choice with a finish_reason or ends with an error event."""

from __future__ import annotations

import asyncio
import json
import os
import signal



from tests.server.front_door import config, new_session, running

SIM = {"decode_base_ms": 10.0, "decode_per_seq_ms": 0.0, "decode_per_token_ms": 0.0,
       "prefill_per_token_ms": 0.0}
MANAGER = {"engine_heartbeat_interval_s": 0.2, "engine_heartbeat_timeout_s": 1.0,
           "engine_restart_backoff_s": 0.2}
SAMPLED = {"max_tokens": 120, "temperature": 1.0, "ignore_eos": True}


def _events(text: str) -> list[dict]:
    return [json.loads(line[6:]) for line in text.split("\n\n")
            if line.startswith("data: ") and line != "data: [DONE]"]


async def _variable_stream(http, sid, auth, i):
    async with http.post("/v1/submit", json={
            "session_id": sid, "prompt": f"story {i}: {{{{output:y}}}}", "stream": ["y"],
            "placeholders": [{"name": "y", "in_out": "output", "sampling": SAMPLED}]},
            headers=auth) as resp:
        vid = (await resp.json())["placeholders"][-1]["semantic_var_id"]
    async with http.get(f"/v1/variables/{vid}/stream?session_id={sid}", headers=auth) as resp:
        events = _events((await resp.read()).decode())
    async with http.post("/v1/get", json={"session_id": sid, "semantic_var_id": vid},
                         headers=auth) as resp:
        final = await resp.json()
    pieces = "".join(e.get("text", "") for e in events)
    errored = "error" in events[-1] if events else False
    return errored or ("value" in final and pieces == final["value"]), (pieces, final, events[-1:])


async def _openai_stream(http, i):
    body = {"model": "simulated", "prompt": f"poem {i}", "stream": True, "n": 2,
            **SAMPLED}
    async with http.post("/v1/completions", json=body) as resp:
        events = _events((await resp.read()).decode())
    if events and "error" in events[-1]:
        return True, events[-1]
    finished = {c["index"] for e in events for c in e.get("choices", ())
                if c.get("finish_reason")}
    return finished == {0, 1}, events[-2:]


async def test_streams_are_whole_or_end_with_an_error_when_an_engine_is_killed():
    engines = [{"name": f"sim-{i}", "kind": "simulated", "params": SIM} for i in range(2)]
    cfg = config(MANAGER)
    cfg = type(cfg).from_mapping({"manager": MANAGER, "policy": {"name": "least_queue"},
                                  "engines": engines})
    async with running(cfg) as (server, http):
        sid, auth = await new_session(http)
        streams = [asyncio.create_task(_variable_stream(http, sid, auth, i)) for i in range(10)]
        streams += [asyncio.create_task(_openai_stream(http, i)) for i in range(10)]
        await asyncio.sleep(0.6)  # every stream has pieces out
        os.kill(server.launched[0].process.pid, signal.SIGKILL)
        results = await asyncio.wait_for(asyncio.gather(*streams), 120)
        bad = [detail for ok, detail in results if not ok]
        assert not bad, bad[:2]


