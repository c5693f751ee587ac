from __future__ import annotations

import asyncio
import json
import socket
from typing import Any
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from parrot.engines.client import EngineTimeoutError, HttpEngine, HttpEngineSettings
from parrot.engines.counters import engine_counters
from parrot.engines.protocol import (THROUGHPUT_PRIORITY, Engine, EngineInfo, EngineStats,
                                     FillRequest, FillResult, GenerateChunk, GenerateRequest)
from parrot.engines.server import create_app
from tests.manager.fakes import RecordingEngine
from tests.engines.sim_helpers import sim, until_idle
from parrot.errors import (ContextExistsError, EngineUnavailableError, InvalidRequestError,
                           OutOfKVCacheError, PromptTooLongError, UnauthorizedError,
                           UnknownContextError)
from parrot.sampling import SamplingParams

SMALL = {"zero_latency": True, "max_context_len": 256, "block_size": 16, "num_blocks": 8}
SLOW = {"decode_base_ms": 5.0, "decode_per_token_ms": 0.0}


async def serve(engine: Engine, *, client_secret: str | None = None,
                settings: HttpEngineSettings | None = None,
                **app_kwargs: Any) -> tuple[TestServer, HttpEngine]:
    server = TestServer(create_app(engine, **app_kwargs))
    await server.start_server()
    return server, HttpEngine(str(server.make_url("")), name="remote",
                              secret=client_secret or app_kwargs.get("secret"),
                              settings=settings)


def gen(ctx: str, n: int, parent: str | None = None) -> GenerateRequest:
    return GenerateRequest(ctx, parent, SamplingParams(max_tokens=n, seed=3))


async def test_protocol_round_trip() -> None:
    engine = sim(SMALL)
    server, client = await serve(engine)
    try:
        assert await client.healthz()
        info = await client.info()
        assert (info.name, info.kind, info.max_context_len, info.num_blocks_total) == \
            ("sim", "simulated", 256, 8)
        filled = await client.fill(FillRequest("p", text="x" * 40))
        assert filled == FillResult("p", 10, 10)
        chunks = [c async for c in client.generate(gen("c", 5, parent="p"))]
        assert chunks[-1].finish_reason == "length"
        assert all(c.finish_reason is None for c in chunks[:-1])
        streamed = "".join(c.text for c in chunks)
        assert len(streamed) == 20
        # the same request in one response (non-streaming) gives the same text
        whole = await client.generate_all(gen("d", 5, parent="p"))
        local = await engine.generate_all(gen("c2", 5, parent="p"))
        assert len(whole.text) == 20 and whole.finish_reason == "length"
        assert len(whole.token_ids) == len(local.token_ids) == 5
        stats = await client.stats()
        assert (stats.num_contexts, stats.num_running, stats.block_size) == (4, 0, 16)
        assert stats == await engine.stats()
        await client.free_context("c")
        assert (await client.stats()).num_contexts == 3
    finally:
        await client.close()
        await server.close()
    assert not await engine.healthz()  # the app closed the engine it manages


async def test_the_priority_of_a_request_crosses_the_wire() -> None:
    engine = RecordingEngine()
    server, client = await serve(engine)
    try:
        await client.fill(FillRequest("p", text="x" * 40, priority=THROUGHPUT_PRIORITY))
        await client.generate_all(GenerateRequest("g", "p", priority=7))
        await client.fill(FillRequest("q", text="y"))
        assert engine.priorities == {"p": THROUGHPUT_PRIORITY, "g": 7, "q": 0}
    finally:
        await client.close()
        await server.close()


async def test_typed_errors_cross_the_wire() -> None:
    engine = sim({**SMALL, "zero_latency": False, **SLOW})
    server, client = await serve(engine)
    try:
        with pytest.raises(UnknownContextError):
            await client.fill(FillRequest("a", "missing", text="hi"))
        with pytest.raises(UnknownContextError):
            await client.free_context("missing")
        with pytest.raises(UnknownContextError):
            await anext(client.generate(gen("a", 1, parent="missing")))
        with pytest.raises(PromptTooLongError):
            await client.fill(FillRequest("a", token_ids=tuple(range(257))))
        with pytest.raises(OutOfKVCacheError):
            await client.generate_all(gen("a", 200))  # 13 blocks > 8
        stream = client.generate(gen("busy", 100))
        assert (await anext(stream)).finish_reason is None
        with pytest.raises(ContextExistsError):
            await client.fill(FillRequest("busy", text="x"))
        await stream.aclose()
    finally:
        await client.close()
        await server.close()


