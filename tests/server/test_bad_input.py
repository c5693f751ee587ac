"""Bad input at the front door: every one is a JSON 4xx (never a 500), and the service goes on.

Each case is a reproduction of a request that answered 500, text/plain or the wrong status.
"""

from __future__ import annotations

import json

import pytest

from tests.server.front_door import (bearer, call, config, new_session, one_call, raw_exchange,
                                   running, split_response)


@pytest.fixture
async def service():
    async with running(config()) as (server, http):
        yield server, http


async def _healthy(http) -> None:
    status, reply, _ = await call(http, "GET", "/healthz")
    assert status == 200 and reply["status"] == "ok"


@pytest.mark.parametrize("raw, message", [
    (b'{"session_id": "s", "n": ' + b"9" * 5000 + b"}", "at most 20 digits"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b'{"session_id": "s", "x": NaN}', "NaN"),
    (b'{"session_id": "\xff\xfe"}', "not UTF-8"),
    (b'{"session_id": "s", "prompt": "\\ud800 {{output:y}}"}', "lone surrogate"),
    (b'{"session_id": "s", "placeholders": [{"value": "\\udfff"}]}', "lone surrogate"),
    (b'{"session_id": "s", "\\ud83d": 1}', "lone surrogate"),
    # a byte-order mark is refused as json.loads refuses it (the body is one shared decoder's)
    (b'\xef\xbb\xbf{"session_id": "s"}', "Unexpected UTF-8 BOM (decode using utf-8-sig)"),
])
async def test_hostile_bodies_are_400_json(service, raw, message):
    _, http = service
    sid, auth = await new_session(http)
    raw = raw.replace(b'"s"', json.dumps(sid).encode(), 1)
    status, reply, _ = await call(http, "POST", "/v1/submit", headers=auth, raw=raw)
    assert (status, reply["error"]["type"]) == (400, "InvalidRequestError")
    assert message in reply["error"]["message"]
    await _healthy(http)


async def test_escaped_surrogate_pair_is_fine(service):
    _, http = service
    sid, auth = await new_session(http)
    body = json.dumps(one_call(sid, value="smile \U0001F600", wait=True)).encode()
    assert b"\\ud83d\\ude00" in body  # json.dumps escapes it as a pair
    status, reply, _ = await call(http, "POST", "/v1/submit", headers=auth, raw=body)
    assert status == 200, reply


async def test_lone_surrogate_through_the_value_route(service):
    _, http = service
    sid, auth = await new_session(http)
    raw = b'{"session_id": %s, "name": "v", "value": "a\\udc80b"}' % json.dumps(sid).encode()
    status, reply, _ = await call(http, "POST", "/v1/variables", headers=auth, raw=raw)
    assert status == 400 and "surrogate" in reply["error"]["message"]


async def test_non_utf8_bearer_token_is_401_json(service):
    server, _ = service
    answer, _ = await raw_exchange(server.url, (
        b"POST /v1/variables HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xff\xfe\x80\r\n"
        b"Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"))
    status, headers, body = split_response(answer)
    assert status in (400, 401) and headers["content-type"].startswith("application/json")
    assert "error" in json.loads(body)


async def test_malformed_request_line_is_answered_in_json(service):
    server, _ = service
    answer, _ = await raw_exchange(server.url, b"GET /healthz HTTP/1.1 extra junk\r\n\r\n")
    status, headers, body = split_response(answer)
    assert status == 400 and headers["content-type"].startswith("application/json")
    assert json.loads(body)["error"]["type"] == "InvalidRequestError"


async def test_wrong_method_is_405_json(service):
    _, http = service
    status, reply, _ = await call(http, "GET", "/v1/submit")
    assert (status, reply["error"]["type"]) == (405, "MethodNotAllowedError")
    status, reply, _ = await call(http, "PUT", "/v1/sessions")
    assert status == 405
    # every method a path has is named, in the route table's order
    status, reply, _ = await call(http, "DELETE", "/v1/engines")
    assert status == 405
    assert reply["error"]["message"] == "DELETE is not allowed on /v1/engines; use ['GET', 'POST']"
    status, reply, _ = await call(http, "PUT", "/v1/sessions/s-1/graph")
    assert status == 405 and reply["error"]["message"].endswith("use ['GET']")
    status, reply, _ = await call(http, "POST", "/v1/submit/")
    assert (status, reply["error"]["type"]) == (404, "NotFoundError")


async def test_batch_ref_call_true_is_not_call_1(service):
    _, http = service
    sid, auth = await new_session(http)
    status, reply, _ = await call(http, "POST", "/v1/submit_batch", {"session_id": sid, "calls": [
        {"prompt": "A {{output:a}}"}, {"prompt": "B {{output:b}}"},
        {"prompt": "C {{input:a}} {{output:c}}",
         "placeholders": [{"name": "a", "in_out": "input", "ref": {"call": True,
                                                                   "output": "b"}}]}]}, auth)
    assert status == 200
    assert reply["results"][2]["error"]["type"] == "InvalidRequestError"


async def test_max_tokens_over_the_engine_window_is_refused(service):
    _, http = service
    sid, auth = await new_session(http)
    body = one_call(sid, sampling={"max_tokens": 1_000_000})
    status, reply, _ = await call(http, "POST", "/v1/submit", body, auth)
    assert status == 400 and "over the limit of 8192" in reply["error"]["message"]
    body = one_call(sid)
    body["placeholders"].append({"name": "y", "in_out": "output",
                                 "sampling": {"max_tokens": 9000}})
    status, reply, _ = await call(http, "POST", "/v1/submit", body, auth)
    assert status == 400
    status, _, _ = await call(http, "POST", "/v1/submit",
                              one_call(sid, sampling={"max_tokens": 8192}), auth)
    assert status == 200


