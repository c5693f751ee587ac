"""`HttpEngine`: the Engine protocol spoken over HTTP to an engine process (see server.py).

Connections: one pooled aiohttp session for protocol requests, sized by `pool_size`; a request
that finds every pooled connection busy waits for one, and that wait is never a connect timeout
(only the TCP connect itself is bounded by `connect_timeout_s`). Health probes use a session of
their own, so a pool full of long generations cannot starve the heartbeat.

Failures: a refused connection, a reset or a connect timeout becomes EngineUnavailableError (the
engine is gone); a request that outlives `request_timeout_s` becomes EngineTimeoutError (the
engine is alive but this operation is too slow). `abort_requests(reason)` — the manager calls it
when heartbeats stop — fails every in-flight request at once with EngineUnavailableError and
makes new ones fail fast until a health probe succeeds again. Frees that could not be delivered
meanwhile are retried on that first successful probe, so a frozen engine that resumes does not
keep contexts nobody will free.

Batching: Fills, Generates and Frees go over the batched route (batch_client.py): the ops
asked for in one loop iteration share one request and one reply stream, so a thousand calls
in flight are a few requests, not a thousand. Each op keeps the guarantees of a request of its
own: its deadline, its own error, abort_requests, an abort in the engine when its caller lets
it go. An engine without the batch route gets each op on its own route.

Authentication: every request carries `Authorization: Bearer <secret>` when a secret is set.
"""

from __future__ import annotations

import asyncio
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass
from typing import Any
from collections.abc import AsyncGenerator, AsyncIterator

import aiohttp

from parrot.engines.batch_client import (OWN_ROUTES, BatchRouteMissing, OpBatcher,
                                         guarded_lines, read_json)
from parrot.engines.protocol import (Engine, EngineInfo, EngineStats, FillRequest, FillResult,
                                     GenerateChunk, GenerateRequest, GenerateResult)
from parrot.errors import (EngineConfigError, EngineError, EngineUnavailableError,
                           InvalidRequestError, UnknownContextError, error_from_wire)
from parrot.validation import Checks


CONNECT_ATTEMPTS = 4  # tries of one request whose TCP connect timed out
# aiohttp >= 3.10 tells a connect timeout apart from a read timeout
_CONNECT_TIMEOUT = getattr(aiohttp, "ConnectionTimeoutError", aiohttp.ServerTimeoutError)


class _ConnectTimedOut(Exception):
    """Internal: the connect timed out and may be tried again."""


class EngineTimeoutError(EngineError):
    """An engine operation outlived the client's request timeout (the engine may be alive)."""

    status = 504


@dataclass(frozen=True)
class HttpEngineSettings:
    """How the manager talks to engine processes (ManagerConfig's engine_* keys)."""

    connect_timeout_s: float = 5.0          # TCP connect only; never the wait for the pool
    request_timeout_s: float | None = None  # one whole Fill/Generate/Free; None: unbounded
    probe_timeout_s: float = 5.0            # one /healthz answer
    pool_size: int = 512                    # concurrent connections to one engine

    def __post_init__(self) -> None:
        check = Checks("remote engine", EngineConfigError)
        check.positive("connect_timeout_s", self.connect_timeout_s)
        check.positive("probe_timeout_s", self.probe_timeout_s)
        check.positive("request_timeout_s", self.request_timeout_s, optional=True)
        check.positive_int("pool_size", self.pool_size)


