"""A prompt's rendered size is known before it is rendered and capped per call and per session
(docs/SECURITY.md): a small body naming a large value thousands of times is refused, never
rendered."""

from __future__ import annotations

import json
import resource
import time

from tests.server.front_door import call, config, new_session, running


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def _variable(http, sid, auth, value=None):
    body = {"session_id": sid} | ({"value": value} if value is not None else {})
    status, reply, _ = await call(http, "POST", "/v1/variables", raw=json.dumps(body).encode(),
                                  headers=auth)
    assert status == 200, reply
    return reply["semantic_var_id"]


def _many_refs(sid, var_id, times):
    return {"session_id": sid, "prompt": "{{input:x}}" * times + "{{output:y}}",
            "placeholders": [{"name": "x", "in_out": "input", "semantic_var_id": var_id}]}


async def test_a_small_submit_that_would_render_a_gigabyte_is_a_400_at_once():
    async with running(config()) as (_, http):
        sid, auth = await new_session(http)
        var = await _variable(http, sid, auth, "v" * 100_000)
        before = _maxrss_mb()
        start = time.perf_counter()
        status, reply, _ = await call(http, "POST", "/v1/submit", _many_refs(sid, var, 9_999),
                                      auth)
        assert time.perf_counter() - start < 0.5
        assert status == 400 and reply["error"]["type"] == "PromptTooLongError", reply
        assert "999900000" in reply["error"]["message"]
        assert _maxrss_mb() - before < 50


async def test_a_value_that_arrives_later_fails_the_call_it_would_blow_up():
    async with running(config({"max_prompt_chars": 10_000})) as (_, http):
        sid, auth = await new_session(http)
        var = await _variable(http, sid, auth)  # no value yet: the submit cannot tell
        status, reply, _ = await call(http, "POST", "/v1/submit", _many_refs(sid, var, 100),
                                      auth)
        assert status == 200, reply
        out = reply["placeholders"][-1]["semantic_var_id"]
        status, _, _ = await call(http, "POST", f"/v1/variables/{var}",
                                  {"session_id": sid, "value": "v" * 1_000}, auth)
        assert status == 200
        status, got, _ = await call(http, "POST", "/v1/get",
                                    {"session_id": sid, "semantic_var_id": out}, auth)
        assert status == 424 and "PromptTooLongError" in got["error"]["message"], got


async def test_a_sessions_unfinished_calls_render_a_bounded_total():
    async with running(config({"max_session_prompt_chars": 2_500})) as (server, http):
        sid, auth = await new_session(http)
        var = await _variable(http, sid, auth)  # never set: the calls stay pending
        prompt = "p" * 1_000 + "{{input:x}}{{output:y}}"
        body = {"session_id": sid, "prompt": prompt,
                "placeholders": [{"name": "x", "in_out": "input", "semantic_var_id": var}]}
        for _ in range(2):
            status, _, _ = await call(http, "POST", "/v1/submit", body, auth)
            assert status == 200
        status, reply, resp = await call(http, "POST", "/v1/submit", body, auth)
        assert status == 429 and "max_session_prompt_chars" in reply["error"]["message"]
        assert resp.headers["Retry-After"]
        session = server.manager.sessions.get(sid)
        assert session.prompt_chars.chars == 2_000
        # The pending calls end (their input is set): the session's total is free again.
        await call(http, "POST", f"/v1/variables/{var}", {"session_id": sid, "value": "x"}, auth)
        for out in [b.var_id for c in session.calls.values() for b in c.outputs.values()]:
            await call(http, "POST", "/v1/get", {"session_id": sid, "semantic_var_id": out},
                       auth)
        assert session.prompt_chars.chars == 0
        status, _, _ = await call(http, "POST", "/v1/submit", body, auth)
        assert status == 200
