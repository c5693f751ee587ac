"""The engine process's HTTP face: an aiohttp app that serves any `Engine`.

Routes (JSON bodies are the protocol dataclasses' `to_json` forms):

    POST /v1/engine/fill          FillRequest                 -> FillResult
    POST /v1/engine/generate      GenerateRequest + "stream"  -> {text, token_ids, finish_reason}
                                  stream=true: NDJSON, one GenerateChunk per line; an error after
                                  the first line becomes a last line {"error": {type, message}}
    POST /v1/engine/free_context  {context_id}                -> {context_id}
    POST /v1/engine/batch         {ops: [{id, fill|generate|free}]} -> NDJSON, per line
                                  {events: [...]}: every op's events tagged by its id,
                                  coalesced while the stream is busy (batch_server.py)
    POST /v1/engine/abort         {ids}                       -> {aborted}: single batch ops
    GET  /v1/engine/stats                                     -> EngineStats
    GET  /v1/engine/info                                      -> EngineInfo
    GET  /healthz                                             -> {ok: true} (503 when unhealthy)

Authentication: with a `secret`, every /v1/engine/* route needs `Authorization: Bearer <secret>`
(401 JSON otherwise); only the liveness probe /healthz is open. parrot-serve gives each engine it
launches its own secret, and an engine joining by URL hands its secret over at registration, so
nobody else on the network can fill, generate into or free an engine's contexts.

A Generate whose max_tokens exceeds the engine's context window is refused up front (400): it
could never finish as asked and would hold a batch slot until the window fills.

Connections (`GuardedRunner`, what parrot-engine serves with): an engine's port may be
reachable by anyone on the host, so an unauthenticated client must cost it O(1). A connection
that has not presented the secret in a request within `first_request_timeout_s` of opening is
closed; a request with a wrong secret is answered 401 and its connection closed (its body is
never read); at most `max_unauthenticated` connections wait for their first request at once
(a new one closes the oldest), and at most `max_connections` are open in all. Connections that
presented the secret (the manager's pool) keep aiohttp's keep-alive. A body must arrive within
`body_timeout_s` (408).

Errors are `{"error": {"type", "message"}}` with the error's status (parrot.errors); malformed
JSON is 400, a body over `max_body_bytes` 413, anything unexpected 500. The server never dies
on bad input.
"""

from __future__ import annotations

import asyncio
import collections
import hmac
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, cast

from aiohttp import web
from aiohttp.typedefs import Middleware
from aiohttp.web_protocol import RequestHandler

from parrot.engines.batch_server import BatchRoutes
from parrot.engines.batch_wire import ABORT_PATH, BATCH_PATH, FreeRequest
from parrot.engines.protocol import Engine, FillRequest, GenerateChunk
from parrot.engines.server_io import (BODY_TIMEOUT_KEY, BODY_TIMEOUT_S, NDJSON, ContextWindow,
                                      is_disconnect, json_body, ndjson_line, parse,
                                      parse_generate)
from parrot.errors import (InvalidRequestError, NotFoundError, ParrotError,
                           PayloadTooLargeError, RequestTimeoutError, UnauthorizedError)

log = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
FIRST_REQUEST_TIMEOUT_S = 5.0   # a new connection must present the secret within this
# Connections waiting for their first request, at once. Well above the manager's pool (512
# by default): a burst opens the whole pool at once, and every one of those connections is
# accepted before any of their first requests is read, so a small cap closed the manager's
# own connections.
MAX_UNAUTHENTICATED = 2048
MAX_CONNECTIONS = 8192          # all connections

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def create_app(engine: Engine, *, secret: str | None = None,
               max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
               manage_engine: bool = True,
               body_timeout_s: float = BODY_TIMEOUT_S) -> web.Application:
    """Build the app. With `manage_engine` the app starts the engine on startup and closes it
    on cleanup; otherwise the caller owns the engine's lifecycle. `secret=None` serves without
    authentication (in-process tests only; parrot-engine always sets one)."""
    middlewares: list[Middleware] = [_error_middleware]
    middlewares.append(_open_middleware if secret is None else _auth_middleware(secret))
    app = web.Application(client_max_size=max_body_bytes, middlewares=middlewares)
    app[BODY_TIMEOUT_KEY] = body_timeout_s
    window = ContextWindow(engine)
    routes = _Routes(engine, window)
    app.router.add_post("/v1/engine/fill", routes.fill)
    app.router.add_post("/v1/engine/generate", routes.generate)
    app.router.add_post("/v1/engine/free_context", routes.free_context)
    batch = BatchRoutes(engine, window)
    app.router.add_post(BATCH_PATH, batch.batch)
    app.router.add_post(ABORT_PATH, batch.abort)
    app.router.add_get("/v1/engine/stats", routes.stats)
    app.router.add_post("/v1/engine/reset_prefix_cache", routes.reset_prefix_cache)
    app.router.add_get("/v1/engine/info", routes.info)
    app.router.add_get("/healthz", routes.healthz)
    if manage_engine:
        async def lifecycle(_: web.Application) -> AsyncIterator[None]:
            await engine.start()
            yield
            await engine.close()
        app.cleanup_ctx.append(lifecycle)
    return app


