"""An engine's port costs an unauthenticated client O(1) (parrot/engines/server.py
`GuardedRunner`): no secret in the first request within the deadline, and the connection is
closed; a wrong secret is a 401 that closes it without reading the body; waiting and open
connections are capped; the manager's authenticated connections are untouched by all of it."""

from __future__ import annotations

import asyncio
import time

from aiohttp import web

from parrot.engines.client import HttpEngine
from parrot.engines.server import ConnectionGuard, GuardedRunner, create_app
from parrot.engines.simulated import SimulatedEngine, SimulatedEngineConfig

SECRET = "engine-secret-0123456789"


async def _serve(guard: ConnectionGuard, body_timeout_s: float = 30.0):
    engine = SimulatedEngine("sim", SimulatedEngineConfig.from_mapping({"zero_latency": True}))
    runner = GuardedRunner(create_app(engine, secret=SECRET, body_timeout_s=body_timeout_s),
                           guard, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, port


async def _closed_within(reader: asyncio.StreamReader, seconds: float) -> tuple[bool, bytes]:
    """Whether the server closed the connection within `seconds`, and what it sent."""
    data = b""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            chunk = await asyncio.wait_for(reader.read(65536), left)
        except TimeoutError:
            return False, data
        except ConnectionError:
            return True, data
        if not chunk:
            return True, data
        data += chunk
    return False, data


async def test_a_silent_or_slow_connection_is_closed_at_the_first_request_deadline():
    runner, port = await _serve(ConnectionGuard(first_request_timeout_s=0.3))
    try:
        idle = await asyncio.open_connection("127.0.0.1", port)
        slow = await asyncio.open_connection("127.0.0.1", port)
        slow[1].write(b"GET /v1/engine/info HTTP/1.1\r\nHost: x\r\n")  # never finishes
        start = time.monotonic()
        for reader, _ in (idle, slow):
            closed, _ = await _closed_within(reader, 3)
            assert closed
        assert time.monotonic() - start < 1.5
        for _, writer in (idle, slow):
            writer.close()
    finally:
        await runner.cleanup()


async def test_a_wrong_secret_is_a_401_that_closes_the_connection_unread():
    runner, port = await _serve(ConnectionGuard())
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /v1/engine/fill HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer no\r\n"
                     b"Content-Length: 4194304\r\n\r\n{")
        start = time.monotonic()
        closed, answer = await _closed_within(reader, 3)
        assert closed and answer.startswith(b"HTTP/1.1 401"), answer[:200]
        assert time.monotonic() - start < 1
        writer.close()
    finally:
        await runner.cleanup()


async def test_waiting_connections_are_capped_and_the_manager_still_gets_through():
    guard = ConnectionGuard(first_request_timeout_s=30, max_unauthenticated=8)
    runner, port = await _serve(guard)
    client = HttpEngine(f"http://127.0.0.1:{port}", secret=SECRET)
    try:
        attackers = [await asyncio.open_connection("127.0.0.1", port) for _ in range(40)]
        await asyncio.sleep(0.1)
        assert len(guard.waiting) <= 8 and guard.closed_unauthenticated >= 32
        assert (await client.info()).max_context_len > 0  # a fresh, authenticated connection
        await asyncio.sleep(0.1)
        still_open = 0
        for reader, _ in attackers:
            closed, _ = await _closed_within(reader, 0.01)
            still_open += not closed
        assert still_open <= 8
        # The manager's connection is authenticated: not counted among the waiting, and kept.
        await asyncio.sleep(0.2)
        assert (await client.stats()) is not None
        for _, writer in attackers:
            writer.close()
    finally:
        await client.close()
        await runner.cleanup()


async def test_an_authenticated_connection_outlives_the_first_request_deadline():
    guard = ConnectionGuard(first_request_timeout_s=0.2)
    runner, port = await _serve(guard)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        request = (b"GET /v1/engine/info HTTP/1.1\r\nHost: x\r\n"
                   b"Authorization: Bearer " + SECRET.encode() + b"\r\n\r\n")
        writer.write(request)
        await asyncio.sleep(0.6)  # past the deadline, on the same connection
        writer.write(request)
        closed, answer = await _closed_within(reader, 0.5)
        assert not closed and answer.count(b"HTTP/1.1 200") == 2
        writer.close()
    finally:
        await runner.cleanup()


async def test_connections_past_the_cap_are_closed_at_once():
    guard = ConnectionGuard(first_request_timeout_s=30, max_unauthenticated=100,
                            max_connections=5)
    runner, port = await _serve(guard)
    try:
        conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(8)]
        await asyncio.sleep(0.1)
        assert guard.open == 5
        closed = [(await _closed_within(reader, 0.05))[0] for reader, _ in conns]
        assert closed.count(True) == 3
        for _, writer in conns:
            writer.close()
    finally:
        await runner.cleanup()


async def test_a_body_that_does_not_arrive_is_a_408():
    runner, port = await _serve(ConnectionGuard(), body_timeout_s=0.3)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /v1/engine/free_context HTTP/1.1\r\nHost: x\r\n"
                     b"Authorization: Bearer " + SECRET.encode() + b"\r\n"
                     b"Content-Length: 100\r\n\r\n{\"context_id\"")
        closed, answer = await _closed_within(reader, 3)
        assert closed and answer.startswith(b"HTTP/1.1 408"), answer[:200]
        writer.close()
    finally:
        await runner.cleanup()


async def test_a_dropped_non_streamed_generate_stops_decoding():
    """The manager cancels a call (its session deleted, its OpenAI client gone): the engine
    must stop generating for it, also when the Generate was not streamed."""
    engine = SimulatedEngine("sim", SimulatedEngineConfig.from_mapping(
        {"decode_base_ms": 20.0, "decode_per_seq_ms": 0.0, "decode_per_token_ms": 0.0,
         "prefill_per_token_ms": 0.0}))
    runner = GuardedRunner(create_app(engine, secret=SECRET), ConnectionGuard(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    client = HttpEngine(f"http://127.0.0.1:{runner.addresses[0][1]}", secret=SECRET)
    try:
        from parrot.engines.protocol import FillRequest, GenerateRequest
        from parrot.sampling import SamplingParams
        await client.fill(FillRequest("c1", text="hello"))
        generate = asyncio.create_task(client.generate_all(GenerateRequest(
            "c1", sampling=SamplingParams(max_tokens=2000, ignore_eos=True))))
        await asyncio.sleep(0.3)
        assert (await engine.stats()).num_running == 1
        generate.cancel()
        await asyncio.gather(generate, return_exceptions=True)
        for _ in range(50):
            if (await engine.stats()).num_running == 0:
                break
            await asyncio.sleep(0.02)
        assert (await engine.stats()).num_running == 0
    finally:
        await client.close()
        await runner.cleanup()
