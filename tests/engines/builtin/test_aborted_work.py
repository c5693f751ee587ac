"""The builtin engine counts the work aborts threw away (`aborted_generates`,
`aborted_decode_tokens`): each Generate aborted before it finished once, with every token
decoded for it, however the abort came (a cancelled caller, a closed stream, a free of its
context, the batched route's abort or dropped connection); finished and failed work not."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp.test_utils import TestServer

from parrot.engines.builtin.engine import BuiltinEngine
from parrot.engines.builtin.runner import ModelRunner
from parrot.engines.client import HttpEngine
from parrot.engines.protocol import Engine, FillRequest, GenerateRequest
from parrot.engines.server import create_app
from parrot.errors import EngineError, UnknownContextError
from parrot.sampling import SamplingParams

LONG = SamplingParams(max_tokens=200, ignore_eos=True)


async def aborted(engine: Engine) -> tuple[int, int]:
    stats = await engine.stats()
    return stats.counter("aborted_generates"), stats.counter("aborted_decode_tokens")


async def length(engine: Engine, ctx: str) -> int:
    """The context's length now (a Fill of nothing appends nothing)."""
    return (await engine.fill(FillRequest(ctx, token_ids=()))).context_len


async def decoded_at_least(engine: Engine, n: int) -> None:
    while (await engine.stats()).counter("decode_tokens") < n:
        await asyncio.sleep(0.005)


async def test_a_cancelled_or_closed_generate_counts_what_it_decoded(tiny_bundle, make_engine):
    engine: BuiltinEngine = make_engine(tiny_bundle)
    await engine.fill(FillRequest("a", token_ids=(5, 9, 14, 3, 7)))
    await engine.generate_all(GenerateRequest("a", sampling=SamplingParams(max_tokens=4)))
    assert await aborted(engine) == (0, 0)          # finished: nothing thrown away
    # not streamed: its caller holds none of its tokens when it is cancelled
    before = await length(engine, "a")
    task = asyncio.ensure_future(engine.generate_all(GenerateRequest("a", sampling=LONG)))
    await decoded_at_least(engine, 4 + 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    decoded = await length(engine, "a") - before    # the context keeps what was decoded
    assert decoded >= 5 and await aborted(engine) == (1, decoded)
    # streamed, its stream closed after three chunks
    before = await length(engine, "a")
    stream = engine.generate(GenerateRequest("a", sampling=LONG))
    for _ in range(3):
        await anext(stream)
    await stream.aclose()
    closed = await length(engine, "a") - before
    assert closed >= 3 and await aborted(engine) == (2, decoded + closed)
    engine.check_invariants()


async def test_a_generate_freed_under_and_then_let_go_counts_once(tiny_bundle, make_engine):
    engine: BuiltinEngine = make_engine(tiny_bundle)
    await engine.fill(FillRequest("a", token_ids=(5, 9, 14, 3, 7)))
    stream = engine.generate(GenerateRequest("a", sampling=LONG))
    received = len((await anext(stream)).token_ids)
    await engine.free_context("a")
    with pytest.raises(UnknownContextError):        # the chunks emitted before the free first
        async for chunk in stream:
            received += len(chunk.token_ids)
    await stream.aclose()                            # its caller lets go too: no second count
    assert await aborted(engine) == (1, received)
    engine.check_invariants()


async def test_a_generate_failed_by_the_engine_is_not_aborted_work(tiny_bundle, make_engine):
    steps = [0]

    class BrokenLater(ModelRunner):
        def step(self, batch):
            steps[0] += 1
            if steps[0] > 4:     # the fill's step and three decodes, then the device is lost
                raise RuntimeError("device lost")
            return super().step(batch)

    engine: BuiltinEngine = make_engine(tiny_bundle, runner_type=BrokenLater)
    await engine.fill(FillRequest("a", token_ids=(5, 9, 14)))
    with pytest.raises(EngineError, match="device lost"):
        await engine.generate_all(GenerateRequest("a", sampling=LONG))
    assert await length(engine, "a") > 3 and await aborted(engine) == (0, 0)


async def test_ops_aborted_over_the_batched_route_count_once(smollm2_bundle, make_engine):
    """SmolLM2 behind the engine server, as the manager reaches it: a Generate that is not
    streamed, let go mid-way, aborted through the abort route (its batch mate runs on) or by
    its request's dropped connection (it ran alone)."""
    engine: BuiltinEngine = make_engine(smollm2_bundle, num_blocks=128)
    server = TestServer(create_app(engine))
    await server.start_server()
    client = HttpEngine(str(server.make_url("")))
    try:
        await client.fill(FillRequest("p", text="Once upon a time"))
        await client.fill(FillRequest("a", "p", token_ids=()))
        await client.fill(FillRequest("c", "p", token_ids=()))
        start = await length(client, "p")
        long = asyncio.ensure_future(client.generate_all(GenerateRequest("a", sampling=LONG)))
        short = asyncio.ensure_future(client.generate_all(
            GenerateRequest("b", "p", SamplingParams(max_tokens=12, ignore_eos=True))))
        await decoded_at_least(client, 8)
        long.cancel()
        assert len((await short).token_ids) == 12
        first = await length(client, "a") - start
        assert first >= 3 and await aborted(client) == (1, first)
        decoded = (await client.stats()).counter("decode_tokens")
        alone = asyncio.ensure_future(client.generate_all(GenerateRequest("c", sampling=LONG)))
        await decoded_at_least(client, decoded + 3)
        alone.cancel()
        for _ in range(200):       # the engine sees the dropped connection a moment later
            if (await aborted(client))[0] == 2:
                break
            await asyncio.sleep(0.01)
        second = await length(client, "c") - start
        assert second >= 3 and await aborted(client) == (2, first + second)
    finally:
        await client.close()
        await server.close()
