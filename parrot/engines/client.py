"""`HttpEngine`: the Engine protocol spoken over HTTP to an engine process (see server.py).

One aiohttp ClientSession per client, created on first use inside the running loop. Error bodies
come back as the same typed exceptions (`error_from_wire`); a refused connection, a reset or a
timeout becomes EngineUnavailableError.
"""

from __future__ import annotations

import asyncio
import json
from contextlib import aclosing
from typing import Any, AsyncIterator

import aiohttp

from parrot.engines.protocol import (Engine, EngineInfo, EngineStats, FillRequest, FillResult,
                                     GenerateChunk, GenerateRequest, GenerateResult)
from parrot.errors import EngineUnavailableError, InvalidRequestError, ParrotError, error_from_wire


class HttpEngine(Engine):
    def __init__(self, url: str, *, name: str | None = None, connect_timeout_s: float = 5.0,
                 request_timeout_s: float | None = None) -> None:
        """`request_timeout_s` bounds a whole request (None: no bound; a Generate may take a
        long time); `connect_timeout_s` bounds establishing the connection."""
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise InvalidRequestError(f"engine url must start with http:// or https://, got {url!r}")
        self.url = url.rstrip("/")
        self.name = name or self.url
        self._timeout = aiohttp.ClientTimeout(total=request_timeout_s, connect=connect_timeout_s)
        self._session: aiohttp.ClientSession | None = None
        self._closed = False  # a closed client opens no new session (it would leak) until start()

    # ---- Engine protocol -------------------------------------------------------------------

    async def start(self) -> None:
        self._closed = False
        self._client()

    async def close(self) -> None:
        self._closed = True
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def info(self) -> EngineInfo:
        return EngineInfo.from_json(await self._call("GET", "/v1/engine/info"))

    async def fill(self, request: FillRequest) -> FillResult:
        return FillResult.from_json(await self._call("POST", "/v1/engine/fill", request.to_json()))

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        body = {**request.to_json(), "stream": True}
        try:
            async with self._client().post(self.url + "/v1/engine/generate", json=body) as resp:
                if resp.status >= 400:
                    raise error_from_wire(await _read_json(resp), resp.status)
                async with aclosing(_ndjson(resp)) as lines:
                    async for data in lines:
                        if "error" in data:
                            raise error_from_wire(data, 500)
                        chunk = GenerateChunk.from_json(data)
                        yield chunk
                        if chunk.is_finished:
                            return
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise self._unavailable(exc) from exc
        raise EngineUnavailableError(f"engine at {self.url}: stream ended before the last chunk")

    async def generate_all(self, request: GenerateRequest) -> GenerateResult:
        data = await self._call("POST", "/v1/engine/generate", {**request.to_json(), "stream": False})
        return GenerateResult(str(data["text"]), tuple(int(t) for t in data["token_ids"]),
                              str(data["finish_reason"]))

    async def free_context(self, context_id: str) -> None:
        await self._call("POST", "/v1/engine/free_context", {"context_id": context_id})

    async def stats(self) -> EngineStats:
        return EngineStats.from_json(await self._call("GET", "/v1/engine/stats"))

    async def healthz(self) -> bool:
        try:
            data = await self._call("GET", "/healthz")
        except ParrotError:
            return False
        return bool(data.get("ok")) if isinstance(data, dict) else False

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

    def _client(self) -> aiohttp.ClientSession:
        if self._closed:
            raise EngineUnavailableError(f"engine client for {self.url} is closed")
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self._session

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        try:
            async with self._client().request(method, self.url + path, json=body) as resp:
                data = await _read_json(resp)
                if resp.status >= 400:
                    raise error_from_wire(data, resp.status)
                return data
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise self._unavailable(exc) from exc

    def _unavailable(self, exc: BaseException) -> EngineUnavailableError:
        return EngineUnavailableError(f"engine at {self.url} unreachable: {exc!r}")


async def _read_json(resp: aiohttp.ClientResponse) -> Any:
    text = await resp.text()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text  # error_from_wire turns an unknown shape into a ParrotError with the status


async def _ndjson(resp: aiohttp.ClientResponse) -> AsyncIterator[dict[str, Any]]:
    """Lines of any length (aiohttp's readline caps line size)."""
    buffer = b""
    async for piece in resp.content.iter_any():
        buffer += piece
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.strip():
                yield json.loads(line)
    if buffer.strip():
        yield json.loads(buffer)
