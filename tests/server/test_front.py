"""The HTTP app's one middleware (`http_api.Front`) and the wire API's shortcuts for small
requests: each answers exactly as the longer way it stands in for."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from collections.abc import AsyncIterator
from unittest import mock

import pytest
from aiohttp import StreamReader, web
from aiohttp.test_utils import TestClient, TestServer, make_mocked_request

from parrot.errors import TooManyRequestsError
from parrot.manager.manager import Manager
from parrot.policies.registry import default_registry
from parrot.serve_config import ManagerConfig
from parrot.server.http_api import FRONT, create_app, read_json
from parrot.server.json_body import parse_json_body
from parrot.server.off_loop import OFF_LOOP_BYTES
from parrot.server.openai_api import openai_error
from parrot.server.wire_routes import WireAPI

MAX_BODY = 4096


# --- read_json: a body buffered whole is read as request.read() reads it -------------------

def _request(chunks: list[bytes], *, eof: bool, max_body: int = MAX_BODY) -> web.Request:
    """A POST whose body is `chunks`, all buffered (`eof`: the end fed too, as when the
    whole body came with the headers) or still coming (the end is fed on the next turn)."""
    payload = StreamReader(mock.Mock(), 2 ** 16, loop=asyncio.get_running_loop())
    for chunk in chunks:
        payload.feed_data(chunk)
    if eof:
        payload.feed_eof()
    else:
        asyncio.get_running_loop().call_soon(payload.feed_eof)
    return make_mocked_request("POST", "/v1/get", payload=payload, client_max_size=max_body,
                               headers={"Content-Type": "application/json"})


async def _read_both(chunks: list[bytes], max_body: int = MAX_BODY) -> tuple[Any, Any]:
    """read_json's answer (or error) for the body buffered whole, and for it still coming."""
    answers = []
    for eof in (True, False):
        request = _request(chunks, eof=eof, max_body=max_body)
        assert request.content.is_eof() is eof  # each way taken as meant
        try:
            answers.append(await read_json(request, max_body, timeout_s=5))
        except Exception as exc:  # noqa: BLE001 - compared: the same error either way
            answers.append((type(exc).__name__, str(exc)))
    return answers[0], answers[1]


@pytest.mark.parametrize("chunks", [
    [b'{"session_id": "s-1", "semantic_var_id": "v-2"}'],
    [b'{"session_id": ', b'"s-1", "semantic_var_id"', b': "v-2"}'],   # several segments
    [b"[1, 2.5, ", b'"\\u00e9", null]'],
    [b""], [b"  \r\n "],                                                # no body: None
    [b'{"a": "' + b"y" * (OFF_LOOP_BYTES + 10), b'"}'],                  # big: beside the loop
])
async def test_a_buffered_body_reads_as_a_streamed_one(chunks):
    whole, streamed = await _read_both(chunks, max_body=4 * OFF_LOOP_BYTES)
    assert whole == streamed == parse_json_body(b"".join(chunks))


@pytest.mark.parametrize("chunks", [[b"{not json"], [b'{"a": ', b"NaN}"], [b"\xff\xfe"],
                                    [b'{"a": "' + b"y" * OFF_LOOP_BYTES, b'"']])
async def test_a_bad_buffered_body_is_the_same_400(chunks):
    whole, streamed = await _read_both(chunks, max_body=4 * OFF_LOOP_BYTES)
    assert whole == streamed and whole[0] == "InvalidRequestError", whole


async def test_a_buffered_body_over_the_limit_is_the_same_413():
    """A body without a Content-Length (chunked) that came whole and is over the limit: the
    same 413 as request.read() gives one still coming; at the limit it is read."""
    over = [b'{"a": "', b"z" * MAX_BODY, b'"}']
    whole, streamed = await _read_both(over)
    assert whole == streamed == ("PayloadTooLargeError", f"request body over {MAX_BODY} bytes")
    at_limit = [b'{"a": "', b"z" * (MAX_BODY - 9), b'"}']
    assert len(b"".join(at_limit)) == MAX_BODY
    whole, streamed = await _read_both(at_limit)
    assert whole == streamed == {"a": "z" * (MAX_BODY - 9)}


# --- Front: one middleware for the errors, the 413 and the request observer ----------------

