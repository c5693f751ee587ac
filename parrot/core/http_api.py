"""The manager's HTTP server (aiohttp): JSON in, `WireAPI` route table, JSON out.

Every error is JSON `{"error": {"type", "message"}}`; client mistakes get a 4xx status and
never affect other sessions; an unexpected bug answers 500 and the server keeps serving.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Callable, Sequence

from aiohttp import web

from parrot.core.wire import WireAPI
from parrot.errors import InvalidRequestError, ParrotError, PayloadTooLargeError

log = logging.getLogger(__name__)


def bearer_token(request: web.Request) -> str | None:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


async def read_json(request: web.Request, max_body: int) -> Any:
    if not request.can_read_body:
        return None
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise PayloadTooLargeError(f"request body over {max_body} bytes") from None
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidRequestError(f"request body is not valid JSON: {exc}") from None


AppSetup = Callable[[web.Application], None]


def create_app(api: WireAPI, setup: Sequence[AppSetup] = ()) -> web.Application:
    """`setup` callbacks add their own routes and middlewares (the OpenAI front door, /metrics,
    /openapi.json: parrot/core/front_door.py) before the wire API's catch-all route."""
    max_body = api.manager.config.max_body_bytes

    async def dispatch(request: web.Request) -> web.Response:
        try:
            body = await read_json(request, max_body)
            reply = await api.handle(request.method, request.path, body, bearer_token(request))
        except ParrotError as exc:
            return web.json_response(exc.to_wire(), status=exc.status)
        except Exception:  # noqa: BLE001 - a bug answers 500; the server keeps serving
            log.exception("unhandled error in %s %s", request.method, request.path)
            return web.json_response({"error": {"type": "InternalError",
                                                "message": "internal server error"}}, status=500)
        status = 503 if request.path == "/healthz" and reply["status"] != "ok" else 200
        return web.json_response(reply, status=status)

    app = web.Application(client_max_size=max_body)
    for add in setup:
        add(app)
    app.router.add_route("*", "/{tail:.*}", dispatch)
    return app
