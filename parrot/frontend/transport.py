"""How the frontend reaches the manager: over HTTP, or in-process (tests and simulation).

Both carry the typed messages of `parrot.wire_types` as their JSON form (`to_wire()` on the way
out, `from_wire()` of the reply's type on the way back), so the in-process transport exercises
the same request parsing as the HTTP server and a reply that drifts from its type fails here.

An optional `delay` emulates the client↔service network: every message pays a round trip of
`delay()` seconds on the loop clock (the paper's 200–300 ms setting), half on the way to the
service and half on the way back — so a long-polling `get` pays its return leg after the value
exists, as over a real network.
"""

from __future__ import annotations

import asyncio
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, TypeVar

import aiohttp

from parrot.errors import (InvalidRequestError, ManagerUnavailableError, TooManyRequestsError,
                           error_from_wire)
from parrot.wire_types import ErrorReply, Json, JsonObject, TextChunk, WireMessage

if TYPE_CHECKING:
    from parrot.manager.manager import Manager

Delay = Callable[[], float]
R = TypeVar("R", bound=WireMessage)


@dataclass(frozen=True)
class SessionCredentials:
    session_id: str
    token: str


class Transport(ABC):
    def __init__(self, delay: Delay | None = None) -> None:
        self._delay = delay
        self.num_messages = 0

    async def request(self, method: str, path: str, reply: type[R],
                      body: WireMessage | None = None, token: str | None = None) -> R:
        """Send `body` and parse the answer as `reply`; an error answer raises its typed
        error (`parrot.errors`)."""
        self.num_messages += 1
        one_way = self._delay() / 2 if self._delay is not None else 0.0
        if one_way:
            await asyncio.sleep(one_way)
        try:
            payload = await self._request(method, path, None if body is None else body.to_wire(),
                                          token)
        finally:  # the answer (or the error) travels back too
            if one_way:
                await asyncio.sleep(one_way)
        return reply.from_wire(payload, f"reply of {method} {path}")

    @abstractmethod
    async def _request(self, method: str, path: str, body: JsonObject | None,
                       token: str | None) -> Json: ...

    async def stream(self, path: str, query: dict[str, str],
                     token: str | None) -> AsyncIterator[TextChunk | ErrorReply]:
        """The events of a server-sent-event route (GET), as they arrive. Errors before the
        stream starts raise; an error event later is yielded as an `ErrorReply`."""
        self.num_messages += 1
        one_way = self._delay() / 2 if self._delay is not None else 0.0
        if one_way:  # the request travels; the events then arrive as they are sent
            await asyncio.sleep(one_way)
        async for event in self._stream(path, query, token):
            where = f"event of {path}"
            if isinstance(event, dict) and "error" in event:
                yield ErrorReply.from_wire(event, where)
            else:
                yield TextChunk.from_wire(event, where)

    def _stream(self, path: str, query: dict[str, str], token: str | None) -> AsyncIterator[Json]:
        raise InvalidRequestError(f"{type(self).__name__} cannot stream")

    async def close(self) -> None:  # noqa: B027 - a hook: only a connection pool needs it
        """Release what the transport holds (HTTP: its connection pool)."""


class HttpTransport(Transport):
    """`api_key`: a tenant's key, sent when a request carries no session token (that is, when
    opening a session on a manager with tenants configured)."""

    def __init__(self, base_url: str, delay: Delay | None = None,
                 timeout_s: float = 3600.0, api_key: str | None = None) -> None:
        super().__init__(delay)
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._http: aiohttp.ClientSession | None = None

    async def _request(self, method: str, path: str, body: JsonObject | None,
                       token: str | None) -> Json:
        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=self._timeout)
        token = token or self.api_key
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            async with self._http.request(method, self.base_url + path, json=body,
                                          headers=headers) as resp:
                text = await resp.text()
                try:
                    payload: Json = json.loads(text) if text else {}
                except json.JSONDecodeError:
                    payload = {"error": {"type": "ParrotError", "message": text[:500]}}
                if resp.status >= 400:
                    error = error_from_wire(payload, resp.status)
                    if isinstance(error, TooManyRequestsError):
                        retry_after = resp.headers.get("Retry-After", "")
                        if retry_after.isdigit():
                            error.retry_after_s = float(retry_after)
                    raise error
                return payload
        except aiohttp.ClientError as exc:
            raise ManagerUnavailableError(f"cannot reach the manager at {self.base_url}: "
                                         f"{exc}") from None

    async def _stream(self, path: str, query: dict[str, str],
                      token: str | None) -> AsyncIterator[Json]:
        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=self._timeout)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            async with self._http.get(self.base_url + path, params=query,
                                      headers=headers) as resp:
                if resp.status >= 400:
                    text = await resp.text()
                    try:
                        payload: Json = json.loads(text)
                    except json.JSONDecodeError:
                        payload = {"error": {"type": "ParrotError", "message": text[:500]}}
                    raise error_from_wire(payload, resp.status)
                buffer = b""
                async for piece in resp.content.iter_any():
                    buffer += piece
                    *events, buffer = buffer.split(b"\n\n")
                    for event in events:
                        data = event.removeprefix(b"data: ")
                        if data == b"[DONE]":
                            return
                        yield json.loads(data)
        except aiohttp.ClientError as exc:
            raise ManagerUnavailableError(f"cannot reach the manager at {self.base_url}: "
                                         f"{exc}") from None

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None


class InProcessTransport(Transport):
    """Calls a Manager object in the same event loop, through the wire API's JSON shapes."""

    def __init__(self, manager: Manager, delay: Delay | None = None) -> None:
        super().__init__(delay)
        from parrot.server.wire_routes import WireAPI  # the manager side of this transport

        self._api = WireAPI(manager)

    async def _request(self, method: str, path: str, body: JsonObject | None,
                       token: str | None) -> Json:
        # Round-trip through JSON so nothing is shared by reference with the manager, and the
        # manager parses exactly what an HTTP body would hold.
        raw = json.loads(json.dumps(body)) if body is not None else None
        reply = await self._api.handle(method, path, raw, token)
        wire: Json = json.loads(json.dumps(reply.to_wire()))  # the one serialisation here
        return wire

    async def _stream(self, path: str, query: dict[str, str],
                      token: str | None) -> AsyncIterator[Json]:
        from parrot.server.sse import variable_events  # the manager side, as the HTTP route

        async for event in variable_events(self._api.manager, path, query, token):
            yield json.loads(json.dumps(event))
