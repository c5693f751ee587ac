"""HttpEngine over the batched route (parrot/engines/batch_client.py): ops asked for together
leave in few requests and come back as they would alone; one op's error, early exit or
timeout touches no other op; an engine without the batch route is served op by op."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from parrot.engines.batch_client import MAX_OPS_PER_REQUEST
from parrot.engines.batch_wire import ABORT_PATH, BATCH_PATH
from parrot.engines.client import EngineTimeoutError, HttpEngine, HttpEngineSettings
from parrot.engines.protocol import (Engine, EngineInfo, EngineStats, FillRequest, FillResult,
                                     GenerateChunk, GenerateRequest, GenerateResult)
from parrot.engines.server import GuardedRunner, create_app
from tests.engines.sim_helpers import sim, until_idle
from parrot.errors import EngineUnavailableError, UnknownContextError
from parrot.sampling import SamplingParams

FAST = {"zero_latency": True, "num_blocks": 4096}
SLOW = {"decode_base_ms": 5.0, "decode_per_token_ms": 0.0}


def gen(ctx: str, n: int, parent: str | None = None, **sampling: Any) -> GenerateRequest:
    return GenerateRequest(ctx, parent, SamplingParams(max_tokens=n, seed=3, **sampling))


class Recorded:
    """What reached the engine's app: each request's path, and each batch's number of ops."""

    def __init__(self, app: web.Application, *, refuse_batch: bool = False,
                 batch_delay_s: float = 0.0) -> None:
        self.paths: list[str] = []
        self.batch_sizes: list[int] = []
        self.refuse_batch = refuse_batch
        self.batch_delay_s = batch_delay_s
        app.middlewares.append(self.record)

    @web.middleware
    async def record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.paths.append(request.path)
        if request.path == BATCH_PATH:
            if self.refuse_batch:  # an engine of the protocol's first version
                raise web.HTTPNotFound()
            self.batch_sizes.append(len((await request.json())["ops"]))
            await asyncio.sleep(self.batch_delay_s)  # a busy engine, slow to answer
        return await handler(request)


async def serve(engine: Engine, *, refuse_batch: bool = False, batch_delay_s: float = 0.0,
                settings: HttpEngineSettings | None = None
                ) -> tuple[TestServer, HttpEngine, Recorded]:
    app = create_app(engine)
    recorded = Recorded(app, refuse_batch=refuse_batch, batch_delay_s=batch_delay_s)
    server = TestServer(app)
    await server.start_server()
    return server, HttpEngine(str(server.make_url("")), settings=settings), recorded


async def collect(stream: Any) -> GenerateResult:
    chunks = [chunk async for chunk in stream]
    assert all(c.finish_reason is None for c in chunks[:-1])
    return GenerateResult("".join(c.text for c in chunks),
                          tuple(t for c in chunks for t in c.token_ids), chunks[-1].finish_reason)


async def test_concurrent_generates_leave_in_one_request_and_match_the_engine() -> None:
    twin = sim(FAST)
    await twin.start()
    server, client, recorded = await serve(sim(FAST))
    try:
        requests = [gen(f"s{i}", 8 + i % 5) for i in range(64)]
        wholes = [gen(f"w{i}", 8 + i % 3) for i in range(64)]
        got = await asyncio.gather(*(collect(client.generate(r)) for r in requests),
                                   *(client.generate_all(r) for r in wholes))
        # the whole answers carry their first token's time, from this run's engine
        assert all(r.first_token_s is not None and r.first_token_s > 0 for r in got[64:])
        got = [dataclasses.replace(r, first_token_s=None) for r in got]
        expected = [dataclasses.replace(await twin.generate_all(r), first_token_s=None)
                    for r in requests + wholes]
        assert got == expected
        assert recorded.paths == [BATCH_PATH] and recorded.batch_sizes == [128]
    finally:
        await client.close()
        await server.close()
        await twin.close()