async def raw(server: TestServer, method: str, path: str, data: bytes | None = None,
              headers: dict[str, str] | None = None) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session:
        async with session.request(method, server.make_url(path), data=data,
                                   headers=headers) as resp:
            return resp.status, await resp.json(content_type=None)


@pytest.mark.parametrize("method, path, body, status, error_type", [
    ("POST", "/v1/engine/fill", b"{not json", 400, "InvalidRequestError"),
    ("POST", "/v1/engine/fill", b"[1, 2]", 400, "InvalidRequestError"),
    ("POST", "/v1/engine/fill", b"\xff\xfe", 400, "InvalidRequestError"),
    ("POST", "/v1/engine/fill", b'{"context_id": "a"}', 400, "InvalidRequestError"),
    ("POST", "/v1/engine/fill", b'{"context_id": "a", "token_ids": [-1]}', 400,
     "InvalidRequestError"),
    ("POST", "/v1/engine/fill", b'{"context_id": "a", "token_ids": "abc"}', 400,
     "InvalidRequestError"),
    ("POST", "/v1/engine/generate", b'{"context_id": "a", "sampling": {"max_tokens": 0}}', 400,
     "InvalidRequestError"),
    ("POST", "/v1/engine/generate", b'{"context_id": "a", "sampling": {"bogus": 1}}', 400,
     "InvalidRequestError"),
    ("POST", "/v1/engine/generate", b'{"context_id": "a", "stream": "yes"}', 400,
     "InvalidRequestError"),
    ("POST", "/v1/engine/free_context", b'{}', 400, "InvalidRequestError"),
    ("POST", "/v1/engine/fill", b'{"context_id": "a", "text": "x", "temperature": 1}', 400,
     "InvalidRequestError"),
    ("POST", "/v1/engine/fill", b'{"context_id": "a", "token_ids": [1, "x"]}', 400,
     "InvalidRequestError"),
    ("POST", "/v1/engine/fill", b'{"context_id": "a", "text": "x", "priority": "high"}', 400,
     "InvalidRequestError"),
    ("POST", "/v1/engine/generate", b'{"context_id": "a", "priority": 1.5}', 400,
     "InvalidRequestError"),
    ("POST", "/v1/engine/fill", b'{"context_id": "a", "text": "x", "priority": true}', 400,
     "InvalidRequestError"),
    ("POST", "/v1/engine/fill", b'{"context_id": "a", "text": "' + b"x" * 5000 + b'"}', 413,
     "PayloadTooLargeError"),
    ("GET", "/v1/engine/nope", None, 404, "NotFoundError"),
    ("GET", "/v1/engine/fill", None, 405, "InvalidRequestError"),
])
async def test_bad_input_gets_a_json_error_and_the_server_lives(
        method: str, path: str, body: bytes | None, status: int, error_type: str) -> None:
    server, client = await serve(sim(SMALL), max_body_bytes=4096)
    try:
        got_status, payload = await raw(server, method, path, body)
        assert (got_status, payload["error"]["type"]) == (status, error_type)
        assert payload["error"]["message"]
        assert await client.healthz()
    finally:
        await client.close()
        await server.close()


class _FailsMidStream(Engine):
    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def info(self) -> EngineInfo:
        return EngineInfo("f", "fake", "m", 64, 1, 1)

    async def fill(self, request: FillRequest) -> FillResult:
        raise RuntimeError("boom")

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        yield GenerateChunk("abcd", (1,))
        raise UnknownContextError("context vanished")

    async def free_context(self, context_id: str) -> None: ...

    async def stats(self) -> EngineStats:
        return EngineStats(0, 0, 1, 1, 1, 0, 0)


