"""Server-sent events: the streaming form of the OpenAI routes and of Semantic Variables.

Each event is one `data: <json>\\n\\n` line; a stream ends with `data: [DONE]`. An error after
the stream started cannot change the HTTP status any more, so it travels as a last
`data: {"error": {...}}` event before `[DONE]` (as vLLM and OpenAI do).

    GET /v1/variables/{semantic_var_id}/stream?session_id=S[&criteria=latency|throughput]
        (Authorization: Bearer <token>)

streams a variable's value as it is generated: `data: {"text": "<piece>"}` events, then
`[DONE]`. The pieces concatenate to the value.
"""

from __future__ import annotations

import json
import re
from typing import Any
from collections.abc import AsyncGenerator, Mapping

from aiohttp import web

from parrot.manager.manager import Manager
from parrot.manager.streams import check_waiting_limit, follow_as_get
from parrot.errors import InvalidRequestError, NotFoundError, ParrotError, UnauthorizedError
from parrot.types import Criterion

DONE = b"data: [DONE]\n\n"


async def open_stream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})
    await response.prepare(request)
    return response


async def send(response: web.StreamResponse, payload: dict[str, Any]) -> None:
    await response.write(b"data: " + json.dumps(payload, separators=(",", ":")).encode()
                         + b"\n\n")


async def finish(response: web.StreamResponse) -> None:
    await response.write(DONE)
    await response.write_eof()


def is_disconnect(exc: BaseException) -> bool:
    """Writing to a client that went away (aiohttp raises a ConnectionResetError)."""
    return isinstance(exc, ConnectionError)


_STREAM_PATH = re.compile(r"/v1/variables/(?P<vid>[^/]+)/stream")


async def variable_events(manager: Manager, path: str, query: Mapping[str, str],
                          token: str | None) -> AsyncGenerator[dict[str, Any], None]:
    """The events of `GET /v1/variables/{vid}/stream` (for the HTTP route and the in-process
    transport alike): `{"text": piece}`..., or a last `{"error": ...}` event. A bad request
    (unknown session or variable, wrong token) raises before the first event."""
    match = _STREAM_PATH.fullmatch(path)
    if match is None:
        raise NotFoundError(f"no such stream: {path}")
    if manager.sessions.by_token(token) is None:  # who asks, before what is asked
        raise UnauthorizedError("missing or wrong bearer token (a session's token)")
    session_id = query.get("session_id")
    if not session_id:
        raise InvalidRequestError("stream: query parameter 'session_id' is required")
    session = manager.authenticate(session_id, token)
    var = session.variable(match["vid"])
    criterion = Criterion.parse(query.get("criteria", "latency"))
    check_waiting_limit(manager, session, var)  # a 429 before the stream opens
    try:
        async for piece in follow_as_get(manager, session, var, criterion):
            yield {"text": piece}
    except ParrotError as exc:
        yield exc.to_wire()


class VariableStreamRoute:
    """`GET /v1/variables/{vid}/stream`: a Semantic Variable's value as it is generated."""

    def __init__(self, manager: Manager) -> None:
        self.manager = manager

    def setup(self, app: web.Application) -> None:
        app.router.add_get("/v1/variables/{vid}/stream", self.stream)

    async def stream(self, request: web.Request) -> web.StreamResponse:
        from parrot.server.http_api import bearer_token

        events = variable_events(self.manager, request.path, request.query,
                                 bearer_token(request))
        try:
            first = await anext(events, None)  # bad requests keep their HTTP status
        except ParrotError as exc:
            return web.json_response(exc.to_wire(), status=exc.status)
        response = await open_stream(request)
        try:
            event = first
            while event is not None:
                await send(response, event)
                event = await anext(events, None)
            await finish(response)
        except Exception as exc:
            if not is_disconnect(exc):
                raise
        finally:
            await events.aclose()
        return response
