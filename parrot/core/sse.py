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
from typing import Any

from aiohttp import web

from parrot.core.manager import Manager
from parrot.core.streams import follow_as_get
from parrot.errors import InvalidRequestError, ParrotError
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


class VariableStreamRoute:
    """`GET /v1/variables/{vid}/stream`: a Semantic Variable's value as it is generated."""

    def __init__(self, manager: Manager) -> None:
        self.manager = manager

    def setup(self, app: web.Application) -> None:
        app.router.add_get("/v1/variables/{vid}/stream", self.stream)

    async def stream(self, request: web.Request) -> web.StreamResponse:
        from parrot.core.http_api import bearer_token

        try:
            session_id = request.query.get("session_id")
            if not session_id:
                raise InvalidRequestError("stream: query parameter 'session_id' is required")
            session = self.manager.authenticate(session_id, bearer_token(request))
            var = session.variable(request.match_info["vid"])
            criterion = Criterion.parse(request.query.get("criteria", "latency"))
        except ParrotError as exc:
            return web.json_response(exc.to_wire(), status=exc.status)
        response = await open_stream(request)
        try:
            try:
                async for piece in follow_as_get(self.manager, session, var, criterion):
                    await send(response, {"text": piece})
            except ParrotError as exc:
                await send(response, exc.to_wire())
            await finish(response)
        except Exception as exc:
            if not is_disconnect(exc):
                raise
        return response