async def test_configured_output_token_cap():
    async with running(config({"max_output_tokens": 100})) as (_, http):
        sid, auth = await new_session(http)
        status, reply, _ = await call(http, "POST", "/v1/submit",
                                      one_call(sid, sampling={"max_tokens": 101}), auth)
        assert status == 400 and reply["error"]["message"] == (
            "output 'y': max_tokens=101 exceeds manager.max_output_tokens (100): over the "
            "limit of 100")


@pytest.mark.parametrize("transform, value", [
    ({"type": "regex", "pattern": "(zzz)|", "group": 1}, "abc"),
    ("parse_json", "[" * 5000),
    ({"type": "regex", "pattern": "(a|aa)+$"}, "a" * 60 + "b"),
])
async def test_failing_input_transform_fails_the_call_cleanly(service, transform, value):
    """The call fails (424 on its get, not pending forever, not 500); `set` answers 200."""
    _, http = service
    sid, auth = await new_session(http)
    _, var, _ = await call(http, "POST", "/v1/variables", {"session_id": sid, "name": "v"}, auth)
    vid = var["semantic_var_id"]
    status, sub, _ = await call(http, "POST", "/v1/submit", {
        "session_id": sid, "prompt": "{{input:x}} {{output:y}}",
        "placeholders": [{"name": "x", "in_out": "input", "semantic_var_id": vid,
                          "transforms": [transform]}]}, auth)
    assert status == 200
    status, reply, _ = await call(http, "POST", f"/v1/variables/{vid}",
                                  {"session_id": sid, "value": value}, auth)
    assert status == 200, reply
    out = sub["placeholders"][-1]["semantic_var_id"]
    for _ in range(2):
        status, reply, _ = await call(http, "POST", "/v1/get", {
            "session_id": sid, "semantic_var_id": out, "timeout": 5}, auth)
        assert (status, reply["error"]["type"]) == (424, "CallFailedError")
        assert "transform failed" in reply["error"]["message"]
    await _healthy(http)


async def test_failing_output_transform_fails_the_call_cleanly(service):
    _, http = service
    sid, auth = await new_session(http)
    body = one_call(sid)
    body["placeholders"].append({"name": "y", "in_out": "output", "transforms": [
        {"type": "regex", "pattern": "(zzz)|", "group": 1}]})
    status, sub, _ = await call(http, "POST", "/v1/submit", body, auth)
    status, reply, _ = await call(http, "POST", "/v1/get", {
        "session_id": sid, "semantic_var_id": sub["placeholders"][-1]["semantic_var_id"],
        "timeout": 5}, auth)
    assert (status, reply["error"]["type"]) == (424, "CallFailedError")


async def test_unknown_session_path_and_garbage_token(service):
    _, http = service
    status, reply, _ = await call(http, "GET", "/v1/sessions/%00%ff/graph",
                                  headers=bearer("x" * 40))
    assert status == 401  # the token is no session's: refused before the path is looked up


# Digit limits on every integer field: a huge integer is a 400 wherever it is sent, decided
# once when the body is parsed (json_body.MAX_INT_DIGITS), not field by field.
HUGE = "9" * 4000


@pytest.mark.parametrize("path, body", [
    ("/v1/get", f'{{"session_id": "SID", "semantic_var_id": "v-1", "timeout": {HUGE}}}'),
    ("/v1/get", '{"session_id": "SID", "semantic_var_id": "v-1", "timeout": 1e999}'),
    ("/v1/submit", '{"session_id": "SID", "prompt": "{{output:y}}", '
                   f'"sampling": {{"top_k": {HUGE}}}}}'),
    ("/v1/submit", '{"session_id": "SID", "prompt": "{{output:y}}", '
                   f'"sampling": {{"stop_token_ids": [{HUGE}]}}}}'),
    ("/v1/submit", '{"session_id": "SID", "prompt": "{{output:y}}", '
                   '"sampling": {"seed": -%s}}' % ("9" * 21)),
    ("/v1/completions", f'{{"model": "simulated", "prompt": "x", "top_k": {HUGE}}}'),
    ("/v1/completions", f'{{"model": "simulated", "prompt": "x", "max_tokens": {HUGE}}}'),
    ("/v1/chat/completions", '{"model": "simulated", "messages": [{"role": "user", '
                             f'"content": "x"}}], "n": {HUGE}}}'),
])
async def test_huge_integers_are_400_everywhere(service, path, body):
    _, http = service
    sid, auth = await new_session(http)
    status, reply, _ = await call(http, "POST", path, headers=auth,
                                  raw=body.replace("SID", sid).encode())
    assert status == 400, reply
    assert len(json.dumps(reply)) < 1000  # the number is not echoed back
    await _healthy(http)


@pytest.mark.parametrize("sampling, message", [
    ({"stop_token_ids": list(range(65))}, "at most 64"),
    ({"stop_token_ids": [2**31]}, "at most 64 integers in"),
    ({"top_k": 1_000_001}, "top_k"),
    ({"stop": ["s"] * 17}, "at most 16"),
])
async def test_every_list_and_integer_in_sampling_is_capped(service, sampling, message):
    _, http = service
    sid, auth = await new_session(http)
    status, reply, _ = await call(http, "POST", "/v1/submit",
                                  one_call(sid, sampling=sampling), auth)
    assert status == 400 and message in reply["error"]["message"], reply