@pytest.fixture
async def front_app() -> AsyncIterator[tuple[TestClient, list[tuple[str, int]]]]:
    """The wire API's app with a few routes that fail each way, an OpenAI-shaped route, and
    an observer that records (path, status) of every request."""
    manager = Manager(default_registry().create("least_queue", {}),
                      ManagerConfig(max_body_bytes=MAX_BODY))
    await manager.start()
    seen: list[tuple[str, int]] = []

    async def fail(request: web.Request) -> web.StreamResponse:
        kind = request.match_info["kind"]
        if kind == "redirect":
            raise web.HTTPFound("/elsewhere")
        if kind == "gone":
            raise web.HTTPGone()
        if kind == "busy":
            raise TooManyRequestsError("busy", 2.4)
        if kind == "ok":
            return web.json_response({"ok": True}, status=201)
        raise RuntimeError("a bug")

    async def openai_route(request: web.Request) -> web.StreamResponse:
        return web.json_response({"read": len(await request.read())})

    def setup(app: web.Application) -> None:
        app.router.add_route("*", "/t/{kind}", fail)
        resource = app.router.add_post("/openai-shaped", openai_route).resource
        assert resource is not None
        app[FRONT].error_shape(resource, openai_error)
        app[FRONT].observe(lambda request, status, seconds: seen.append((request.path, status)))

    try:
        app = create_app(WireAPI(manager), [setup])
        async with TestClient(TestServer(app)) as http:
            yield http, seen
    finally:
        await manager.close()


async def test_every_error_is_the_wire_apis_json_and_observed_as_answered(front_app):
    http, seen = front_app
    expected = {"/t/ok": (201, None), "/t/gone": (410, "HTTPError"),
                "/t/busy": (429, "TooManyRequestsError"), "/t/bug": (500, "InternalError"),
                "/v1/nope": (404, "NotFoundError")}
    for path, (status, kind) in expected.items():
        async with http.post(path) as resp:
            assert resp.status == status, path
            assert resp.headers["Content-Type"] == "application/json; charset=utf-8", path
            body = await resp.json()
            if kind is not None:
                assert body["error"]["type"] == kind, (path, body)
            if status == 429:
                assert resp.headers["Retry-After"] == "2"
    async with http.post("/t/redirect", allow_redirects=False) as resp:
        assert resp.status == 302  # not an error: raised through, as aiohttp answers it
    assert seen == [(path, status) for path, (status, _) in expected.items()] + [
        ("/t/redirect", 302)]


async def test_an_over_limit_length_is_a_413_in_the_routes_shape_and_closes(front_app):
    http, seen = front_app
    body = b"x" * (MAX_BODY + 1)
    message = f"request body of {MAX_BODY + 1} bytes is over the limit of {MAX_BODY}"
    for path in ("/openai-shaped", "/t/ok", "/v1/submit"):
        async with http.post(path, data=body) as resp:
            assert resp.status == 413, path
            assert resp.headers.get("Connection", "").lower() == "close", path
            error = (await resp.json())["error"]
            if path == "/openai-shaped":
                assert error == {"message": message, "type": "invalid_request_error",
                                 "param": None, "code": "PayloadTooLargeError"}
            else:
                assert error == {"type": "PayloadTooLargeError", "message": message}, path
    async with http.post("/openai-shaped", data=b"x" * MAX_BODY) as resp:  # at the limit
        assert (resp.status, await resp.json()) == (200, {"read": MAX_BODY})
    assert seen == [("/openai-shaped", 413), ("/t/ok", 413), ("/v1/submit", 413),
                    ("/openai-shaped", 200)]


async def test_a_request_without_an_answer_is_observed_as_500(front_app):
    """A handler cancelled (its client went away) answers nothing: counted as a 500, and the
    cancellation goes on."""
    http, seen = front_app
    front = http.server.app[FRONT]

    async def cancelled(request: web.Request) -> web.StreamResponse:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await front.middleware(make_mocked_request("POST", "/t/gone-away"), cancelled)
    assert seen == [("/t/gone-away", 500)]


async def test_a_wire_reply_is_compact_utf8_json_with_its_content_type(front_app):
    """The reply built from bytes and prebuilt headers is what `text=` + `content_type=`
    made: the same Content-Type, json.dumps's text, UTF-8."""
    http, _ = front_app
    async with http.post("/v1/sessions") as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "application/json; charset=utf-8"
        raw = await resp.read()
    assert raw == json.dumps(json.loads(raw)).encode()
    async with http.get("/healthz") as resp:
        assert resp.headers["Content-Type"] == "application/json; charset=utf-8"
        assert (await resp.json())["status"] == "ok"
