"""Overload at the front door: bounded queues (429 + Retry-After), sessions freed on delete,
slow clients dropped, shutdown that answers every waiting `get`."""

from __future__ import annotations

import asyncio
import gc
import json
import weakref

from tests.server.front_door import (SLOW_ENGINE, call, config, new_session, one_call,
                                   raw_exchange, running, split_response)

LONG = {"max_tokens": 2000}   # ~44 s on the simulated engine's default latency
SHORT = {"max_tokens": 3}


async def test_per_session_and_global_queues_answer_429_with_retry_after():
    cfg = config({"max_active_calls_per_session": 3, "max_active_calls": 4,
                  "retry_after_s": 0.01}, engine=SLOW_ENGINE)
    async with running(cfg) as (_, http):
        sid, auth = await new_session(http)
        ids = []
        for _ in range(3):
            status, sub, _ = await call(http, "POST", "/v1/submit",
                                        one_call(sid, sampling=SHORT), auth)
            assert status == 200
            ids.append(sub["placeholders"][-1]["semantic_var_id"])
        status, reply, resp = await call(http, "POST", "/v1/submit", one_call(sid), auth)
        assert (status, reply["error"]["type"]) == (429, "TooManyRequestsError")
        assert resp.headers["Retry-After"] == "1" and "this session" in reply["error"]["message"]
        status, reply, _ = await call(http, "POST", "/v1/submit_batch", {
            "session_id": sid, "calls": [{"prompt": "{{output:a}}"}]}, auth)
        assert status == 429
        other, other_auth = await new_session(http)
        assert (await call(http, "POST", "/v1/submit", one_call(other, sampling=LONG),
                           other_auth))[0] == 200
        status, reply, _ = await call(http, "POST", "/v1/submit", one_call(other), other_auth)
        assert status == 429 and "the service" in reply["error"]["message"]
        for vid in ids:  # the first session's calls finish: it is admitted again
            status, _, _ = await call(http, "POST", "/v1/get",
                                      {"session_id": sid, "semantic_var_id": vid}, auth)
            assert status == 200
        await asyncio.sleep(0.02)
        assert (await call(http, "POST", "/v1/submit", one_call(sid), auth))[0] == 200


async def test_a_batch_that_would_open_a_session_is_held_to_the_same_limits():
    """Without session_id a batch opens its session only when the service admits it: over the
    per-session or the session limit it gets the 429 and opens nothing."""
    cfg = config({"max_active_calls_per_session": 2, "max_sessions": 1, "retry_after_s": 0.01})
    call_a = {"prompt": "{{output:a}}", "sampling": SHORT}
    async with running(cfg) as (server, http):
        status, reply, _ = await call(http, "POST", "/v1/submit_batch", {"calls": [call_a] * 3})
        assert status == 429 and "this session" in reply["error"]["message"]
        assert not server.manager.sessions
        status, reply, _ = await call(http, "POST", "/v1/submit_batch", {"calls": [call_a] * 2})
        assert status == 200 and reply["session"]["session_id"]
        status, reply, _ = await call(http, "POST", "/v1/submit_batch", {"calls": [call_a]})
        assert status == 429 and "sessions" in reply["error"]["message"]
        assert len(server.manager.sessions) == 1


async def test_session_limit_and_waiting_get_limit():
    cfg = config({"max_sessions": 2, "max_waiting_gets_per_session": 1}, engine=SLOW_ENGINE)
    async with running(cfg) as (_, http):
        sid, auth = await new_session(http)
        await new_session(http)
        status, reply, _ = await call(http, "POST", "/v1/sessions")
        assert (status, reply["error"]["type"]) == (429, "TooManyRequestsError")
        _, sub, _ = await call(http, "POST", "/v1/submit", one_call(sid, sampling=LONG), auth)
        get = {"session_id": sid, "semantic_var_id": sub["placeholders"][-1]["semantic_var_id"],
               "timeout": 10}
        waiting = asyncio.create_task(call(http, "POST", "/v1/get", get, auth))
        await asyncio.sleep(0.1)
        status, reply, _ = await call(http, "POST", "/v1/get", get, auth)
        assert status == 429 and "waiting" in reply["error"]["message"]
        waiting.cancel()


