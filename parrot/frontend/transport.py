"""How the frontend reaches the manager: over HTTP, or in-process (tests and simulation).

Both speak the wire API's JSON shapes, so the in-process transport exercises the same request
parsing as the HTTP server. An optional `delay` emulates the client↔service network: every
message pays a round trip of `delay()` seconds on the loop clock (the paper's 200–300 ms
setting), half on the way to the service and half on the way back — so a long-polling `get`
pays its return leg after the value exists, as over a real network.
"""

from __future__ import annotations

import asyncio
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any
from collections.abc import AsyncIterator, Callable

import aiohttp

from parrot.errors import (InvalidRequestError, ManagerUnavailableError, TooManyRequestsError,
                           error_from_wire)

Delay = Callable[[], float]


@dataclass(frozen=True)
class SessionCredentials:
    session_id: str
    token: str


class Transport(ABC):
    def __init__(self, delay: Delay | None = None) -> None:
        self._delay = delay
        self.num_messages = 0

    async def request(self, method: str, path: str, body: dict[str, Any] | None = None,
                      token: str | None = None) -> dict[str, Any]:
        self.num_messages += 1
        one_way = self._delay() / 2 if self._delay is not None else 0.0
        if one_way:
            await asyncio.sleep(one_way)
        try:
            return await self._request(method, path, body, token)
        finally:  # the answer (or the error) travels back too
            if one_way:
                await asyncio.sleep(one_way)

    @abstractmethod
    async def _request(self, method: str, path: str, body: dict[str, Any] | None,
                       token: str | None) -> dict[str, Any]: ...

    async def stream(self, path: str, query: dict[str, str],
                     token: str | None) -> AsyncIterator[dict[str, Any]]:
        """The events of a server-sent-event route (GET), as they arrive. Errors before the
        stream starts raise; an error event later is yielded as `{"error": ...}`."""
        self.num_messages += 1
        one_way = self._delay() / 2 if self._delay is not None else 0.0
        if one_way:  # the request travels; the events then arrive as they are sent
            await asyncio.sleep(one_way)
        async for event in self._stream(path, query, token):
            yield event

    def _stream(self, path: str, query: dict[str, str],
                token: str | None) -> AsyncIterator[dict[str, Any]]:
        raise InvalidRequestError(f"{type(self).__name__} cannot stream")

    async def close(self) -> None: ...


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

    async def _request(self, method: str, path: str, body: dict[str, Any] | None,
                       token: str | None) -> dict[str, Any]:
        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=self._timeout)
        token = token or self.api_key
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            async with self._http.request(method, self.base_url + path, json=body,
                                          headers=headers) as resp:
                text = await resp.text()
                try:
                    payload = json.loads(text) if text else {}
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
                      token: str | None) -> AsyncIterator[dict[str, Any]]:
        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=self._timeout)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            async with self._http.get(self.base_url + path, params=query,
                                      headers=headers) as resp:
                if resp.status >= 400:
                    text = await resp.text()
                    try:
                        payload = json.loads(text)
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

    def __init__(self, manager: Any, delay: Delay | None = None) -> None:
        super().__init__(delay)
        from parrot.core.wire import WireAPI  # the manager side of this transport

        self._api = WireAPI(manager)

    async def _request(self, method: str, path: str, body: dict[str, Any] | None,
                       token: str | None) -> dict[str, Any]:
        # Round-trip through JSON so nothing is shared by reference with the manager.
        body = json.loads(json.dumps(body)) if body is not None else None
        return json.loads(json.dumps(await self._api.handle(method, path, body, token)))

    async def _stream(self, path: str, query: dict[str, str],
                      token: str | None) -> AsyncIterator[dict[str, Any]]:
        from parrot.core.sse import variable_events  # the manager side, as the HTTP route

        async for event in variable_events(self._api.manager, path, query, token):
            yield json.loads(json.dumps(event))