async def test_error_mid_stream_is_a_final_error_line() -> None:
    server, client = await serve(_FailsMidStream())
    try:
        received = []
        with pytest.raises(UnknownContextError, match="vanished"):
            async for chunk in client.generate(gen("a", 5)):
                received.append(chunk)
        assert received == [GenerateChunk("abcd", (1,))]
        async with aiohttp.ClientSession() as session:
            body = {**gen("a", 5).to_wire(), "stream": True}
            async with session.post(server.make_url("/v1/engine/generate"), json=body) as resp:
                assert resp.status == 200
                assert resp.headers["Content-Type"].startswith("application/x-ndjson")
                lines = [json.loads(line) for line in (await resp.read()).splitlines()]
        assert lines[0]["text"] == "abcd"
        assert lines[-1] == {"error": {"type": "UnknownContextError",
                                       "message": "context vanished"}}
        # an unexpected exception is a 500 with the JSON error form
        status, payload = await raw(server, "POST", "/v1/engine/fill",
                                    json.dumps({"context_id": "a", "text": "x"}).encode())
        assert (status, payload["error"]["type"]) == (500, "ParrotError")
    finally:
        await client.close()
        await server.close()


async def test_client_disconnect_mid_stream_frees_the_engine() -> None:
    engine = sim(SLOW)
    server, client = await serve(engine)
    try:
        async with aiohttp.ClientSession() as session:
            body = {**gen("a", 5_000).to_wire(), "stream": True}
            resp = await session.post(server.make_url("/v1/engine/generate"), json=body)
            assert json.loads(await resp.content.readline())["finish_reason"] is None
            resp.close()  # drop the connection mid-stream
        await until_idle(engine)
        assert (await client.fill(FillRequest("a", text="more"))).context_len < 5_000
        # the same through the client: leaving the stream early aborts the request
        stream = client.generate(gen("b", 5_000))
        await anext(stream)
        await stream.aclose()
        await until_idle(engine)
    finally:
        await client.close()
        await server.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_unreachable_engine_is_unavailable() -> None:
    client = HttpEngine(f"http://127.0.0.1:{_free_port()}", connect_timeout_s=1.0)
    try:
        with pytest.raises(EngineUnavailableError):
            await client.fill(FillRequest("a", text="x"))
        with pytest.raises(EngineUnavailableError):
            await anext(client.generate(gen("a", 1)))
        assert not await client.healthz()
        with pytest.raises(EngineUnavailableError, match="not healthy"):
            await client.wait_healthy(0.1)
    finally:
        await client.close()


def test_client_rejects_a_bad_url() -> None:
    with pytest.raises(InvalidRequestError):
        HttpEngine("localhost:8000")


# ---- secrets ---------------------------------------------------------------------------------