async def test_deleting_a_session_frees_it_at_once():
    """Before: the idle-expiry timer held the session, so DELETE freed nothing for an hour."""
    async with running(config()) as (server, http):
        sid, auth = await new_session(http)
        for i in range(4):
            status, _, _ = await call(http, "POST", "/v1/variables", headers=auth, raw=json.dumps({
                "session_id": sid, "name": f"v{i}", "value": "x" * (1 << 20)}).encode())
            assert status == 200
        await call(http, "POST", "/v1/submit", one_call(sid, wait=True), auth)
        session = weakref.ref(server.manager.sessions.find(sid))
        status, _, _ = await call(http, "DELETE", f"/v1/sessions/{sid}", headers=auth)
        assert status == 200
        await asyncio.sleep(0)
        gc.collect()
        assert session() is None


async def test_half_sent_requests_are_dropped():
    """Slowloris: 50 connections that never finish their headers are closed by the server."""
    cfg = config({"request_header_timeout_s": 0.5})
    async with running(cfg) as (server, http):
        partial = b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\nX-Slow: "
        answers = await asyncio.wait_for(asyncio.gather(
            *(raw_exchange(server.url, partial, read_timeout=5) for _ in range(50))), 10)
        assert answers == [(b"", True)] * 50  # closed, well before the read timeout
        status, _, _ = await call(http, "GET", "/healthz")
        assert status == 200


async def test_slow_body_is_408_json():
    cfg = config({"request_body_timeout_s": 0.3})
    async with running(cfg) as (server, _):
        answer, _ = await raw_exchange(server.url, (
            b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n{\"a\":"), read_timeout=2)
        status, headers, body = split_response(answer)
        assert status == 408 and headers["content-type"].startswith("application/json")
        assert json.loads(body)["error"]["type"] == "RequestTimeoutError"


async def test_shutdown_finishes_short_calls_and_answers_long_ones():
    async with running(config({"shutdown_grace_s": 1.5}, engine=SLOW_ENGINE)) as (server, http):
        sid, auth = await new_session(http)
        gets = []
        for sampling in (SHORT, LONG):
            _, sub, _ = await call(http, "POST", "/v1/submit", one_call(sid, sampling=sampling),
                                   auth)
            gets.append(asyncio.create_task(call(http, "POST", "/v1/get", {
                "session_id": sid, "semantic_var_id": sub["placeholders"][-1]["semantic_var_id"],
                "timeout": 60}, auth)))
        await asyncio.sleep(0.05)
        loop = asyncio.get_running_loop()
        started = loop.time()
        shutdown = asyncio.create_task(server.shutdown())
        await asyncio.sleep(0.05)
        status, reply, _ = await call(http, "POST", "/v1/submit", one_call(sid), auth)
        assert (status, reply["error"]["type"]) == (503, "ShuttingDownError")
        assert (await call(http, "POST", "/v1/sessions"))[0] == 503
        short, long_ = await asyncio.wait_for(asyncio.gather(*gets), 10)
        assert short[0] == 200
        assert (long_[0], long_[1]["error"]["type"]) == (503, "ShuttingDownError")
        assert "grace period" in long_[1]["error"]["message"]
        await asyncio.wait_for(shutdown, 10)
        assert 1.4 < loop.time() - started < 5


async def test_openai_requests_count_against_the_service_limit():
    """A completion is unfinished work like a wire submit: past `max_active_calls` the OpenAI
    routes answer 429 (OpenAI's error shape, Retry-After) instead of queueing without bound."""
    cfg = config({"max_active_calls": 2, "retry_after_s": 0.01}, engine=SLOW_ENGINE)
    async with running(cfg) as (_, http):
        sid, auth = await new_session(http)
        for _ in range(2):   # two long calls fill the service
            assert (await call(http, "POST", "/v1/submit", one_call(sid, sampling=LONG),
                               auth))[0] == 200
        body = {"model": "simulated", "prompt": "hello", "max_tokens": 2}
        async with http.post("/v1/completions", json=body) as resp:
            assert resp.status == 429, await resp.text()
            assert resp.headers["Retry-After"] == "1"
            assert "the service" in (await resp.json())["error"]["message"]
