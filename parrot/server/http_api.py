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
one middleware (`Front`: JSON errors, the 413 of an over-limit length, request metrics).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from http import HTTPStatus
from typing import Any
from collections.abc import Awaitable, Callable, Iterable, Sequence

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_urldispatcher import AbstractResource
from multidict import CIMultiDict, CIMultiDictProxy

from parrot.manager.admission import CALLS_PER_SLICE
from parrot.server.json_body import parse_json_body
from parrot.server.off_loop import OFF_LOOP_BYTES, beside_loop, serving_http
from parrot.server.wire_routes import WireAPI
from parrot.errors import (ParrotError, PayloadTooLargeError,
                           RequestTimeoutError, TooManyRequestsError)
from parrot.wire_types import BatchReply, ErrorDetail, ErrorReply, Health, JsonObject

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# The error type a bare HTTP status is reported as (aiohttp's own errors carry only a status).
_TYPE_OF_STATUS = {400: "InvalidRequestError", 401: "UnauthorizedError", 404: "NotFoundError",
                   405: "MethodNotAllowedError", 408: "RequestTimeoutError",
                   413: "PayloadTooLargeError", 429: "TooManyRequestsError"}


# json.dumps as it writes every reply, without its cycle check: a reply's wire form is a tree
# that to_wire builds anew, never cyclic (a cycle would be a bug either way: a 500).
_encode = json.JSONEncoder(check_circular=False).encode

# A reply's headers, built once (read-only): aiohttp copies them into each reply, where
# `text=` with `content_type=` would check, join and encode them anew every time. The same
# header as those made.
_JSON_HEADERS = CIMultiDictProxy(CIMultiDict({"Content-Type": "application/json; charset=utf-8"}))


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
        if request.content.is_eof():
            # The whole body came with the headers (a small one nearly always): it is all in
            # the buffer already, taken in one piece (no read loop, no copy into a bytearray
            # and out; no timer and no task for wait_for).
            raw = request.content.read_nowait()
            if not request.content.at_eof():  # (never seen: the end was fed after the data)
                raw += await request.read()
        else:
            raw = await asyncio.wait_for(request.read(), timeout_s)
    except web.HTTPRequestEntityTooLarge:  # request.read(): over the app's client_max_size
        raise _body_too_large(max_body) from None
    except TimeoutError:
        raise RequestTimeoutError(f"request body not received within {timeout_s:g} s") from None
    if len(raw) > max_body:  # a buffered body, held to the limit as request.read() holds it
        raise _body_too_large(max_body)
    if len(raw) < OFF_LOOP_BYTES:  # a small body is parsed here: no coroutine for the hop
        return parse_json_body(raw)
    return await beside_loop(True, lambda: parse_json_body(raw))


def _body_too_large(max_body: int) -> PayloadTooLargeError:
    return PayloadTooLargeError(f"request body over {max_body} bytes")


# What the front door's parts plug into the one middleware (`Front`): an observer of every
# answered request (the request, its status, its seconds: /metrics and the access log), and
# the error shape of a route whose 413 is not in the wire API's (the OpenAI routes').
RequestObserver = Callable[[web.Request, int, float], None]
ErrorShape = Callable[[ParrotError], web.Response]