async def test_a_request_carries_at_most_its_bound_of_ops() -> None:
    server, client, recorded = await serve(sim(FAST))
    try:
        n = 2 * MAX_OPS_PER_REQUEST + 88
        filled = await asyncio.gather(*(client.fill(FillRequest(f"c{i}", text="abcd" * 3))
                                        for i in range(n)))
        assert filled == [FillResult(f"c{i}", 3, 3) for i in range(n)]
        assert recorded.batch_sizes == [MAX_OPS_PER_REQUEST, MAX_OPS_PER_REQUEST, 88]
        await asyncio.gather(*(client.free_context(f"c{i}") for i in range(n)))
        assert (await client.stats()).num_contexts == 0
    finally:
        await client.close()
        await server.close()


async def test_one_ops_error_leaves_its_batch_mates_alone() -> None:
    server, client, recorded = await serve(sim(FAST))
    try:
        got = await asyncio.gather(
            client.fill(FillRequest("a", text="x" * 8)),
            client.fill(FillRequest("b", "missing", text="x")),
            client.generate_all(gen("c", 4)),
            collect(client.generate(gen("d", 4, parent="missing"))),
            client.free_context("never"),
            return_exceptions=True)
        assert got[0] == FillResult("a", 2, 2)
        assert isinstance(got[2], GenerateResult) and len(got[2].token_ids) == 4
        assert [type(g) for g in (got[1], got[3], got[4])] == [UnknownContextError] * 3
        assert recorded.batch_sizes == [5]
    finally:
        await client.close()
        await server.close()


async def test_an_op_let_go_early_is_aborted_and_its_batch_mate_runs_on() -> None:
    engine = sim(SLOW)
    server, client, recorded = await serve(engine)
    try:
        long = client.generate(gen("a", 5_000, ignore_eos=True))
        short = client.generate(gen("b", 40, ignore_eos=True))
        await asyncio.gather(anext(long), anext(short))
        assert recorded.batch_sizes == [2]
        await long.aclose()
        rest = await collect(short)
        assert rest.finish_reason == "length"
        await until_idle(engine)
        assert recorded.paths.count(ABORT_PATH) == 1
        # the aborted Generate stopped where it was let go
        assert (await client.fill(FillRequest("a", text="more"))).context_len < 100
    finally:
        await client.close()
        await server.close()


async def test_an_op_let_go_before_the_engine_answered_is_aborted_once_it_has() -> None:
    engine = sim(SLOW)
    server, client, recorded = await serve(engine, batch_delay_s=0.3)
    try:
        long = asyncio.ensure_future(collect(client.generate(gen("a", 5_000, ignore_eos=True))))
        short = asyncio.ensure_future(collect(client.generate(gen("b", 40, ignore_eos=True))))
        await asyncio.sleep(0.1)  # sent; the engine has not answered
        long.cancel()
        assert (await short).finish_reason == "length"
        await until_idle(engine)  # an abort sent at once would have found nothing to abort
        assert recorded.paths == [BATCH_PATH, ABORT_PATH]
    finally:
        await client.close()
        await server.close()