@pytest.mark.parametrize("method, path, body", [
    ("POST", "/v1/engine/fill", {"context_id": "a", "text": "secret prompt"}),
    ("POST", "/v1/engine/generate", {"context_id": "a", "sampling": {"max_tokens": 2}}),
    ("POST", "/v1/engine/free_context", {"context_id": "a"}),
    ("POST", "/v1/engine/batch", {"ops": [{"id": "1", "fill": {"context_id": "a",
                                                               "text": "secret prompt"}}]}),
    ("POST", "/v1/engine/abort", {"ids": ["1"]}),
    ("GET", "/v1/engine/stats", None),
    ("GET", "/v1/engine/info", None),
    ("POST", "/v1/engine/reset_prefix_cache", None),
])
async def test_engine_routes_need_the_engine_secret(method: str, path: str,
                                                     body: dict[str, Any] | None) -> None:
    engine = sim(SMALL)
    server, client = await serve(engine, secret="s3cret")
    try:
        data = None if body is None else json.dumps(body).encode()
        for headers in (None, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            status, payload = await raw(server, method, path, data, headers)
            assert (status, payload["error"]["type"]) == (401, "UnauthorizedError")
        assert (await engine.stats()).num_contexts == 0  # nothing reached the engine
        status, _ = await raw(server, "GET", "/healthz")  # the liveness probe stays open
        assert status == 200
        # the manager's client carries the secret
        assert (await client.fill(FillRequest("a", text="x" * 8))).context_len == 2
        assert (await client.info()).name == "sim"
    finally:
        await client.close()
        await server.close()


async def test_a_client_with_the_wrong_secret_gets_unauthorized() -> None:
    server, client = await serve(sim(SMALL), secret="s3cret", client_secret="guess")
    try:
        with pytest.raises(UnauthorizedError):
            await client.fill(FillRequest("a", text="x"))
        with pytest.raises(UnauthorizedError):
            await anext(client.generate(gen("a", 1)))
    finally:
        await client.close()
        await server.close()


# ---- max_tokens against the window --------------------------------------------------------------

class _EndlessEngine(_FailsMidStream):
    """Would generate whatever it is asked for (like an engine that stops only at its window)."""

    async def info(self) -> EngineInfo:
        return EngineInfo("endless", "fake", "m", 64, 16, 4)

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        yield GenerateChunk("done", (1,), "length")


async def test_max_tokens_beyond_the_context_window_is_refused() -> None:
    server, client = await serve(_EndlessEngine())
    try:
        with pytest.raises(InvalidRequestError, match="max_tokens=1000000 exceeds .* 64 tokens"):
            await client.generate_all(gen("a", 1_000_000))
        with pytest.raises(InvalidRequestError, match="context window"):
            await anext(client.generate(gen("a", 65)))
        assert (await client.generate_all(gen("a", 64))).text == "done"
    finally:
        await client.close()
        await server.close()


# ---- pool, timeouts, abort -----------------------------------------------------------------------

async def test_waiting_for_a_pooled_connection_is_not_a_connect_timeout() -> None:
    # Reproduction: 40 requests over 4 connections, each ~0.25 s, with a 0.1 s connect timeout:
    # the queued ones used to fail with ConnectionTimeoutError although the engine is alive.
    engine = sim({"decode_base_ms": 5.0, "decode_per_token_ms": 0.0})
    settings = HttpEngineSettings(connect_timeout_s=0.1, pool_size=4)
    server, client = await serve(engine, settings=settings)
    try:
        results = await asyncio.gather(*(client.generate_all(gen(f"c{i}", 50))
                                         for i in range(40)))
        assert [len(r.token_ids) for r in results] == [50] * 40
    finally:
        await client.close()
        await server.close()


async def test_a_request_past_request_timeout_is_an_engine_timeout() -> None:
    server, client = await serve(sim(SLOW), settings=HttpEngineSettings(request_timeout_s=0.2))
    try:
        with pytest.raises(EngineTimeoutError, match="request_timeout_s=0.2"):
            await client.generate_all(gen("a", 1_000))  # ~5 s of decoding
        with pytest.raises(EngineTimeoutError):
            async for _ in client.generate(gen("b", 1_000)):
                pass
        assert not client.is_down and await client.healthz()  # slow is not dead
    finally:
        await client.close()
        await server.close()


async def test_abort_requests_fails_in_flight_calls_until_a_probe_succeeds() -> None:
    engine = sim(SLOW)
    server, client = await serve(engine)
    try:
        await client.fill(FillRequest("kept", text="x" * 40))
        running = asyncio.ensure_future(client.generate_all(gen("a", 1_000)))
        streaming = client.generate(gen("b", 1_000))
        await anext(streaming)
        await asyncio.sleep(0.05)
        started = asyncio.get_running_loop().time()
        client.abort_requests("no heartbeat for 3 s")
        with pytest.raises(EngineUnavailableError, match="no heartbeat"):
            await running
        with pytest.raises(EngineUnavailableError, match="no heartbeat"):
            await anext(streaming)
        assert asyncio.get_running_loop().time() - started < 0.5
        # while down, requests fail at once; a free is remembered and delivered later
        with pytest.raises(EngineUnavailableError, match="is down"):
            await client.fill(FillRequest("c", text="x"))
        for context_id in ("kept", "a", "b"):  # as the manager frees a failed call's contexts
            with pytest.raises(EngineUnavailableError):
                await client.free_context(context_id)
        assert client.is_down
        assert await client.healthz()
        assert not client.is_down
        await until_idle(engine)
        assert (await client.stats()).num_contexts == 0  # all delivered
    finally:
        await client.close()
        await server.close()


def _full_listener() -> tuple[socket.socket, list[socket.socket]]:
    """A listening socket whose accept queue is full: new connects time out (SYNs dropped)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    fillers = []
    for _ in range(4):
        filler = socket.socket()
        filler.setblocking(False)
        try:
            filler.connect(listener.getsockname())
        except BlockingIOError:
            pass
        fillers.append(filler)
    return listener, fillers


async def test_a_connect_timeout_is_tried_again_not_an_engine_failure() -> None:
    from aiohttp import web

    listener, fillers = _full_listener()
    port = listener.getsockname()[1]
    client = HttpEngine(f"http://127.0.0.1:{port}", connect_timeout_s=0.2)
    runner = web.AppRunner(create_app(sim(SMALL)))
    try:
        loop = asyncio.get_running_loop()
        started = loop.time()
        request = asyncio.ensure_future(client.info())
        await asyncio.sleep(0.3)  # the first connect has timed out by now
        assert not request.done()
        for filler in fillers:   # the engine starts accepting: the next try gets through
            filler.close()
        listener.setblocking(False)
        try:
            while True:
                listener.accept()[0].close()
        except BlockingIOError:
            pass
        await runner.setup()
        await web.SockSite(runner, listener).start()
        assert (await request).name == "sim"
        assert loop.time() - started > 0.3
    finally:
        await client.close()
        await runner.cleanup()
        listener.close()


async def test_connect_timeouts_give_up_after_a_few_tries() -> None:
    from parrot.engines.client import CONNECT_ATTEMPTS

    listener, fillers = _full_listener()
    client = HttpEngine(f"http://127.0.0.1:{listener.getsockname()[1]}", connect_timeout_s=0.1)
    try:
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(EngineUnavailableError, match="ConnectionTimeoutError"):
            await client.fill(FillRequest("a", text="x"))
        assert loop.time() - started >= 0.1 * CONNECT_ATTEMPTS
    finally:
        await client.close()
        for sock in (listener, *fillers):
            sock.close()


class _Counting(_FailsMidStream):
    async def stats(self) -> EngineStats:
        return EngineStats(1, 2, 64, 60, 16, 40, 3, engine_counters(
            tpot_us_sum=9000, num_steps=12, step_ms=340, tpot_generates=2))


async def test_a_stats_reply_carries_the_counters_as_one_object() -> None:
    """GET /v1/engine/stats: the core fields, then `counters` as a JSON object of exactly the
    counters the engine keeps (in the registry's order); the client reads back the same."""
    engine = _Counting()
    server, client = await serve(engine)
    try:
        status, body = await raw(server, "GET", "/v1/engine/stats")
        assert status == 200
        assert body == {"num_running": 1, "num_waiting": 2, "num_blocks_total": 64,
                        "num_blocks_free": 60, "block_size": 16, "num_tokens_in_use": 40,
                        "num_contexts": 3, "counters": {"num_steps": 12, "step_ms": 340,
                                                        "tpot_generates": 2,
                                                        "tpot_us_sum": 9000}}
        stats = await client.stats()
        assert stats == await engine.stats()
        assert (stats.counter("num_steps"), stats.counter("gc_ms")) == (12, 0)
    finally:
        await client.close()
        await server.close()


async def test_a_prompt_in_a_generate_crosses_the_wire_with_its_length_back() -> None:
    """Over HTTP, streamed and whole: the info says the engine takes it, the first chunk (or
    the whole result) carries the prompt's length, and the tokens are the Fill-then-Generate
    ones; a Generate with both token ids and text is a 400 the client raises typed."""
    engine = sim(SMALL)
    server, client = await serve(engine)
    try:
        assert (await client.info()).takes_prompt_in_generate
        reference = sim(SMALL)   # (a simulated token depends on its context's id)
        await reference.fill(FillRequest("s", text="y" * 36))
        expected = await reference.generate_all(gen("s", 5))
        request = GenerateRequest("s", sampling=SamplingParams(max_tokens=5, seed=3),
                                  text="y" * 36)
        chunks = [c async for c in client.generate(request)]
        assert [c.prompt_len for c in chunks][:2] == [9, None]
        assert tuple(t for c in chunks for t in c.token_ids) == expected.token_ids
        whole = await client.generate_all(GenerateRequest(
            "w", "s", SamplingParams(max_tokens=2, seed=3), token_ids=(1, 2, 3)))
        assert (whole.prompt_len, len(whole.token_ids)) == (9 + 5 + 3, 2)
        status, payload = await raw(server, "POST", "/v1/engine/generate", json.dumps(
            {"context_id": "x", "token_ids": [1], "text": "a"}).encode())
        assert (status, payload["error"]["type"]) == (400, "InvalidRequestError")
        assert "at most one of token_ids and text" in payload["error"]["message"]
    finally:
        await client.close()
        await server.close()