class _Routes:
    def __init__(self, engine: Engine, window: ContextWindow) -> None:
        self.engine = engine
        self.window = window

    async def fill(self, request: web.Request) -> web.Response:
        body = await json_body(request)
        result = await self.engine.fill(parse(FillRequest.from_wire, body))
        return web.json_response(result.to_wire())

    async def generate(self, request: web.Request) -> web.StreamResponse:
        gen_request, stream = parse_generate(await json_body(request))
        await self.window.check(gen_request)
        if not stream:
            result = await self.engine.generate_all(gen_request)
            return web.json_response(result.to_wire())
        # Every engine's generate is an async generator (the protocol declares AsyncIterator).
        chunks = cast(AsyncGenerator[GenerateChunk, None], self.engine.generate(gen_request))
        try:
            # The first chunk comes before the response starts, so that errors found up front
            # (unknown context, busy, too long) keep their HTTP status.
            first = await anext(chunks, None)
            response = web.StreamResponse(headers={"Content-Type": NDJSON})
            await response.prepare(request)
            await _stream(response, first, chunks)
            return response
        finally:
            await chunks.aclose()  # a client that went away aborts the request in the engine

    async def free_context(self, request: web.Request) -> web.Response:
        # the same message, parsed the same way, as a batch's free op
        free = parse(FreeRequest.from_wire, await json_body(request))
        await self.engine.free_context(free.context_id)
        return web.json_response(free.to_wire())

    async def stats(self, _: web.Request) -> web.Response:
        return web.json_response((await self.engine.stats()).to_wire())

    async def reset_prefix_cache(self, _: web.Request) -> web.Response:
        return web.json_response({"num_blocks": await self.engine.reset_prefix_cache()})

    async def info(self, _: web.Request) -> web.Response:
        return web.json_response((await self.engine.info()).to_wire())

    async def healthz(self, _: web.Request) -> web.Response:
        ok = await self.engine.healthz()
        return web.json_response({"ok": ok}, status=200 if ok else 503)


async def _stream(response: web.StreamResponse, first: GenerateChunk | None,
                  chunks: AsyncIterator[GenerateChunk]) -> None:
    try:
        chunk = first
        try:
            while chunk is not None:
                await response.write(ndjson_line(chunk.to_wire()))
                if chunk.is_finished:
                    break
                chunk = await anext(chunks, None)
        except ParrotError as exc:
            await response.write(ndjson_line(exc.to_wire()))
        except Exception as exc:
            if is_disconnect(exc):
                raise
            log.exception("generate stream failed")
            await response.write(ndjson_line(ParrotError(f"internal error: {exc!r}").to_wire()))
        await response.write_eof()
    except Exception as exc:
        if not is_disconnect(exc):
            raise
        # the client went away; the caller's aclose() aborts the request in the engine
        log.info("generate stream closed by the client: %r", exc)


def _auth_middleware(secret: str) -> Middleware:
    expected = f"Bearer {secret}".encode()

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        given = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
        if hmac.compare_digest(given, expected):  # constant time: no timing oracle
            _mark_authenticated(request)
        elif request.path.startswith("/v1/engine/"):
            # Answered from the headers; the connection closes (GuardedRunner never lingers
            # to read the unread body).
            response = _error_response(UnauthorizedError(
                "engine requests need the engine's secret (Authorization: Bearer <secret>)"))
            response.force_close()
            return response
        return await handler(request)

    return check


