"""Automatic prefix caching in the builtin engine (`prefix_caching: true`): a context filled
from scratch reuses the KV blocks of its longest prefix any earlier context computed, freed or
not, and generates exactly what it would from a full prefill (`tiny`, float64, CPU)."""

from __future__ import annotations

import asyncio
import random

import pytest

from parrot.engines.builtin.engine import BuiltinEngine
from parrot.engines.protocol import FillRequest, GenerateRequest
from parrot.errors import PromptTooLongError
from parrot.sampling import SamplingParams

GREEDY = SamplingParams(max_tokens=6, ignore_eos=True)


def tokens(seed: int, n: int) -> tuple[int, ...]:
    rng = random.Random(seed)
    return tuple(rng.randrange(3, 500) for _ in range(n))


async def fill_generate(engine: BuiltinEngine, ctx: str, prompt: tuple[int, ...],
                        params: SamplingParams = GREEDY) -> tuple[int, ...]:
    await engine.fill(FillRequest(ctx, None, token_ids=prompt))
    return (await engine.generate_all(GenerateRequest(ctx, None, params))).token_ids


async def counters(engine: BuiltinEngine) -> tuple[int, int, int]:
    """(prefill tokens, prefix-cache query tokens, hit tokens) so far."""
    stats = await engine.stats()
    return (stats.counter("prefill_tokens"), stats.counter("prefix_cache_query_tokens"),
            stats.counter("prefix_cache_hit_tokens"))


async def test_a_new_request_skips_the_prefill_of_a_freed_requests_prefix(tiny_bundle,
                                                                          make_engine):
    system, first, second = tokens(1, 22), tokens(2, 5), tokens(3, 7)
    cached = make_engine(tiny_bundle, block_size=4, prefix_caching=True)
    plain = make_engine(tiny_bundle, block_size=4)
    for engine in (cached, plain):
        await fill_generate(engine, "a", system + first)
    table = cached.block_table("a")
    await cached.free_context("a")                       # its prefix stays cached
    before = await counters(cached)
    out = await fill_generate(cached, "b", system + second)
    after = await counters(cached)
    # 20 of the 22 system tokens are whole blocks (5 of 4); the fill prefills the other 8
    # (the pending last token is the generate's first decode step)
    assert (after[0] - before[0], after[2] - before[2]) == (8, 20)
    assert after[1] - before[1] == 28                    # 28 tokens of whole blocks asked
    assert cached.block_table("b")[:5] == table[:5]
    assert out == await fill_generate(plain, "b", system + second)
    cached.check_invariants()