class Front:
    """The app's one middleware: every error as the wire API's JSON error form, a 413 at once
    to a request whose Content-Length is over the limit (before any route, authentication or
    read: waiting for the body would hold the connection until the body timeout), and every
    request observed once answered (`observe`: the metrics and the access log).

    One middleware for all of it, not one per concern: each middleware is a layer of calls
    (a partial, a coroutine, a frame) on every request, and aiohttp adds one of its own
    (`_fix_request_current_app`) whenever there is any."""

    def __init__(self, max_body: int) -> None:
        self.max_body = max_body
        self._observers: list[RequestObserver] = []
        self._shapes: dict[AbstractResource | None, ErrorShape] = {}

    def observe(self, observer: RequestObserver) -> None:
        """Call `observer(request, status, seconds)` after every request: with the answer's
        status, the status of a redirect raised, or 500 where none came (the client went
        away, cancelling the handler)."""
        self._observers.append(observer)

    def error_shape(self, resource: AbstractResource, shape: ErrorShape) -> None:
        """Answer the 413 of an over-limit Content-Length on `resource` with `shape` (the
        route's own error form) instead of the wire API's."""
        self._shapes[resource] = shape

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        observers = self._observers
        started = time.perf_counter() if observers else 0.0
        status = 500  # no answer: the handler was cancelled (client gone) or did not return
        try:
            length = request.content_length
            if length is not None and length > self.max_body:
                response: web.StreamResponse = self._too_large(request, length)
            else:
                try:
                    response = await handler(request)
                except ParrotError as exc:
                    response = error_response(exc)
                except web.HTTPException as exc:
                    if exc.status < 400:
                        status = exc.status
                        raise
                    response = web.json_response(error_body(exc.status, exc.reason),
                                                 status=exc.status)
                except Exception:  # noqa: BLE001 - a bug answers 500; the server keeps serving
                    log.exception("unhandled error in %s %s", request.method, request.path)
                    response = web.json_response(error_body(500, "internal server error"),
                                                 status=500)
            status = response.status
            return response
        finally:
            if observers:
                seconds = time.perf_counter() - started
                for observe in observers:
                    observe(request, status, seconds)

    def _too_large(self, request: web.Request, length: int) -> web.Response:
        shape = self._shapes.get(request.match_info.route.resource, error_response)
        resp = shape(PayloadTooLargeError(
            f"request body of {length} bytes is over the limit of {self.max_body}"))
        resp.force_close()
        return resp


# The app's `Front`: the front door's setups plug their observer and error shapes into it.
FRONT = web.AppKey("parrot_front", Front)


AppSetup = Callable[[web.Application], None]


def create_app(api: WireAPI, setup: Sequence[AppSetup] = (),
               routes: Iterable[web.AbstractRouteDef] = ()) -> web.Application:
    """`setup` callbacks add their own routes (the OpenAI front door, /metrics, /openapi.json:
    parrot/server/front_door.py) and plug into the app's `Front` (`app[FRONT]`: the request
    observer of /metrics, the OpenAI routes' 413 shape), and `routes` plain routes, all before
    the wire API's routes. An observer sees every error as the response it became."""
    config = api.manager.config
    max_body = config.max_body_bytes

    async def dispatch(request: web.Request) -> web.Response:
        # Who asks, from the headers, before the body is read: a client without the right
        # token costs no body read, no parse (401/404/405 here).
        serving_http()  # big bodies are parsed and decoded beside the loop
        route = api.admit(request.method, request.path, bearer_token(request))
        body = await read_json(request, max_body, config.request_body_timeout_s)
        reply = await route(body)
        status = 503 if isinstance(reply, Health) and reply.status != "ok" else 200
        big = isinstance(reply, BatchReply) and len(reply.results) >= CALLS_PER_SLICE
        # The one serialisation: a small reply here, without the coroutine of a hop.
        text = (await beside_loop(True, lambda: _encode(reply.to_wire())) if big
                else _encode(reply.to_wire()))
        return web.Response(body=text.encode(), status=status, headers=_JSON_HEADERS)

    app = web.Application(client_max_size=max_body)
    front = app[FRONT] = Front(max_body)
    for add in setup:
        add(app)
    app.middlewares.append(front.middleware)
    app.router.add_routes(list(routes))  # before the wire API's, so they win
    # The wire API's paths without parameters as routes of their own: aiohttp finds them at
    # its first lookup (a catch-all is its last), and /metrics labels them by that route.
    for path in api.plain_paths:
        app.router.add_route("*", path, dispatch)
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
        # lingering_time=0: a request answered without its body being read (refused from its
        # headers: 401, 413, ...) closes its connection at once. aiohttp's default reads and
        # discards the unread body for up to 10 s to keep the connection alive, which would
        # let an unauthenticated client make the manager read whatever it sends.
        # handler_cancellation: a client that goes away cancels its request's handler, so what
        # the request started is cancelled all the way down (an OpenAI completion's private
        # session is deleted and its engine requests aborted; a waiting `get` stops waiting).
        super().__init__(app, access_log=None, keepalive_timeout=header_timeout_s,
                         lingering_time=0, handler_cancellation=True,
                         shutdown_timeout=shutdown_timeout_s)

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = _JsonErrorServer  # same state, JSON error answers
        return server
