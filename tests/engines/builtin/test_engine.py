"""The builtin engine's protocol semantics on the `tiny` random-weight shape (float64, CPU)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time

import pytest

from parrot.engines.builtin.batch_scheduler import Batch, BatchScheduler
from parrot.engines.builtin.engine import BuiltinEngine
from parrot.engines.builtin.runner import ModelRunner
from parrot.engines.protocol import FillRequest, GenerateRequest
from parrot.errors import (ContextExistsError, EngineError, InvalidRequestError,
                           PromptTooLongError, UnknownContextError)
from parrot.sampling import SamplingParams

GREEDY = SamplingParams(max_tokens=6, ignore_eos=True)


def prompt(seed: int, n: int) -> tuple[int, ...]:
    rng = random.Random(seed)
    return tuple(rng.randrange(3, 500) for _ in range(n))


async def fill(engine: BuiltinEngine, ctx: str, tokens: tuple[int, ...] = (),
               parent: str | None = None) -> int:
    result = await engine.fill(FillRequest(ctx, parent, token_ids=tokens))
    return result.context_len


async def generate(engine: BuiltinEngine, ctx: str, params: SamplingParams = GREEDY,
                   parent: str | None = None) -> tuple[int, ...]:
    result = await engine.generate_all(GenerateRequest(ctx, parent, params))
    return result.token_ids


async def test_fill_generate_appends_to_context(tiny_bundle, make_engine):
    engine = make_engine(tiny_bundle)
    assert await fill(engine, "a", prompt(1, 10)) == 10
    out = await generate(engine, "a")
    assert len(out) == 6
    stats = await engine.stats()
    assert (stats.num_contexts, stats.num_tokens_in_use, stats.num_running) == (1, 16, 0)
    # the generated tokens stay in the context: a second fill appends after them
    assert await fill(engine, "a", (7, 8)) == 18
    engine.check_invariants()


async def test_fork_matches_fill_from_scratch_and_shares_full_blocks(tiny_bundle, make_engine):
    engine = make_engine(tiny_bundle, block_size=4, num_blocks=64)
    prefix, suffix = prompt(2, 22), prompt(3, 5)
    await fill(engine, "parent", prefix)               # 21 tokens in KV: 5 full blocks + 1
    free_before = (await engine.stats()).num_blocks_free
    await fill(engine, "child", (), parent="parent")   # a pure fork
    assert (await engine.stats()).num_blocks_free == free_before - 1  # only the partial copy
    parent_table = engine.block_table("parent")
    child_table = engine.block_table("child")
    assert child_table[:5] == parent_table[:5] and child_table[5] != parent_table[5]
    await fill(engine, "child", suffix)
    forked = await generate(engine, "child")
    await fill(engine, "scratch", prefix + suffix)
    assert forked == await generate(engine, "scratch")
    # a fork and generate in one request gives the same as generate on a filled copy
    assert await generate(engine, "g", parent="parent") == await generate(engine, "parent")
    engine.check_invariants()


async def test_freeing_parent_keeps_children(tiny_bundle, make_engine):
    engine = make_engine(tiny_bundle, block_size=4)
    await fill(engine, "p", prompt(4, 17))
    await fill(engine, "c", (), parent="p")
    await fill(engine, "ref", prompt(4, 17))
    await engine.free_context("p")
    assert await generate(engine, "c") == await generate(engine, "ref")
    for ctx in ("c", "ref"):
        await engine.free_context(ctx)
    stats = await engine.stats()
    assert stats.num_blocks_free == stats.num_blocks_total
    engine.check_invariants()


async def one_at_a_time(engine: BuiltinEngine, prompts: dict[str, tuple[int, ...]]
                        ) -> dict[str, tuple[int, ...]]:
    """Each prompt filled and generated alone, in turn: the reference outputs."""
    outputs = {}
    for ctx, tokens in prompts.items():
        await fill(engine, ctx, tokens)
        outputs[ctx] = await generate(engine, ctx)
    return outputs


async def all_at_once(engine: BuiltinEngine, prompts: dict[str, tuple[int, ...]]
                      ) -> dict[str, tuple[int, ...]]:
    """Every prompt filled and generated concurrently (batched by the engine)."""
    async def run(ctx: str) -> tuple[int, ...]:
        await fill(engine, ctx, prompts[ctx])
        return await generate(engine, ctx)

    return dict(zip(prompts, await asyncio.gather(*(run(ctx) for ctx in prompts))))


async def test_batched_equals_one_at_a_time(tiny_bundle, make_engine):
    prompts = {f"c{i}": prompt(10 + i, 5 + 7 * i) for i in range(5)}
    expected = await one_at_a_time(make_engine(tiny_bundle), prompts)
    # small token budget: prefills are chunked and mixed with the other requests' decodes
    batched = make_engine(tiny_bundle, max_batch_tokens=8, max_num_seqs=3)
    assert await all_at_once(batched, prompts) == expected


async def test_kv_pressure_preempts_and_gives_same_tokens(tiny_bundle, make_engine):
    prompts = [prompt(20 + i, 14) for i in range(4)]
    roomy = make_engine(tiny_bundle, block_size=4, num_blocks=64)
    expected = []
    for i, tokens in enumerate(prompts):
        await fill(roomy, f"x{i}", tokens)
        expected.append(await generate(roomy, f"x{i}", SamplingParams(max_tokens=8,
                                                                       ignore_eos=True)))
    # 4 requests x 22 tokens need 24 blocks; 8 blocks force eviction and recomputation
    tight = make_engine(tiny_bundle, block_size=4, num_blocks=8)

    async def run(i: int) -> tuple[int, ...]:
        await fill(tight, f"x{i}", prompts[i])
        return await generate(tight, f"x{i}", SamplingParams(max_tokens=8, ignore_eos=True))

    assert list(await asyncio.gather(*(run(i) for i in range(4)))) == expected
    tight.check_invariants()


async def test_errors_are_typed_and_engine_keeps_serving(tiny_bundle, make_engine):
    engine = make_engine(tiny_bundle, max_context_len=32)
    with pytest.raises(UnknownContextError):
        await generate(engine, "nobody")
    with pytest.raises(UnknownContextError):
        await fill(engine, "child", (1, 2), parent="no-such-parent")
    await fill(engine, "p", (1, 2, 3))
    await engine.free_context("p")
    with pytest.raises(UnknownContextError):
        await fill(engine, "child", (4,), parent="p")        # fork of a freed context
    with pytest.raises(UnknownContextError):
        await engine.free_context("p")
    with pytest.raises(PromptTooLongError):
        await fill(engine, "long", prompt(5, 33))
    await fill(engine, "full", prompt(5, 32))
    with pytest.raises(PromptTooLongError):
        await generate(engine, "full")
    with pytest.raises(InvalidRequestError):
        await fill(engine, "big-id", (10_000,))               # outside the vocabulary
    with pytest.raises(InvalidRequestError):
        await generate(engine, "full", SamplingParams(stop=("x",)))  # no tokenizer
    with pytest.raises(InvalidRequestError):
        GenerateRequest.from_wire({"context_id": "a", "sampling": {"top_p": 0}})
    await fill(engine, "q", (1, 2))
    with pytest.raises(ContextExistsError):
        await fill(engine, "q", (3,), parent="full")           # exists with another parent
    assert await fill(engine, "ok", (5, 6, 7)) == 3            # still serving
    assert len(await generate(engine, "ok")) == 6
    engine.check_invariants()


async def test_busy_context_and_free_while_busy(tiny_bundle, make_engine):
    engine = make_engine(tiny_bundle)
    await fill(engine, "a", prompt(6, 8))
    long = SamplingParams(max_tokens=200, ignore_eos=True)
    stream = engine.generate(GenerateRequest("a", sampling=long))
    first = await stream.__anext__()
    assert len(first.token_ids) == 1
    with pytest.raises(ContextExistsError):
        await fill(engine, "a", (1,))
    await engine.free_context("a")
    with pytest.raises(UnknownContextError):
        async for _ in stream:
            pass
    await fill(engine, "b", (1, 2, 3))
    assert len(await generate(engine, "b")) == 6
    engine.check_invariants()


async def test_fork_of_busy_parent_waits_for_it(tiny_bundle, make_engine):
    engine = make_engine(tiny_bundle, max_batch_tokens=4)     # the parent fill takes 5 steps
    fill_parent = asyncio.create_task(fill(engine, "p", prompt(7, 20)))
    await asyncio.sleep(0)
    child = asyncio.create_task(fill(engine, "c", (9, 9), parent="p"))
    assert await child == 22                                   # saw all 20 parent tokens
    await fill_parent
    await fill(engine, "ref", prompt(7, 20) + (9, 9))
    assert await generate(engine, "c") == await generate(engine, "ref")


async def test_abandoned_generate_frees_the_context_for_reuse(tiny_bundle, make_engine):
    engine = make_engine(tiny_bundle)
    await fill(engine, "a", prompt(8, 8))
    stream = engine.generate(GenerateRequest("a", sampling=SamplingParams(max_tokens=100,
                                                                        ignore_eos=True)))
    async with contextlib.aclosing(stream):                    # closing the stream aborts
        async for _chunk in stream:
            break
    assert await fill(engine, "a", (1,)) > 9                   # idle again, tokens kept
    assert len(await generate(engine, "a")) == 6
    engine.check_invariants()


async def test_seeded_sampling_is_reproducible_and_batch_independent(tiny_bundle, make_engine):
    params = SamplingParams(max_tokens=8, temperature=1.0, top_k=50, top_p=0.9, seed=1234,
                            ignore_eos=True)
    engine = make_engine(tiny_bundle)
    await fill(engine, "a", prompt(9, 6))
    await fill(engine, "b", (), parent="a")
    await fill(engine, "c", (), parent="a")
    alone = await generate(engine, "a", params)
    noisy = SamplingParams(max_tokens=8, temperature=1.0, seed=99, ignore_eos=True)
    together, _ = await asyncio.gather(generate(engine, "b", params),
                                       generate(engine, "c", noisy))
    assert alone == together


async def test_stop_token_ids_and_max_tokens(tiny_bundle, make_engine):
    engine = make_engine(tiny_bundle)
    await fill(engine, "a", prompt(11, 6))
    await fill(engine, "b", (), parent="a")
    free_run = await generate(engine, "a", SamplingParams(max_tokens=5, ignore_eos=True))
    result = await engine.generate_all(GenerateRequest("b", sampling=SamplingParams(
        max_tokens=5, stop_token_ids=(free_run[2],), ignore_eos=True)))
    assert result.token_ids == free_run[:free_run.index(free_run[2]) + 1]
    assert result.finish_reason == "stop"


@pytest.mark.parametrize("seed", [2024, 7, 99])
async def test_randomized_fill_fork_generate_free_keeps_kv_invariants(tiny_bundle, make_engine,
                                                                      seed):
    rng = random.Random(seed)
    engine = make_engine(tiny_bundle, block_size=4, num_blocks=24, max_context_len=96)
    live: list[str] = []
    for step in range(60):
        op = rng.choice(["fill", "fork", "generate", "free", "burst"])
        if op == "fill" or not live:
            name = f"c{step}"
            await fill(engine, name, prompt(step, rng.randrange(1, 20)))
            live.append(name)
        elif op == "fork":
            name = f"c{step}"
            await fill(engine, name, prompt(step, rng.randrange(0, 6)), parent=rng.choice(live))
            live.append(name)
        elif op == "generate":
            ctx = rng.choice(live)
            try:
                await generate(engine, ctx, SamplingParams(max_tokens=rng.randrange(1, 5),
                                                           ignore_eos=True))
            except PromptTooLongError:
                pass                                             # the context is full
        elif op == "free":
            ctx = live.pop(rng.randrange(len(live)))
            await engine.free_context(ctx)
        else:                                                    # concurrent forks + generate
            parent = rng.choice(live)
            names = [f"c{step}_{i}" for i in range(3)]
            await asyncio.gather(*(generate(engine, n, SamplingParams(max_tokens=3,
                                                                      ignore_eos=True), parent)
                                   for n in names), return_exceptions=False)
            live.extend(names)
        engine.check_invariants()  # includes: free + used blocks == total
    for ctx in live:
        await engine.free_context(ctx)
    engine.check_invariants()
    stats = await engine.stats()
    assert (stats.num_blocks_free, stats.num_contexts) == (stats.num_blocks_total, 0)


async def test_info_and_stats(tiny_bundle, make_engine):
    engine = make_engine(tiny_bundle, block_size=8, num_blocks=32)
    info = await engine.info()
    assert (info.kind, info.model, info.block_size, info.num_blocks_total,
            info.max_context_len) == ("builtin", "tiny", 8, 32, 256)
    stats = await engine.stats()
    assert (stats.num_blocks_free, stats.num_contexts, stats.num_waiting) == (32, 0, 0)
    assert await engine.healthz()


async def test_stats_count_each_finished_generates_time_per_output_token(tiny_bundle,
                                                                        make_engine):
    class TenMsSteps(ModelRunner):
        def step(self, batch):
            time.sleep(0.01)
            return super().step(batch)

    engine = make_engine(tiny_bundle, runner_type=TenMsSteps)
    await fill(engine, "a", prompt(3, 6))
    await fill(engine, "b", prompt(4, 6))
    five = SamplingParams(max_tokens=5, ignore_eos=True)
    await generate(engine, "a", five)
    await generate(engine, "b", SamplingParams(max_tokens=1, ignore_eos=True))  # no TPOT
    stats = await engine.stats()
    # one Generate timed: its 4 tokens after the first each took a step of >= 10 ms
    assert stats.counter("tpot_generates") == 1
    assert 10_000 <= stats.counter("tpot_us_sum") < 1_000_000
    await generate(engine, "a", five)
    again = await engine.stats()
    assert again.counter("tpot_generates") == 2
    assert again.counter("tpot_us_sum") >= stats.counter("tpot_us_sum") + 10_000


async def test_a_failing_model_step_fails_only_its_requests(tiny_bundle, make_engine):
    fail_next = [False]

    class BrokenOnce(ModelRunner):
        def step(self, batch):
            if fail_next[0]:
                fail_next[0] = False
                raise RuntimeError("device lost")
            return super().step(batch)

    engine = make_engine(tiny_bundle, runner_type=BrokenOnce)
    await fill(engine, "a", prompt(12, 5))
    fail_next[0] = True
    with pytest.raises(EngineError, match="device lost"):
        await generate(engine, "a")
    assert len(await generate(engine, "a")) == 6               # same context, served again
    assert await engine.healthz()                               # a step fault is not sickness
    engine.check_invariants()


async def test_decodes_and_prefill_apart_give_the_same_tokens(tiny_bundle, make_engine):
    """max_mixed_decode_rows 1: with two or more streams running, a joining prompt's chunks
    run in steps of their own between decode steps; every output is what it is one request
    at a time."""
    prompts = {f"c{i}": prompt(40 + i, 5 + 7 * i) for i in range(5)}
    expected = await one_at_a_time(make_engine(tiny_bundle), prompts)
    seen: list[tuple[int, int]] = []     # (decode rows, prefill tokens) of each step

    class Recording(BatchScheduler):
        def schedule(self, *, decode_only: bool = False) -> Batch | None:
            batch = super().schedule(decode_only=decode_only)
            if batch is not None:
                seen.append((batch.decode_rows, batch.prefill_tokens))
            return batch

    apart = make_engine(tiny_bundle, scheduler_type=Recording, max_batch_tokens=8,
                        max_num_seqs=4, max_mixed_decode_rows=1)
    assert await all_at_once(apart, prompts) == expected
    assert not [step for step in seen if step[0] > 1 and step[1] > 0]      # never mixed
    assert [step for step in seen if step[0] > 1] and [step for step in seen if step[0] == 0]
    apart.check_invariants()