@pytest.mark.parametrize(("length", "reused"), [(25, 24), (24, 20)])
async def test_a_repeated_prompt_reuses_every_whole_block_before_its_pending_token(
        tiny_bundle, make_engine, length, reused):
    # 25 tokens: 24 computed, 6 whole blocks; 24 tokens: the pending token opens block 6, so
    # block 5 is computed again (positions 20-22) into a block of the new context's own
    prompt = tokens(4, length)
    engine = make_engine(tiny_bundle, block_size=4, prefix_caching=True)
    reference = await fill_generate(engine, "a", prompt)
    before = await counters(engine)
    assert await fill_generate(engine, "again", prompt) == reference
    after = await counters(engine)
    assert (after[0] - before[0], after[2] - before[2]) == (length - 1 - reused, reused)
    assert engine.block_table("again")[:reused // 4] == engine.block_table("a")[:reused // 4]
    engine.check_invariants()


async def test_off_by_default_and_on_when_set(tiny_bundle, make_engine):
    # counters: (prompt tokens prefilled, prefix-cache query tokens, hit tokens); each Fill
    # of the same 25 tokens looks up 6 whole blocks of 4 once (a miss is looked up again at
    # its turn, counted once), and the second finds them all (not the pending token's block)
    prompt = tokens(5, 25)
    for params, expected in (({"prefix_caching": True}, (24, 48, 24)), ({}, (48, 0, 0))):
        engine = make_engine(tiny_bundle, block_size=4, **params)
        await fill_generate(engine, "a", prompt)
        await fill_generate(engine, "b", prompt)
        assert await counters(engine) == expected


async def test_cached_blocks_give_way_to_new_work_and_count_as_free(tiny_bundle, make_engine):
    # 12 blocks of 4 tokens: each request needs 7; the cache can never hold back a request
    engine = make_engine(tiny_bundle, block_size=4, num_blocks=12, prefix_caching=True)
    for i in range(6):
        await fill_generate(engine, f"r{i}", tokens(10 + i, 21))
        await engine.free_context(f"r{i}")
        stats = await engine.stats()
        assert stats.num_blocks_free == stats.num_blocks_total
    assert engine.scheduler.blocks.allocator.num_cache_evictions > 0
    engine.check_invariants()


@pytest.mark.parametrize("seed", [5, 11, 2024])
async def test_random_traffic_generates_the_same_with_and_without_the_cache(tiny_bundle,
                                                                           make_engine, seed):
    """The same random requests (shared system prompts, forks, frees, concurrent bursts, a KV
    cache small enough to evict) on two engines: every generated token is the same."""
    rng = random.Random(seed)
    systems = [tokens(100 + i, rng.randrange(8, 30)) for i in range(3)]
    ops: list[tuple[str, ...]] = []
    for step in range(40):
        op = rng.choice(["new", "new", "burst", "fork", "free"])
        ops.append((op, f"c{step}", str(rng.randrange(3)), str(rng.randrange(1, 12)),
                    str(rng.random())))
    outputs: list[list[object]] = []
    for caching in (False, True):
        engine = make_engine(tiny_bundle, block_size=4, num_blocks=40, max_context_len=96,
                             prefix_caching=caching)
        got: list[object] = []
        live: list[str] = []
        for op, name, system, n, pick in ops:
            prompt = systems[int(system)] + tokens(hash(name) % 1000, int(n))
            params = SamplingParams(max_tokens=int(n) % 5 + 1, ignore_eos=True)
            if op == "new" or not live:
                got.append(await fill_generate(engine, name, prompt, params))
                live.append(name)
            elif op == "burst":
                names = [f"{name}_{i}" for i in range(3)]
                got.append(await asyncio.gather(*(
                    fill_generate(engine, n_, prompt + (i + 3,), params)
                    for i, n_ in enumerate(names))))
                live.extend(names)
            elif op == "fork":
                parent = live[int(float(pick) * len(live))]
                try:
                    got.append((await engine.generate_all(
                        GenerateRequest(name, parent, params))).token_ids)
                    live.append(name)
                except PromptTooLongError:
                    got.append("full")
            else:
                await engine.free_context(live.pop(int(float(pick) * len(live))))
            engine.check_invariants()
        outputs.append(got)
        if caching:
            assert (await counters(engine))[2] > 0, "the cache was never hit"
    assert outputs[0] == outputs[1]


async def test_reset_forgets_what_was_cached_and_keeps_live_contexts(tiny_bundle, make_engine):
    engine = make_engine(tiny_bundle, block_size=4, prefix_caching=True)
    prompt = tokens(6, 25)
    reference = await fill_generate(engine, "live", prompt)
    await fill_generate(engine, "gone", tokens(7, 25))
    await engine.free_context("gone")
    assert await engine.reset_prefix_cache() == 7 + 7   # each: 30 computed, 7 whole blocks
    before = await counters(engine)
    await fill_generate(engine, "again", prompt)
    after = await counters(engine)
    assert (after[0] - before[0], after[2] - before[2]) == (24, 0)   # prefilled in full
    stats = await engine.stats()
    assert stats.num_blocks_free == stats.num_blocks_total - 2 * 8  # "live" and "again"
    assert await generate_more(engine, "live") == await generate_more(engine, "again")
    assert reference
    engine.check_invariants()


async def generate_more(engine: BuiltinEngine, ctx: str) -> tuple[int, ...]:
    return (await engine.generate_all(GenerateRequest(ctx, None, GREEDY))).token_ids


async def test_preempted_work_restarts_from_the_cache_with_the_same_tokens(tiny_bundle,
                                                                          make_engine):
    """4 requests sharing a 12-token system prompt on 8 blocks of 4: they preempt each other;
    a preempted one restarts from the prefix the cache still names, and every request
    generates what it does on an engine with room and no cache."""
    system = tokens(30, 12)
    prompts = [system + tokens(31 + i, 2) for i in range(4)]
    params = SamplingParams(max_tokens=8, ignore_eos=True)
    roomy = make_engine(tiny_bundle, block_size=4, num_blocks=64)
    expected = [await fill_generate(roomy, f"x{i}", p, params) for i, p in enumerate(prompts)]
    tight = make_engine(tiny_bundle, block_size=4, num_blocks=8, prefix_caching=True)
    got = await asyncio.gather(*(fill_generate(tight, f"x{i}", p, params)
                                 for i, p in enumerate(prompts)))
    assert list(got) == expected
    assert (await counters(tight))[2] > 0
    tight.check_invariants()


async def test_the_speed_probe_never_measures_a_cached_prefill(tiny_bundle, make_engine):
    # Each probe Fill has a sequence of its own: with prefix caching on, a timed Fill that
    # found its tokens cached would price prefill at ~0 ms a token (and unbound the step
    # budget). Integer seeds 256 apart once gave Fills one sequence (the tiny model's window
    # is 256 tokens: 32 and 160 stand for the H200 plan's 256, 1024 and 2048).
    from parrot.engines.speed_probe import ProbePlan, measure_decode, measure_prefill

    engine = make_engine(tiny_bundle, block_size=4, prefix_caching=True)
    await measure_prefill(engine, (32, 160), repeats=3)
    await measure_decode(engine, ProbePlan((32, 64), (1, 2), 24, 2, 2))
    queried, hits = (await counters(engine))[1:]
    assert queried > 0 and hits == 0