async def test_the_engine_counts_what_it_decoded_for_ops_aborted_over_http() -> None:
    """Generates that are not streamed (their tokens come back only at their end), let go
    mid-way: the engine counts each and every token it decoded for it (what its context
    kept), whether it was aborted through the abort route (a batch mate ran on) or by its
    request's connection dropped; a finished batch mate counts nothing."""
    engine = sim(SLOW)
    server, client, recorded = await serve(engine)

    async def decoded_at_least(n: int) -> None:
        while (await client.stats()).counter("decode_tokens") < n:
            await asyncio.sleep(0.01)

    async def kept(ctx: str) -> int:
        return (await client.fill(FillRequest(ctx, text=""))).context_len

    try:
        long = asyncio.ensure_future(client.generate_all(gen("a", 5_000, ignore_eos=True)))
        short = asyncio.ensure_future(client.generate_all(gen("b", 40, ignore_eos=True)))
        await decoded_at_least(20)
        long.cancel()
        assert (await short).finish_reason == "length"
        await until_idle(engine)
        assert recorded.paths.count(ABORT_PATH) == 1
        stats = await client.stats()
        assert stats.counter("aborted_generates") == 1
        assert stats.counter("aborted_decode_tokens") == await kept("a") >= 10
        alone = asyncio.ensure_future(client.generate_all(gen("c", 5_000, ignore_eos=True)))
        await decoded_at_least(stats.counter("decode_tokens") + 10)
        alone.cancel()
        await until_idle(engine)
        assert recorded.paths.count(ABORT_PATH) == 1   # its connection dropped instead
        again = await client.stats()
        assert again.counter("aborted_generates") == 2
        assert again.counter("aborted_decode_tokens") == await kept("a") + await kept("c")
        assert await kept("c") >= 10
    finally:
        await client.close()
        await server.close()


class _Hangs(Engine):
    """Fills that never finish; it counts the ones that were aborted."""

    def __init__(self) -> None:
        self.aborted = 0

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def info(self) -> EngineInfo:
        return EngineInfo("h", "fake", "m", 64, 1, 1)

    async def fill(self, request: FillRequest) -> FillResult:
        try:
            await asyncio.Event().wait()
        finally:
            self.aborted += 1
        raise AssertionError("unreachable")

    async def generate(self, request: GenerateRequest) -> Any:
        yield GenerateChunk("", (), "length")

    async def free_context(self, context_id: str) -> None: ...

    async def stats(self) -> EngineStats:
        return EngineStats(0, 0, 1, 1, 1, 0, 0)


async def test_a_stalled_batch_times_out_and_the_engine_drops_its_ops() -> None:
    engine = _Hangs()
    runner = GuardedRunner(create_app(engine))  # as parrot-engine serves
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    client = HttpEngine(f"http://127.0.0.1:{runner.addresses[0][1]}",
                        settings=HttpEngineSettings(request_timeout_s=0.3))
    try:
        started = asyncio.get_running_loop().time()
        got = await asyncio.gather(*(client.fill(FillRequest(f"c{i}", text="x"))
                                     for i in range(3)), return_exceptions=True)
        assert [type(g) for g in got] == [EngineTimeoutError] * 3
        assert asyncio.get_running_loop().time() - started < 1.0
        for _ in range(100):
            if engine.aborted == 3:
                break
            await asyncio.sleep(0.01)
        assert engine.aborted == 3
        assert not client.is_down  # slow is not dead
    finally:
        await client.close()
        await runner.cleanup()


async def test_closing_the_client_fails_its_ops_in_flight() -> None:
    server, client, _ = await serve(sim(SLOW))
    try:
        stream = client.generate(gen("a", 5_000, ignore_eos=True))
        await anext(stream)
        pending = asyncio.ensure_future(client.generate_all(gen("b", 5_000, ignore_eos=True)))
        await asyncio.sleep(0.05)
        await client.close()
        with pytest.raises(EngineUnavailableError, match="closed"):
            await anext(stream)
        with pytest.raises(EngineUnavailableError, match="closed"):
            await pending
    finally:
        await client.close()
        await server.close()


async def test_an_engine_without_the_batch_route_is_served_op_by_op() -> None:
    server, client, recorded = await serve(sim(FAST), refuse_batch=True)
    try:
        assert await client.fill(FillRequest("p", text="x" * 8)) == FillResult("p", 2, 2)
        streamed = await collect(client.generate(gen("a", 6, parent="p")))
        whole = await client.generate_all(gen("b", 6, parent="p"))
        assert len(streamed.token_ids) == len(whole.token_ids) == 6
        await client.free_context("a")
        assert recorded.paths == [BATCH_PATH, "/v1/engine/fill", "/v1/engine/generate",
                                  "/v1/engine/generate", "/v1/engine/free_context"]
    finally:
        await client.close()
        await server.close()
