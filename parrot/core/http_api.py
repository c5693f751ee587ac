"""The manager's HTTP server (aiohttp): JSON in, `WireAPI` route table, typed replies out as
JSON (their `to_wire()`, here and only here for HTTP).

Every answer that is not a 200 is JSON `{"error": {"type", "message"}}` — the wire API's own
errors, aiohttp's (an unknown route of an added handler, a body over the limit) and even the
protocol layer's (a malformed request line or header, answered before any handler runs). Client
mistakes get a 4xx and never affect other sessions; an unexpected bug answers 500 and the
server keeps serving.

Slow clients are bounded too: a connection must finish a request's headers within
`request_header_timeout_s` of opening (or of its previous answer), and its body within
`request_body_timeout_s`.

More routes (e.g. an OpenAI-compatible API) plug in through `create_app(..., routes=...)`:
plain aiohttp route definitions, matched before the wire API's catch-all, behind the same
JSON-error middleware.
"""

from __future__ import annotations

import asyncio
import logging
from http import HTTPStatus
from typing import Any
from collections.abc import Awaitable, Callable, Iterable, Sequence

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from parrot.core.json_body import parse_json_body
from parrot.core.wire import WireAPI
from parrot.errors import (ParrotError, PayloadTooLargeError,
                           RequestTimeoutError, TooManyRequestsError)
from parrot.wire_types import ErrorDetail, ErrorReply, Health, JsonObject

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# The error type a bare HTTP status is reported as (aiohttp's own errors carry only a status).
_TYPE_OF_STATUS = {400: "InvalidRequestError", 401: "UnauthorizedError", 404: "NotFoundError",
                   405: "MethodNotAllowedError", 408: "RequestTimeoutError",
                   413: "PayloadTooLargeError", 429: "TooManyRequestsError"}


def error_body(status: int, message: str) -> JsonObject:
    kind = _TYPE_OF_STATUS.get(status, "InternalError" if status >= 500 else "HTTPError")
    return ErrorReply(ErrorDetail(kind, message)).to_wire()


def error_headers(exc: ParrotError) -> dict[str, str]:
    """The headers an error's status calls for (Retry-After on a 429), for every API."""
    if isinstance(exc, TooManyRequestsError):
        return {"Retry-After": str(max(1, round(exc.retry_after_s)))}
    return {}


def error_response(exc: ParrotError) -> web.Response:
    resp = web.json_response(ErrorReply.of(exc).to_wire(), status=exc.status,
                             headers=error_headers(exc))
    if isinstance(exc, RequestTimeoutError):
        resp.force_close()  # the rest of the body may still trickle in: drop the connection
    return resp


def bearer_token(request: web.Request) -> str | None:
    """The bearer token, or None. Tokens are ASCII; aiohttp decodes a header's non-UTF-8 bytes
    to surrogates, and such a token is simply not a valid one."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or not token.isascii():
        return None
    return token


async def read_json(request: web.Request, max_body: int, timeout_s: float) -> object:
    if not request.can_read_body:
        return None
    try:
        raw = await asyncio.wait_for(request.read(), timeout_s)
    except web.HTTPRequestEntityTooLarge:
        raise PayloadTooLargeError(f"request body over {max_body} bytes") from None
    except TimeoutError:
        raise RequestTimeoutError(f"request body not received within {timeout_s:g} s") from None
    return parse_json_body(raw)


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error of every route as the wire API's JSON error form."""
    try:
        return await handler(request)
    except ParrotError as exc:
        return error_response(exc)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return web.json_response(error_body(exc.status, exc.reason), status=exc.status)
    except Exception:  # noqa: BLE001 - a bug answers 500; the server keeps serving
        log.exception("unhandled error in %s %s", request.method, request.path)
        return web.json_response(error_body(500, "internal server error"), status=500)


AppSetup = Callable[[web.Application], None]


def create_app(api: WireAPI, setup: Sequence[AppSetup] = (),
               routes: Iterable[web.AbstractRouteDef] = ()) -> web.Application:
    """`setup` callbacks add their own routes and middlewares (the OpenAI front door, /metrics,
    /openapi.json: parrot/core/front_door.py) and `routes` plain routes, all before the wire
    API's catch-all route. The JSON-error middleware is the innermost, so the others (the
    metrics of /metrics) see every error as the response it became."""
    config = api.manager.config
    max_body = config.max_body_bytes

    async def dispatch(request: web.Request) -> web.Response:
        body = await read_json(request, max_body, config.request_body_timeout_s)
        reply = await api.handle(request.method, request.path, body, bearer_token(request))
        status = 503 if isinstance(reply, Health) and reply.status != "ok" else 200
        return web.json_response(reply.to_wire(), status=status)  # the one serialisation

    app = web.Application(client_max_size=max_body)
    for add in setup:
        add(app)
    app.middlewares.append(json_errors)
    app.router.add_routes(list(routes))  # before the catch-all, so they win
    app.router.add_route("*", "/{tail:.*}", dispatch)
    return app


class _JsonErrorHandler(RequestHandler):
    """aiohttp's connection handler, answering its own errors (a malformed request line or
    header, a request it could not parse) as JSON instead of text/plain."""

    def handle_error(self, request: Any, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        # A client's malformed request is its problem: logged at debug level only, so hostile
        # traffic cannot flood the log with tracebacks (aiohttp logs every one as an error).
        if status >= 500:
            self.log_exception("Error handling request from %s", request.remote, exc_info=exc)
        else:
            self.log_debug("bad request from %s: %s", request.remote, message or exc)
        if request.writer.output_size > 0:
            raise ConnectionError("the response was sent already; cannot send an error")
        text = HTTPStatus(status).phrase if status >= 500 or not message else message
        resp = web.json_response(error_body(status, text), status=status)
        resp.force_close()
        return resp


class _JsonErrorServer(web.Server):
    def __call__(self) -> RequestHandler:
        return _JsonErrorHandler(self, loop=self._loop, **self._kwargs)


class JsonAppRunner(web.AppRunner):
    """An AppRunner whose connections answer protocol errors as JSON and drop a client that
    has not finished a request's headers within `header_timeout_s` (aiohttp's keep-alive
    timer is what closes a connection waiting for a request; it is armed when the connection
    opens and after each answer, and does not move while bytes trickle in)."""

    def __init__(self, app: web.Application, header_timeout_s: float, *,
                 shutdown_timeout_s: float = 60.0) -> None:
        super().__init__(app, access_log=None, keepalive_timeout=header_timeout_s,
                         shutdown_timeout=shutdown_timeout_s)

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = _JsonErrorServer  # same state, JSON error answers
        return server