@web.middleware
async def _open_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Without a secret there is nothing to present: every request authenticates its
    connection (a `GuardedRunner` then only caps connections)."""
    _mark_authenticated(request)
    return await handler(request)


def _error_response(exc: ParrotError) -> web.Response:
    response = web.json_response(exc.to_wire(), status=exc.status)
    if isinstance(exc, RequestTimeoutError):
        response.force_close()  # the rest of the body may still trickle in
    return response


# --- connections ---------------------------------------------------------------------------------

def _mark_authenticated(request: web.Request) -> None:
    protocol = request.protocol
    if isinstance(protocol, _GuardedHandler):
        protocol.authenticate()


class ConnectionGuard:
    """The engine port's connection rules (module docstring): a deadline for the first
    authenticated request, and caps on waiting and on all connections."""

    def __init__(self, first_request_timeout_s: float = FIRST_REQUEST_TIMEOUT_S,
                 max_unauthenticated: int = MAX_UNAUTHENTICATED,
                 max_connections: int = MAX_CONNECTIONS) -> None:
        self.first_request_timeout_s = first_request_timeout_s
        self.max_unauthenticated = max_unauthenticated
        self.max_connections = max_connections
        self.open = 0
        self.closed_unauthenticated = 0   # closed for want of the secret (a counter for tests)
        # Waiting for their first authenticated request, oldest first.
        self.waiting: collections.OrderedDict[_GuardedHandler, None] = collections.OrderedDict()

    def opened(self, handler: _GuardedHandler) -> bool:
        """Admit a new connection (False: close it at once)."""
        if self.open >= self.max_connections:
            return False
        self.open += 1
        self.waiting[handler] = None
        while len(self.waiting) > self.max_unauthenticated:
            oldest, _ = self.waiting.popitem(last=False)
            oldest.drop()
        return True

    def authenticated(self, handler: _GuardedHandler) -> None:
        self.waiting.pop(handler, None)

    def lost(self, handler: _GuardedHandler) -> None:
        self.open -= 1
        self.waiting.pop(handler, None)


class _GuardedHandler(RequestHandler):
    """aiohttp's connection handler, held to its server's `ConnectionGuard`."""

    guard: ConnectionGuard
    _admitted = False
    _authenticated = False
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if not self.guard.opened(self):
            transport.close()
            return
        self._admitted = True
        self._deadline = asyncio.get_running_loop().call_later(
            self.guard.first_request_timeout_s, self.drop)

    def authenticate(self) -> None:
        if not self._authenticated:
            self._authenticated = True
            if self._deadline is not None:
                self._deadline.cancel()
            self.guard.authenticated(self)

    def drop(self) -> None:
        """Close a connection that never presented the secret."""
        if not self._authenticated and self.transport is not None:
            self.guard.closed_unauthenticated += 1
            self.force_close()

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        if self._admitted:
            self._admitted = False
            self.guard.lost(self)
        super().connection_lost(exc)


class _GuardedServer(web.Server):
    guard: ConnectionGuard

    def __call__(self) -> RequestHandler:
        handler = _GuardedHandler(self, loop=self._loop, **self._kwargs)
        handler.guard = self.guard
        return handler


class GuardedRunner(web.AppRunner):
    """An AppRunner whose connections follow `guard` (parrot-engine serves with it). A request
    answered without reading its body closes its connection (lingering_time=0: aiohttp would
    otherwise read and discard up to 10 s of an unauthenticated body), and a request whose
    client goes away is cancelled."""

    def __init__(self, app: web.Application, guard: ConnectionGuard | None = None,
                 **kwargs: Any) -> None:
        # handler_cancellation: a manager that drops a request (its call was cancelled: the
        # session deleted, the client gone) cancels the handler, so a non-streamed Generate
        # stops decoding at once instead of running to max_tokens for nobody.
        super().__init__(app, lingering_time=0, handler_cancellation=True, **kwargs)
        self.guard = guard or ConnectionGuard()

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = _GuardedServer
        cast(_GuardedServer, server).guard = self.guard
        return server


@web.middleware
async def _error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ParrotError as exc:
        if exc.status >= 500:
            log.warning("%s %s failed: %r", request.method, request.path, exc)
        return _error_response(exc)
    except web.HTTPRequestEntityTooLarge as exc:
        return _error_response(PayloadTooLargeError(exc.text or "request body too large"))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        cls = NotFoundError if exc.status == 404 else InvalidRequestError
        body = {"error": {"type": cls.__name__, "message": f"{request.method} {request.path}: "
                                                            f"{exc.reason}"}}
        return web.json_response(body, status=exc.status)
    except Exception as exc:
        log.exception("%s %s: unexpected error", request.method, request.path)
        return _error_response(ParrotError(f"internal error: {exc!r}"))
