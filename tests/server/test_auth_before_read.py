"""Authenticate before reading (docs/SECURITY.md): every route decides 401 from the headers,
before a body is read or parsed; an over-limit Content-Length is a 413 at once; another
session answers exactly like an unknown one; a draining server refuses every mutation."""

from __future__ import annotations

import json
import time

from tests.server.front_door import (bearer, call, config, new_session, raw_exchange, running,
                                   split_response)

KEY_A, KEY_B = "tenant-a-key-0123456789", "tenant-b-key-0123456789"
TENANTS = [{"name": "a", "api_key": KEY_A}, {"name": "b", "api_key": KEY_B}]

# Every route that takes a body, with what it needs.
SESSION_ROUTES = ["/v1/submit", "/v1/variables", "/v1/variables/v-0", "/v1/get"]
TENANT_ROUTES = ["/v1/submit_batch", "/v1/completions", "/v1/chat/completions"]
ADMIN_ROUTES = ["/v1/engines"]


async def test_a_malformed_body_without_a_key_is_a_401_not_a_400():
    async with running(config(tenants=TENANTS)) as (_, http):
        for path in SESSION_ROUTES + TENANT_ROUTES + ADMIN_ROUTES:
            for headers in (None, bearer("not-a-key-0123456789")):
                status, reply, _ = await call(http, "POST", path, raw=b"{not json",
                                              headers=headers)
                assert status == 401, (path, reply)


async def test_an_unauthenticated_body_is_never_read():
    """The headers promise 4 MiB that never come: the answer is a 401 at once and the
    connection is closed (waiting for the body would hold it for the body timeout)."""
    async with running(config(tenants=TENANTS)) as (server, _):
        for path in SESSION_ROUTES + TENANT_ROUTES + ADMIN_ROUTES:
            head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {4 << 20}\r\n\r\n{{").encode()
            start = time.perf_counter()
            answer, closed = await raw_exchange(server.url, head, read_timeout=3)
            assert time.perf_counter() - start < 1 and closed, (path, answer[:200])
            assert split_response(answer)[0] == 401, (path, answer[:300])


async def test_an_over_limit_content_length_is_a_413_at_once():
    """In the OpenAI error shape on the OpenAI routes, in Parrot's on its own routes."""
    async with running(config({"max_body_bytes": 65536})) as (server, http):
        sid, auth = await new_session(http)
        for path in ["/v1/submit", "/v1/completions", "/v1/chat/completions", "/v1/sessions"]:
            head = (f"POST {path} HTTP/1.1\r\nHost: x\r\n{auth and ''}Authorization: "
                    f"{auth['Authorization']}\r\nContent-Length: 1000000000000\r\n\r\n").encode()
            start = time.perf_counter()
            answer, closed = await raw_exchange(server.url, head, read_timeout=3)
            assert time.perf_counter() - start < 1 and closed
            status, headers, body = split_response(answer)
            assert status == 413, answer[:300]
            error = json.loads(body)["error"]
            message = "request body of 1000000000000 bytes is over the limit of 65536"
            if "completions" in path:
                assert error == {"message": message, "type": "invalid_request_error",
                                 "param": None, "code": "PayloadTooLargeError"}, path
            else:
                assert (error["type"], error["message"]) == ("PayloadTooLargeError", message)
                assert "param" not in error and "code" not in error


async def test_an_over_limit_body_without_a_length_is_a_413_in_each_routes_shape():
    async with running(config({"max_body_bytes": 65536})) as (_, http):
        sid, auth = await new_session(http)

        async def chunks():  # no Content-Length: the limit is found while reading
            for _ in range(40):
                yield b" " * 4096

        for path in ["/v1/completions", "/v1/chat/completions", "/v1/submit"]:
            async with http.post(path, data=chunks(), headers=auth) as resp:
                error = (await resp.json())["error"]
                assert resp.status == 413, (path, error)
                assert error["type"] == ("invalid_request_error" if "completions" in path
                                         else "PayloadTooLargeError"), path


async def test_models_need_a_key_where_tenants_are_configured():
    async with running(config(tenants=TENANTS)) as (_, http):
        for path in ("/v1/models", "/v1/models/simulated"):
            for headers in (None, bearer("not-a-key-0123456789")):
                async with http.get(path, headers=headers) as resp:
                    assert resp.status == 401, path
                    assert (await resp.json())["error"]["type"] == "authentication_error"
        async with http.get("/v1/models", headers=bearer(KEY_A)) as resp:
            assert resp.status == 200
        _, session_auth = await new_session(http, KEY_B)
        async with http.get("/v1/models", headers=session_auth) as resp:
            assert resp.status == 200  # a session's token (an OpenAI client joining it)
    async with running(config()) as (_, http):  # no tenants: open, as every route is
        async with http.get("/v1/models") as resp:
            assert resp.status == 200


async def test_another_tenants_session_answers_exactly_like_an_unknown_one():
    async with running(config(tenants=TENANTS)) as (_, http):
        sid_a, _ = await new_session(http, KEY_A)
        _, auth_b = await new_session(http, KEY_B)
        unknown = "s-00000000deadbeef"
        requests = [("GET", "/v1/sessions/{}/graph", None), ("GET", "/v1/sessions/{}/stats", None),
                    ("DELETE", "/v1/sessions/{}", None),
                    ("POST", "/v1/submit", {"session_id": "{}", "prompt": "{{output:y}}"}),
                    ("POST", "/v1/get", {"session_id": "{}", "semantic_var_id": "v-1"}),
                    ("POST", "/v1/variables", {"session_id": "{}"}),
                    ("POST", "/v1/completions", {"model": "simulated", "prompt": "x",
                                                 "parrot": {"session_id": "{}"}})]
        for method, path, body in requests:
            answers = []
            for sid in (sid_a, unknown):
                filled = None if body is None else _fill(body, sid)
                status, reply, _ = await call(http, method, path.format(sid), filled, auth_b)
                text = str(reply).replace(sid, "SID")
                answers.append((status, text))
            assert answers[0] == answers[1] and answers[0][0] == 404, (path, answers)


def _fill(body, sid):
    if isinstance(body, dict):
        return {k: _fill(v, sid) for k, v in body.items()}
    return sid if body == "{}" else body


async def test_a_draining_server_refuses_every_mutation():
    async with running(config()) as (server, http):
        sid, auth = await new_session(http)
        _, var, _ = await call(http, "POST", "/v1/variables", {"session_id": sid}, auth)
        server.api.is_draining = True
        mutations = [
            ("/v1/variables", {"session_id": sid, "value": "x"}),
            (f"/v1/variables/{var['semantic_var_id']}", {"session_id": sid, "value": "x"}),
            ("/v1/submit", {"session_id": sid, "prompt": "{{output:y}}"}),
            ("/v1/submit_batch", {"session_id": sid, "calls": [{"prompt": "{{output:y}}"}]}),
            ("/v1/sessions", None),
        ]
        for path, body in mutations:
            status, reply, _ = await call(http, "POST", path, body, auth)
            assert status == 503 and reply["error"]["type"] == "ShuttingDownError", path
        body = {"model": "simulated", "prompt": "x", "max_tokens": 2,
                "parrot": {"session_id": sid}}
        async with http.post("/v1/completions", json=body, headers=auth) as resp:
            assert resp.status == 503, await resp.text()
        server.api.is_draining = False