class HttpEngine(Engine):
    is_remote = True

    def __init__(self, url: str, *, name: str | None = None, secret: str | None = None,
                 settings: HttpEngineSettings | None = None,
                 connect_timeout_s: float | None = None,
                 request_timeout_s: float | None = None) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise InvalidRequestError(
                f"engine url must start with http:// or https://, got {url!r}")
        settings = settings or HttpEngineSettings()
        if connect_timeout_s is not None or request_timeout_s is not None:
            settings = HttpEngineSettings(
                connect_timeout_s=connect_timeout_s or settings.connect_timeout_s,
                request_timeout_s=request_timeout_s or settings.request_timeout_s,
                probe_timeout_s=settings.probe_timeout_s, pool_size=settings.pool_size)
        self.url = url.rstrip("/")
        self.name = name or self.url
        self.settings = settings
        self._headers = {"Authorization": f"Bearer {secret}"} if secret else {}
        self._session: aiohttp.ClientSession | None = None
        self._probe_session: aiohttp.ClientSession | None = None
        self._closed = False  # a closed client opens no new session (it would leak) until start()
        self._inflight: set[asyncio.Timeout] = set()
        self._aborted: set[asyncio.Timeout] = set()
        self._down_reason: str | None = None  # set by abort_requests, cleared by a probe
        self._unfreed: set[str] = set()
        self._batcher = OpBatcher(self.name, guard=self._guard, open_stream=self._post_stream,
                                  post=self._post, answered=self._answered)

    @property
    def is_down(self) -> bool:
        return self._down_reason is not None

    def same_endpoint(self, other: Engine) -> bool:
        """The same engine process as far as we can tell: same URL and same secret."""
        return isinstance(other, HttpEngine) and (other.url, other._headers) == \
            (self.url, self._headers)

    # ---- Engine protocol -------------------------------------------------------------------

    async def start(self) -> None:
        self._closed = False
        self._client()

    async def close(self) -> None:
        self._closed = True
        self._batcher.close(EngineUnavailableError(f"engine client for {self.url} is closed"))
        for session in (self._session, self._probe_session):
            if session is not None:
                await session.close()
        self._session = self._probe_session = None

    async def info(self) -> EngineInfo:
        return EngineInfo.from_wire(await self._call("GET", "/v1/engine/info"), strict=False)

    async def fill(self, request: FillRequest) -> FillResult:
        return FillResult.from_wire(await self._one("fill", request.to_wire()), strict=False)

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        body = {**request.to_wire(), "stream": True}
        deadline = self._deadline()
        if self._batcher.supported:
            op = self._batcher.submit("generate", body)
            try:
                try:
                    data = await self._batcher.next(op, deadline)
                except BatchRouteMissing:
                    data = None
                while data is not None:
                    chunk = GenerateChunk.from_wire(data, strict=False)
                    yield chunk
                    if chunk.is_finished:
                        return
                    data = await self._batcher.next(op, deadline)
            finally:
                self._batcher.release(op)
        async with aclosing(self._generate_alone(body, deadline)) as chunks:
            async for chunk in chunks:
                yield chunk

    async def generate_all(self, request: GenerateRequest) -> GenerateResult:
        data = await self._one("generate", {**request.to_wire(), "stream": False})
        return GenerateResult.from_wire(data, strict=False)

    async def free_context(self, context_id: str) -> None:
        try:
            await self._one("free", {"context_id": context_id})
        except EngineUnavailableError:
            self._unfreed.add(context_id)  # retried when the engine answers again
            raise

    async def stats(self) -> EngineStats:
        return EngineStats.from_wire(await self._call("GET", "/v1/engine/stats"), strict=False)

    async def reset_prefix_cache(self) -> int:
        data = await self._call("POST", "/v1/engine/reset_prefix_cache")
        count = data.get("num_blocks") if isinstance(data, dict) else None
        if isinstance(count, bool) or not isinstance(count, int):
            raise EngineError(f"engine {self.url}: reset_prefix_cache answered {data!r}")
        return count

    async def healthz(self) -> bool:
        """One probe on the probe session (bounded by probe_timeout_s). A healthy answer ends an
        outage declared by abort_requests and delivers the frees that failed during it."""
        if self._closed:
            return False
        timeout = aiohttp.ClientTimeout(total=self.settings.probe_timeout_s)
        try:
            async with self._prober().get(self.url + "/healthz", headers=self._headers,
                                          timeout=timeout) as resp:
                data = await read_json(resp)
        except (TimeoutError, aiohttp.ClientError):
            return False
        self._answered()
        ok = resp.status == 200 and isinstance(data, dict) and bool(data.get("ok"))
        if ok and self._down_reason is not None:
            self._down_reason = None
            await self._flush_unfreed()
        return ok

    def abort_requests(self, reason: str) -> None:
        self._down_reason = reason
        now = asyncio.get_running_loop().time()
        for scope in list(self._inflight):
            self._aborted.add(scope)
            scope.reschedule(now)

    async def wait_healthy(self, timeout: float) -> None:
        """Poll /healthz (with backoff; this is start-up, not the request path) until it answers
        ok, or raise EngineUnavailableError after `timeout` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        delay = 0.02
        while True:
            if await self.healthz():
                return
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise EngineUnavailableError(
                    f"engine at {self.url} not healthy after {timeout:g}s")
            await asyncio.sleep(min(delay, remaining))
            delay = min(delay * 2, 0.5)

    # ---- plumbing ----------------------------------------------------------------------------

    def _answered(self) -> None:
        self.last_answer_at = asyncio.get_running_loop().time()

    def _client(self) -> aiohttp.ClientSession:
        if self._closed:
            raise EngineUnavailableError(f"engine client for {self.url} is closed")
        if self._session is None or self._session.closed:
            # connect=None: aiohttp's `connect` timeout includes waiting for a pooled
            # connection, which under a burst is queueing, not a sign of a dead engine.
            timeout = aiohttp.ClientTimeout(total=None, connect=None,
                                            sock_connect=self.settings.connect_timeout_s)
            connector = aiohttp.TCPConnector(limit=self.settings.pool_size, limit_per_host=0)
            self._session = aiohttp.ClientSession(timeout=timeout, connector=connector)
        return self._session

    def _prober(self) -> aiohttp.ClientSession:
        if self._probe_session is None or self._probe_session.closed:
            self._probe_session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=2, force_close=True))
        return self._probe_session

    @asynccontextmanager
    async def _guard(self, deadline: float | None, *,
                     retry_connect: bool = False) -> AsyncIterator[None]:
        """Map transport failures to typed errors, bound the request by `deadline` and let
        abort_requests end it early. With `retry_connect`, a connect timeout raises
        _ConnectTimedOut so that the caller tries again: nothing reached the engine, and on a
        busy manager the connect timer measures our own loop's lag more than the engine (a dead
        engine refuses at once; a silent host is the heartbeat's to declare down, which aborts
        the retries)."""
        if self._down_reason is not None:
            raise EngineUnavailableError(f"engine {self.name} is down: {self._down_reason}")
        scope = asyncio.timeout_at(deadline)
        self._inflight.add(scope)
        try:
            async with scope:
                yield
        except (TimeoutError, aiohttp.ClientError) as exc:
            if retry_connect and isinstance(exc, _CONNECT_TIMEOUT) and scope not in self._aborted:
                raise _ConnectTimedOut() from exc
            if scope in self._aborted:
                raise EngineUnavailableError(
                    f"engine {self.name} is down: {self._down_reason}") from None
            if scope.expired():
                raise EngineTimeoutError(
                    f"engine {self.name} did not answer within request_timeout_s="
                    f"{self.settings.request_timeout_s:g}") from None
            raise EngineUnavailableError(f"engine {self.name} at {self.url} unreachable: "
                                         f"{exc!r}") from exc
        finally:
            self._inflight.discard(scope)
            self._aborted.discard(scope)

    def _deadline(self) -> float | None:
        limit = self.settings.request_timeout_s
        return None if limit is None else asyncio.get_running_loop().time() + limit

    async def _one(self, kind: str, body: dict[str, Any]) -> Any:
        """One op with one answer (a Fill, a whole Generate, a Free): batched, or by its own
        route on an engine without the batch route."""
        deadline = self._deadline()
        if self._batcher.supported:
            op = self._batcher.submit(kind, body)
            try:
                return await self._batcher.next(op, deadline)
            except BatchRouteMissing:
                pass
            finally:
                self._batcher.release(op)
        return await self._call("POST", OWN_ROUTES[kind], body, deadline)

    async def _generate_alone(self, body: dict[str, Any],
                              deadline: float | None) -> AsyncGenerator[GenerateChunk, None]:
        """A streamed Generate by its own route, each read bounded by what is left of the
        deadline."""
        resp = await self._open("POST", OWN_ROUTES["generate"], body, deadline)
        try:
            if resp.status >= 400:
                async with self._guard(deadline):
                    data = await read_json(resp)
                raise error_from_wire(data, resp.status)
            async with aclosing(guarded_lines(resp, self._guard, deadline,
                                              self._answered)) as lines:
                async for data in lines:
                    if "error" in data:
                        raise error_from_wire(data, 500)
                    chunk = GenerateChunk.from_wire(data, strict=False)
                    yield chunk
                    if chunk.is_finished:
                        return
        finally:
            resp.release()
        raise EngineUnavailableError(f"engine {self.name}: stream ended before the last chunk")

    async def _open(self, method: str, path: str, body: dict[str, Any] | None,
                    deadline: float | None) -> aiohttp.ClientResponse:
        """Send a request and return its response once the headers are in (the caller reads
        and releases it); a connect timeout is tried again."""
        for attempt in range(CONNECT_ATTEMPTS):
            try:
                async with self._guard(deadline, retry_connect=attempt + 1 < CONNECT_ATTEMPTS):
                    resp = await self._client().request(method, self.url + path, json=body,
                                                        headers=self._headers)
                break
            except _ConnectTimedOut:
                continue
        self._answered()
        return resp

    async def _post_stream(self, path: str, body: dict[str, Any]) -> aiohttp.ClientResponse:
        return await self._open("POST", path, body, None)

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        return await self._call("POST", path, body)

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None,
                    deadline: float | None = None) -> Any:
        deadline = self._deadline() if deadline is None else deadline
        resp = await self._open(method, path, body, deadline)
        try:
            async with self._guard(deadline):
                data = await read_json(resp)
        finally:
            resp.release()
        if resp.status >= 400:
            raise error_from_wire(data, resp.status)
        return data

    async def _flush_unfreed(self) -> None:
        pending = sorted(self._unfreed)
        self._unfreed.clear()
        for i, context_id in enumerate(pending):
            try:
                await self.free_context(context_id)
            except EngineUnavailableError:
                self._unfreed.update(pending[i:])  # down again: keep the rest for next time
                return
            except (UnknownContextError, EngineTimeoutError):
                pass  # a restarted engine has none of the old contexts
