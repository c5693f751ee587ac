"""Helpers for the front-door tests: a real ParrotServer on a free port, raw HTTP clients."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import io
from typing import Any
from collections.abc import AsyncIterator

import aiohttp

from parrot.serve_config import ServeConfig
from parrot.server.service import ParrotServer

SIM_ENGINE = {"name": "sim-0", "kind": "simulated", "in_process": True,
              "params": {"zero_latency": True}}
SLOW_ENGINE = {"name": "sim-0", "kind": "simulated", "in_process": True, "params": {}}


def config(manager: dict[str, Any] | None = None, engine: dict[str, Any] = SIM_ENGINE,
           **sections: Any) -> ServeConfig:
    return ServeConfig.from_mapping({"manager": manager or {}, "policy": {"name": "least_queue"},
                                     "engines": [engine], **sections})


@contextlib.asynccontextmanager
async def running(cfg: ServeConfig) -> AsyncIterator[tuple[ParrotServer, aiohttp.ClientSession]]:
    server = ParrotServer(cfg)
    await server.start(port=0)
    try:
        async with aiohttp.ClientSession(base_url=server.url) as http:
            yield server, http
    finally:
        await server.stop()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def call(http: aiohttp.ClientSession, method: str, path: str, body: Any = None,
               headers: dict[str, str] | None = None, raw: bytes | None = None
               ) -> tuple[int, Any, aiohttp.ClientResponse]:
    kwargs: dict[str, Any] = {"data": io.BytesIO(raw)} if raw is not None else {"json": body}
    async with http.request(method, path, headers=headers, **kwargs) as resp:
        assert resp.content_type == "application/json", (resp.status, await resp.text())
        return resp.status, await resp.json(), resp


async def new_session(http: aiohttp.ClientSession, key: str | None = None
                      ) -> tuple[str, dict[str, str]]:
    status, data, _ = await call(http, "POST", "/v1/sessions",
                                 headers=bearer(key) if key else None)
    assert status == 200, data
    return data["session_id"], bearer(data["token"])


def one_call(sid: str, prompt: str = "{{input:x}} {{output:y}}", value: str = "hi",
             **extra: Any) -> dict[str, Any]:
    return {"session_id": sid, "prompt": prompt,
            "placeholders": [{"name": "x", "in_out": "input", "value": value}], **extra}


async def raw_exchange(url: str, data: bytes, read_timeout: float = 10.0
                       ) -> tuple[bytes, bool]:
    """Send raw bytes on a fresh connection; return what the server answered within
    `read_timeout` and whether it closed the connection by then."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    answer, deadline = b"", asyncio.get_running_loop().time() + read_timeout
    try:
        writer.write(data)
        await writer.drain()
        while True:
            left = deadline - asyncio.get_running_loop().time()
            try:
                chunk = await asyncio.wait_for(reader.read(65536), max(left, 0))
            except TimeoutError:
                return answer, False
            if not chunk:
                return answer, True
            answer += chunk
    finally:
        writer.close()


def split_response(answer: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip()
               for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


@contextlib.asynccontextmanager
async def loop_gaps() -> AsyncIterator[list[float]]:
    """The gaps between the ticks of a coroutine that asks to run every millisecond, while
    the block runs: the longest is the longest the loop was held."""
    gaps: list[float] = []
    stop = asyncio.Event()

    async def tick() -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        while not stop.is_set():
            await asyncio.sleep(0.001)
            now = loop.time()
            gaps.append(now - last)
            last = now

    # What earlier tests left in this process is set aside from the garbage collector while
    # the block runs: a full collection would otherwise scan all of it, a pause that belongs
    # to the test run, not to what the block measures.
    gc.collect()
    gc.freeze()
    ticker = asyncio.create_task(tick())
    try:
        yield gaps
    finally:
        stop.set()
        await ticker
        gc.unfreeze()
