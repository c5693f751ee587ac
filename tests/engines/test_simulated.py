from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parrot.engines.latency_model import LatencyModel
from parrot.errors import EngineConfigError
from parrot.engines.protocol import (LATENCY_PRIORITY, THROUGHPUT_PRIORITY, FillRequest,
                                     GenerateRequest)
from parrot.engines.simulated import (SimulatedEngine, SimulatedEngineConfig, count_tokens,
                                      load_profile)
from parrot.errors import (ContextExistsError, EngineUnavailableError, InvalidRequestError,
                           OutOfKVCacheError,
                           PromptTooLongError, UnknownContextError)
from parrot.sampling import SamplingParams
from parrot.sim.clock import run_virtual

ITER_MS = 10.0


def make_engine(**params: object) -> SimulatedEngine:
    base: dict[str, object] = {"decode_base_ms": ITER_MS, "decode_per_token_ms": 0.0,
                               "prefill_per_token_ms": 0.0}
    base.update(params)
    return SimulatedEngine("sim", SimulatedEngineConfig.from_mapping(base))


def gen(ctx: str, n: int, parent: str | None = None, seed: int | None = None) -> GenerateRequest:
    return GenerateRequest(ctx, parent, SamplingParams(max_tokens=n, seed=seed))


def fill(ctx: str, n: int, parent: str | None = None) -> FillRequest:
    return FillRequest(ctx, parent, token_ids=tuple(range(n)))


def now() -> float:
    return asyncio.get_running_loop().time()


# ---- timing ------------------------------------------------------------------------------------

def test_generate_at_batch_one_takes_n_iterations() -> None:
    async def main() -> None:
        engine = make_engine()
        start = now()
        chunks = [c async for c in engine.generate(gen("a", 7))]
        assert now() - start == pytest.approx(7 * ITER_MS / 1000, abs=1e-12)
        assert len(chunks) == 7
        assert [c.finish_reason for c in chunks] == [None] * 6 + ["length"]
        text = "".join(c.text for c in chunks)
        assert len(text) == 28 and count_tokens(text) == 7
        assert sum(len(c.token_ids) for c in chunks) == 7
        await engine.close()
    run_virtual(main())


def test_concurrent_generates_batch_together() -> None:
    async def main() -> None:
        engine = make_engine(decode_per_seq_ms=1.0)
        start = now()
        ends: list[float] = []

        async def one(ctx: str) -> None:
            await engine.generate_all(gen(ctx, 5))
            ends.append(now() - start)
        await asyncio.gather(one("a"), one("b"))
        # both in every iteration: 5 iterations of base + 2 seqs
        assert ends == pytest.approx([5 * (ITER_MS + 2) / 1000] * 2, abs=1e-12)
        await engine.close()
    run_virtual(main())


def test_stats_count_steps_model_time_and_tokens() -> None:
    """The work counters a real engine reports: steps, time in them (model time here), tokens
    prefilled and decoded (two batched generates of 5 after a 30-token fill)."""
    async def main() -> None:
        engine = make_engine(decode_per_seq_ms=1.0, prefill_per_token_ms=0.1)
        await engine.fill(fill("p", 30))
        await asyncio.gather(engine.generate_all(gen("a", 5, parent="p")),
                             engine.generate_all(gen("b", 5, parent="p")))
        stats = await engine.stats()
        assert (stats.counter("prefill_tokens"), stats.counter("decode_tokens")) == (30, 10)
        assert stats.counter("num_steps") == 1 + 5   # one prefill step, five batched decodes
        # the prefill-only step costs its tokens (3 ms), each decode step base + 2 sequences
        assert stats.counter("step_ms") == stats.counter("loop_ms") == round(3 + 5 * (ITER_MS + 2))
        await engine.close()
    run_virtual(main())


def test_decode_time_grows_with_batch_tokens() -> None:
    async def main() -> None:
        engine = make_engine(decode_per_token_ms=0.01)
        await engine.fill(fill("p", 100))  # prefill is free in this model
        start = now()
        await engine.generate_all(gen("p", 3))
        # iterations read 100, 101, 102 tokens of KV
        expected = sum(ITER_MS + 0.01 * t for t in (100, 101, 102)) / 1000
        assert now() - start == pytest.approx(expected, abs=1e-12)
        await engine.close()
    run_virtual(main())


def test_chunked_prefill_costs_per_token_under_budget() -> None:
    async def main() -> None:
        engine = make_engine(prefill_per_token_ms=0.1, max_num_batched_tokens=256)
        start = now()
        result = await engine.fill(fill("a", 1000))
        assert (result.num_filled_tokens, result.context_len) == (1000, 1000)
        assert now() - start == pytest.approx(0.1, abs=1e-12)
        # a decode runs alongside the prefill chunks: each iteration pays both
        start = now()
        await asyncio.gather(engine.generate_all(gen("a", 2)), engine.fill(fill("b", 510)))
        # it1: decode + 255 prefill; it2: decode + 255 prefill
        assert now() - start == pytest.approx(2 * (ITER_MS + 25.5) / 1000, abs=1e-12)
        await engine.close()
    run_virtual(main())


def test_text_fill_counts_four_chars_per_token() -> None:
    async def main() -> None:
        engine = make_engine()
        assert (await engine.fill(FillRequest("a", text="abcdefghi"))).num_filled_tokens == 3
        assert (await engine.fill(FillRequest("a", text=""))).context_len == 3
        await engine.close()
    run_virtual(main())


def test_zero_latency_takes_no_time() -> None:
    async def main() -> None:
        engine = SimulatedEngine("z", SimulatedEngineConfig.from_mapping({"zero_latency": True}))
        await engine.fill(fill("a", 5000))
        result = await engine.generate_all(gen("a", 50))
        assert len(result.token_ids) == 50 and now() == 0.0
        await engine.close()
    run_virtual(main())


def test_output_is_deterministic_per_context_and_seed() -> None:
    async def main() -> None:
        engine = make_engine(zero_latency=True)
        a = await engine.generate_all(gen("x", 6, seed=1))
        await engine.free_context("x")
        b = await engine.generate_all(gen("x", 6, seed=1))
        c = await engine.generate_all(gen("y", 6, seed=1))
        assert a == b and a.text != c.text
        await engine.close()
    run_virtual(main())


# ---- contexts and blocks -----------------------------------------------------------------------

def test_fork_skips_prefill_and_shares_full_blocks() -> None:
    async def main() -> None:
        engine = make_engine(prefill_per_token_ms=0.1, block_size=16, num_blocks=100)
        await engine.fill(fill("parent", 1000))  # 62 full blocks + 1 partial
        assert (await engine.stats()).num_blocks_free == 100 - 63
        start = now()
        result = await engine.fill(fill("child", 100, parent="parent"))
        assert result.context_len == 1100
        assert now() - start == pytest.approx(100 * 0.1 / 1000, abs=1e-12)
        stats = await engine.stats()
        # child: 62 shared + ceil(1100/16) - 62 = 7 own blocks (copied partial included)
        assert stats.num_blocks_free == 100 - 63 - 7
        assert stats.num_tokens_in_use == 62 * 16 + 8 + 1100 - 62 * 16
        assert stats.num_contexts == 2
        await engine.free_context("parent")
        assert (await engine.stats()).num_blocks_free == 100 - 69  # shared blocks stay
        await engine.free_context("child")
        assert (await engine.stats()).num_blocks_free == 100
        await engine.close()
    run_virtual(main())


def test_shared_prefix_is_read_once_per_decode_batch() -> None:
    async def main() -> None:
        for shared, kv in ((True, 320), (False, 2 * 320)):
            engine = make_engine(decode_per_token_ms=0.01, shared_prefix_decode=shared)
            await engine.fill(fill("p", 320))
            start = now()
            await asyncio.gather(engine.generate_all(gen("a", 1, parent="p")),
                                 engine.generate_all(gen("b", 1, parent="p")))
            assert now() - start == pytest.approx((ITER_MS + 0.01 * kv) / 1000, abs=1e-12)
            await engine.close()
    run_virtual(main())


def test_fork_waits_for_the_parent_fill() -> None:
    async def main() -> None:
        engine = make_engine(prefill_per_token_ms=1.0, max_num_batched_tokens=10)
        parent = asyncio.ensure_future(engine.fill(fill("p", 30)))
        await asyncio.sleep(0)
        child = await engine.fill(fill("c", 5, parent="p"))
        assert child.context_len == 35 and (await parent).context_len == 30
        await engine.close()
    run_virtual(main())


def test_idle_kv_is_evicted_and_recomputed_when_used_again() -> None:
    async def main() -> None:
        engine = make_engine(block_size=16, num_blocks=10, prefill_per_token_ms=1.0)
        await engine.fill(fill("a", 120))  # 8 blocks, idle afterwards
        start = now()
        assert (await engine.fill(fill("b", 64))).context_len == 64  # evicts a's KV
        assert now() - start == pytest.approx(0.064)
        stats = await engine.stats()
        assert (stats.num_contexts, stats.num_tokens_in_use, stats.num_blocks_free) == (2, 64, 6)
        start = now()
        chunks = [c async for c in engine.generate(gen("a", 2))]  # evicts b, recomputes a
        # 120 tokens prefilled again (one iteration under the 2048-token budget), then 2 decodes
        assert now() - start == pytest.approx(0.120 + 2 * ITER_MS / 1000)
        assert sum(len(c.token_ids) for c in chunks) == 2
        stats = await engine.stats()
        assert (stats.num_tokens_in_use, stats.num_blocks_free) == (122, 2)
        await engine.close()
    run_virtual(main())


def test_a_fork_of_an_evicted_parent_recomputes_the_parent_tokens() -> None:
    async def main() -> None:
        engine = make_engine(block_size=16, num_blocks=10, prefill_per_token_ms=1.0)
        await engine.fill(fill("p", 96))   # 6 blocks
        await engine.fill(fill("x", 64))   # 4 blocks: everything is in use
        await engine.fill(fill("y", 32))   # evicts p (least recently used)
        start = now()
        assert (await engine.fill(fill("child", 16, parent="p"))).context_len == 112
        assert now() - start == pytest.approx(0.096 + 0.016)  # p's tokens, then its own
        await engine.close()
    run_virtual(main())


def test_a_request_waits_for_running_ones_whose_kv_is_never_evicted() -> None:
    async def main() -> None:
        engine = make_engine(block_size=16, num_blocks=10)
        long = asyncio.ensure_future(engine.generate_all(gen("a", 120)))  # 8 blocks, running
        await asyncio.sleep(0.05)
        waiting = asyncio.ensure_future(engine.fill(fill("b", 64)))
        await asyncio.sleep(0.1)
        stats = await engine.stats()
        assert not waiting.done() and (stats.num_waiting, stats.num_running) == (1, 1)
        await long
        assert (await waiting).context_len == 64  # a went idle: its KV made room
        await engine.close()
    run_virtual(main())


def test_no_deadlock_under_overload() -> None:
    """A reproduction: concurrent calls that each fill a long prompt, then generate, then free (the
    request-level baseline's pattern) on an engine too small for all their prompts at once.
    The fills used to take every block and leave the generates waiting forever."""
    async def main() -> float:
        engine = make_engine(block_size=16, num_blocks=1000, prefill_per_token_ms=0.1,
                             max_context_len=4096)

        async def one_call(i: int) -> None:
            await engine.fill(fill(f"c{i}", 3600))  # 225 blocks each
            await engine.generate_all(gen(f"c{i}", 200, seed=i))
            await engine.free_context(f"c{i}")

        await asyncio.gather(*(one_call(i) for i in range(12)))
        stats = await engine.stats()
        assert (stats.num_running, stats.num_waiting, stats.num_contexts) == (0, 0, 0)
        assert stats.num_blocks_free == 1000
        await engine.close()
        return now()
    first = run_virtual(main())
    assert first > 0 and run_virtual(main()) == first  # and deterministic


def test_error_cases() -> None:
    async def main() -> None:
        engine = make_engine(max_context_len=100, block_size=16, num_blocks=4)
        with pytest.raises(UnknownContextError):
            await engine.fill(fill("c", 1, parent="nope"))
        with pytest.raises(UnknownContextError):
            await engine.generate_all(gen("c", 1, parent="nope"))
        with pytest.raises(UnknownContextError):
            await engine.free_context("nope")
        with pytest.raises(PromptTooLongError):
            await engine.fill(fill("c", 101))
        with pytest.raises(OutOfKVCacheError):
            await engine.fill(fill("c", 65))  # 5 blocks > 4, can never fit
        await engine.fill(fill("c", 10))
        with pytest.raises(PromptTooLongError):
            await engine.generate_all(gen("c", 91))
        busy = asyncio.ensure_future(engine.generate_all(gen("c", 3)))
        await asyncio.sleep(0)
        with pytest.raises(ContextExistsError):
            await engine.fill(fill("c", 1))
        assert (await busy).finish_reason == "length"
        assert (await engine.stats()).num_contexts == 1
        await engine.close()
        with pytest.raises(EngineUnavailableError):
            await engine.fill(fill("d", 1))
    run_virtual(main())


def test_abandoned_stream_frees_the_context() -> None:
    async def main() -> None:
        engine = make_engine()
        stream = engine.generate(gen("a", 100))
        await anext(stream)
        await stream.aclose()
        stats = await engine.stats()
        assert (stats.num_running, stats.num_waiting) == (0, 0)
        assert stats.num_blocks_free == stats.num_blocks_total - 1  # reservation returned
        assert (await engine.fill(fill("a", 1))).context_len == 2
        await engine.close()
    run_virtual(main())


def test_free_while_running_fails_the_request_and_close_fails_waiters() -> None:
    async def main() -> None:
        engine = make_engine()
        running = asyncio.ensure_future(engine.generate_all(gen("a", 100)))
        await asyncio.sleep(0.05)
        await engine.free_context("a")
        with pytest.raises(UnknownContextError):
            await running
        pending = asyncio.ensure_future(engine.generate_all(gen("b", 100)))
        await asyncio.sleep(0.05)
        await engine.close()
        with pytest.raises(EngineUnavailableError):
            await pending
    run_virtual(main())


def test_max_num_seqs_queues_the_rest() -> None:
    async def main() -> None:
        engine = make_engine(max_num_seqs=1)
        first = asyncio.ensure_future(engine.generate_all(gen("a", 3)))
        second = asyncio.ensure_future(engine.generate_all(gen("b", 3)))
        await asyncio.sleep(0.001)
        stats = await engine.stats()
        assert (stats.num_running, stats.num_waiting) == (1, 1)
        await asyncio.gather(first, second)
        assert now() == pytest.approx(6 * ITER_MS / 1000, abs=1e-12)
        await engine.close()
    run_virtual(main())


def test_a_latency_critical_fill_is_prefilled_before_older_throughput_fills() -> None:
    async def main() -> None:
        # prefill only: 0.1 ms per token, 256 tokens per iteration, no decode cost
        engine = make_engine(decode_base_ms=0.0, prefill_per_token_ms=0.1,
                             max_num_batched_tokens=256)
        start = now()
        done: dict[str, float] = {}

        async def timed(name: str, request: FillRequest) -> None:
            await engine.fill(request)
            done[name] = now() - start

        bulk = [asyncio.ensure_future(timed(f"bulk{i}", FillRequest(
            f"bulk{i}", token_ids=tuple(range(512)), priority=THROUGHPUT_PRIORITY)))
            for i in range(2)]
        await asyncio.sleep(0)            # the bulk fills are queued first
        await timed("chat", FillRequest("chat", token_ids=tuple(range(256)),
                                        priority=LATENCY_PRIORITY))
        await asyncio.gather(*bulk)
        # the chat's 256 tokens take the first iteration whole; the bulk fills the next four
        assert done["chat"] == pytest.approx(0.0256, abs=1e-12)
        assert done["bulk0"] == pytest.approx(3 * 0.0256, abs=1e-12)
        assert done["bulk1"] == pytest.approx(5 * 0.0256, abs=1e-12)
        await engine.close()
    run_virtual(main())


def test_requests_of_one_priority_are_prefilled_in_arrival_order() -> None:
    async def main() -> None:
        engine = make_engine(decode_base_ms=0.0, prefill_per_token_ms=0.1,
                             max_num_batched_tokens=256)
        start = now()
        first = asyncio.ensure_future(engine.fill(fill("a", 512)))
        await asyncio.sleep(0)
        await engine.fill(fill("b", 256))
        assert now() - start == pytest.approx(3 * 0.0256, abs=1e-12)   # after a's 512
        await first
        await engine.close()
    run_virtual(main())


# ---- configuration -----------------------------------------------------------------------------

def test_a100_profile_matches_the_paper_setting() -> None:
    config = SimulatedEngineConfig.from_mapping({"profile": "a100_llama13b"})
    model = config.latency
    assert model.decode_ms(1, 6144) == pytest.approx(40.0)
    assert 20.0 <= model.decode_ms(1, 0) <= 25.0
    assert model.decode_ms(8, 12288) > 2 * 40.0 * 0.75
    assert 0.1 <= model.prefill_per_token_ms <= 0.2
    assert config.model == "llama-13b"
    # explicit keys override the profile's
    assert SimulatedEngineConfig.from_mapping(
        {"profile": "a100_llama13b", "num_blocks": 7}).num_blocks == 7
    assert "decode_table" in load_profile("a100_llama13b")


def test_table_interpolates_and_extrapolates() -> None:
    model = LatencyModel(decode_table=((0, 10.0), (100, 20.0), (200, 40.0)))
    assert model.decode_ms(1, 50) == 15.0
    assert model.decode_ms(1, 300) == 60.0
    assert model.decode_ms(0, 300) == 0.0
    assert model.iteration_seconds(0, 0, 10) == pytest.approx(0.0015)


def test_info_reports_the_latency_model_as_the_engines_speed_profile() -> None:
    async def main() -> None:
        h200 = SimulatedEngine("h", SimulatedEngineConfig.from_mapping({"profile": "h200_llama7b"}))
        profile = (await h200.info()).speed_profile
        model = h200.config.latency
        assert profile is not None
        assert profile.prefill_ms_per_token == model.prefill_per_token_ms
        for tokens in (0, 6144, 50000):                       # the decode formula, point for point
            assert profile.decode_ms(tokens) == pytest.approx(model.decode_ms(1, tokens))
        a100 = SimulatedEngineConfig.from_mapping({"profile": "a100_llama13b"})
        table = SimulatedEngine("t", a100)
        assert (await table.info()).speed_profile.decode_points == table.config.latency.decode_table
        fast = SimulatedEngine("z", SimulatedEngineConfig.from_mapping({"zero_latency": True}))
        assert (await fast.info()).speed_profile is None      # no speed to rank by

    run_virtual(main())


def test_a_prefill_only_iteration_pays_the_prefill_base_once() -> None:
    model = LatencyModel(prefill_per_token_ms=0.1, prefill_base_ms=4.0, decode_base_ms=5.0,
                         decode_per_token_ms=0.0)
    assert model.iteration_seconds(0, 0, 10) == pytest.approx(0.005)      # 4 + 10 x 0.1
    assert model.iteration_seconds(0, 0, 100) == pytest.approx(0.014)
    # beside decodes the decode step's base holds the step's fixed cost: no second one
    assert model.iteration_seconds(2, 64, 10) == pytest.approx(0.006)     # 5 + 10 x 0.1
    assert model.iteration_seconds(0, 0, 0) == 0.0
    assert SimulatedEngineConfig.from_mapping(
        {"prefill_base_ms": 2.5}).latency.prefill_base_ms == 2.5


@pytest.mark.parametrize("params, words", [
    ({"num_blocks": 0}, "simulated engine.num_blocks: 0 is out of range"),
    ({"block_size": "16"}, "simulated engine.block_size: '16' is not valid"),
    ({"bogus": 1}, "bogus"),
    ({"decode_base_ms": -1}, "decode_base_ms"),
    ({"prefill_base_ms": -1}, "prefill_base_ms"),
    ({"zero_latency": "yes"}, "zero_latency"),
    ({"decode_table": [[0, 1.0]]}, "decode_table"),
    ({"decode_table": [[10, 1.0], [5, 2.0]]}, "decode_table"),
    ({"decode_table": [[0, 1.0], [5, 2.0]], "decode_base_ms": 3}, "decode_base_ms"),
    ({"profile": "no_such_profile"}, "no_such_profile"),
    ({"shared_prefix_decode": 1}, "shared_prefix_decode"),
])
def test_config_errors_name_the_bad_key(params: dict[str, object], words: str) -> None:
    with pytest.raises(EngineConfigError, match=words.replace("[", r"\[")):
        SimulatedEngineConfig.from_mapping(params)


# ---- block accounting under random operations ----------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["fill", "fork", "gen", "free"]),
                          st.integers(0, 5), st.integers(0, 5), st.integers(0, 40)),
                max_size=30),
       st.sampled_from([1000, 12]))  # 12 blocks: eviction and recompute all the time
def test_blocks_are_conserved(ops: list[tuple[str, int, int, int]], num_blocks: int) -> None:
    async def main() -> None:
        engine = SimulatedEngine("h", SimulatedEngineConfig.from_mapping(
            {"zero_latency": True, "block_size": 4, "num_blocks": num_blocks}))
        for op, a, b, n in ops:
            ctx, other = f"c{a}", f"c{b}"
            try:
                if op == "fill":
                    await engine.fill(fill(ctx, n))
                elif op == "fork":
                    await engine.fill(fill(ctx, n, parent=other))
                elif op == "gen":
                    await engine.generate_all(gen(ctx, n + 1))
                else:
                    await engine.free_context(ctx)
            except (UnknownContextError, InvalidRequestError, OutOfKVCacheError):
                pass
            stats = await engine.stats()
            assert 0 <= stats.num_blocks_free <= stats.num_blocks_total
            assert (stats.num_running, stats.num_waiting) == (0, 0)
            held = stats.num_blocks_total - stats.num_blocks_free
            # every held block carries a token (nothing reserved is left behind) and no more
            assert (held - 1) * 4 < stats.num_tokens_in_use + 4 * stats.num_contexts
            assert stats.num_tokens_in_use <= held * 4
        for ctx in engine.context_ids():
            await engine.free_context(ctx)
        assert (await engine.stats()).num_blocks_free == num_blocks
        engine.check_invariants()
        await engine.close()
    run_virtual(main())


def test_a_cancelled_fill_leaves_no_trace() -> None:
    async def main() -> None:
        engine = make_engine(prefill_per_token_ms=1.0, max_num_batched_tokens=16)
        await engine.fill(fill("a", 20))
        for ctx in ("a", "new"):
            task = asyncio.ensure_future(engine.fill(fill(ctx, 100)))
            await asyncio.sleep(0.05)  # part of it is prefilled
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        stats = await engine.stats()
        assert (stats.num_contexts, stats.num_tokens_in_use, stats.num_running) == (1, 20, 0)
        assert stats.num_blocks_free == stats.num_blocks_total - 2
        assert (await engine.fill(fill("new", 3))).context_len == 3
        await engine.close()
    run_virtual(main())


# ---- work that aborts threw away ---------------------------------------------------------------

async def aborted(engine: SimulatedEngine) -> tuple[int, int]:
    stats = await engine.stats()
    return stats.counter("aborted_generates"), stats.counter("aborted_decode_tokens")


def test_a_generate_cancelled_after_k_steps_counts_k_aborted_decode_tokens() -> None:
    """Not streamed (the caller holds no token until the end) or streamed, a Generate aborted
    mid-way counts once with every token decoded for it; one that finishes counts nothing."""
    async def main() -> None:
        engine = make_engine()
        await engine.generate_all(gen("done", 5))
        assert await aborted(engine) == (0, 0)
        task = asyncio.ensure_future(engine.generate_all(gen("a", 50)))
        await asyncio.sleep(3.5 * ITER_MS / 1000)   # three steps decoded, the fourth under way
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await aborted(engine) == (1, 3)
        stream = engine.generate(gen("b", 50))
        received = [await anext(stream) for _ in range(4)]
        await stream.aclose()
        assert sum(len(c.token_ids) for c in received) == 4
        assert await aborted(engine) == (2, 7)
        assert (await engine.stats()).num_running == 0
        await engine.close()
    run_virtual(main())


def test_a_generate_whose_context_is_freed_counts_once() -> None:
    async def main() -> None:
        engine = make_engine()
        stream = engine.generate(gen("a", 50))
        await anext(stream)
        await anext(stream)
        await engine.free_context("a")
        with pytest.raises(UnknownContextError):
            await anext(stream)
        await stream.aclose()   # its caller lets go as well: still one abort
        assert await aborted(engine) == (1, 2)
        # freed while it waited for its parent's fill: aborted before it decoded anything
        parent = asyncio.ensure_future(engine.fill(fill("p", 10)))
        child = asyncio.ensure_future(engine.generate_all(gen("c", 5, parent="p")))
        await asyncio.sleep(0)
        await engine.free_context("c")
        with pytest.raises(UnknownContextError):
            await child
        await parent
        assert await aborted(engine) == (2, 2)
        await engine.close()
    run_virtual(main())


def test_fills_and_failed_generates_are_not_aborted_work() -> None:
    async def main() -> None:
        engine = make_engine(prefill_per_token_ms=1.0)
        task = asyncio.ensure_future(engine.fill(fill("a", 100)))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        with pytest.raises(PromptTooLongError):
            await engine.generate_all(gen("b", 10**6))
        running = asyncio.ensure_future(engine.generate_all(gen("c", 50)))
        while (await engine.stats()).counter("decode_tokens") < 3:
            await asyncio.sleep(ITER_MS / 1000)
        await engine.close()    # the engine fails it: a failure, not work thrown away
        with pytest.raises(EngineUnavailableError):
            await running
        assert await aborted(engine) == (0, 0)
    run_virtual(main())


@settings(max_examples=30, deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from(["fill", "fork", "gen"]),
                                   st.integers(1, 30)), min_size=1, max_size=6),
                min_size=1, max_size=8),
       st.integers(8, 40))
def test_concurrent_work_on_a_small_cache_always_finishes(
        workers: list[list[tuple[str, int]]], num_blocks: int) -> None:
    """Whatever runs at once, an engine that could serve each request alone serves them all
    (slowly, by evicting and recomputing idle KV), and gives every block back."""
    async def main() -> None:
        engine = SimulatedEngine("h", SimulatedEngineConfig.from_mapping(
            {"block_size": 4, "num_blocks": num_blocks, "decode_base_ms": 1.0,
             "prefill_per_token_ms": 0.1, "max_context_len": 4 * num_blocks}))
        await engine.fill(fill("system", 12))

        async def worker(w: int, ops: list[tuple[str, int]]) -> None:
            ctx, exists = f"w{w}", False
            for op, n in ops:
                try:
                    if op == "fork" or not exists:
                        if exists:
                            await engine.free_context(ctx)
                            exists = False
                        await engine.fill(fill(ctx, n, parent="system"))
                        exists = True
                    elif op == "fill":
                        await engine.fill(fill(ctx, n))
                    else:
                        await engine.generate_all(gen(ctx, n))
                except (PromptTooLongError, OutOfKVCacheError):
                    pass  # more than the engine could ever hold: refused at once
            if exists:
                await engine.free_context(ctx)

        await asyncio.gather(*(worker(w, ops) for w, ops in enumerate(workers)))
        stats = await engine.stats()
        assert (stats.num_running, stats.num_waiting, stats.num_contexts) == (0, 0, 1)
        await engine.free_context("system")
        assert (await engine.stats()).num_blocks_free == num_blocks
        engine.check_invariants()
        await engine.close()
    run_virtual(main())


# ---- the reproduction on a simulated cluster ---------------------------------------------

# 3,503 tokens
SYSTEM_PROMPT = "You are the assistant of a large service; follow these rules. " * 226


async def users_sharing_a_system_prompt(env, spec):  # a workload: (Env, WorkloadSpec) -> records
    import parrot
    from parrot.sim.workloads.base import app_session, get_latency

    chat = parrot.semantic_function(
        prompt=SYSTEM_PROMPT + "User: {{input:message}}\nAssistant: {{output:reply}}",
        name="chat", max_tokens=300, ignore_eos=True)

    async def user(i: int):
        async with app_session(env, f"user-{i}", "chat", is_main=True,
                               output_tokens=300) as record:
            await get_latency(chat(message=f"Question number {i}?"))
            record.finished = env.now()
        return record
    return list(await asyncio.gather(*(user(i) for i in range(24))))


@pytest.mark.parametrize("variant", ["least_queue:baseline", "app_centric:parrot"])
def test_no_deadlock_under_overload_on_a_cluster(variant: str) -> None:
    """A reproduction: `least_queue:baseline` on one engine with concurrent users sharing a
    3,500-token
    system prompt waited forever (each get timed out after 604,800 simulated seconds): 24
    prompts of ~3,560 tokens do not fit the a100 profile's 3,500 blocks at once."""
    from parrot.sim.cluster import ClusterSpec, run_simulation
    from parrot.sim.workloads.spec import WorkloadSpec

    assert count_tokens(SYSTEM_PROMPT) == 3503
    policy, mode = variant.split(":")
    result = run_simulation(ClusterSpec(policy=policy, num_engines=1),
                            users_sharing_a_system_prompt, WorkloadSpec(), mode=mode, seed=0)
    assert [r.error for r in result.records] == [None] * 24
    assert all(c.state == "done" for r in result.records for c in r.calls)
    assert result.duration_s < 600  # slowly, by recomputing evicted prompts, but it finishes


# ---- ending a turn by itself (eos_mean_tokens) -------------------------------------------------

def test_a_generate_ends_its_turn_by_itself_unless_ignore_eos() -> None:
    async def main() -> None:
        engine = make_engine(eos_mean_tokens=16, num_blocks=512)
        lengths = []
        for i in range(40):
            chunks = [c async for c in engine.generate(gen(f"c{i}", 4000))]
            assert chunks[-1].finish_reason == "eos"
            lengths.append(sum(len(c.token_ids) for c in chunks))
            await engine.free_context(f"c{i}")
        assert max(lengths) < 4000 and 8 <= sum(lengths) / len(lengths) <= 32  # mean ~16
        # the blocks reserved for the 4,000 tokens went back when the turn ended
        assert (await engine.stats()).num_blocks_free == 512
        # ignore_eos: exactly max_tokens, as the benchmark workloads ask
        request = GenerateRequest("x", None, SamplingParams(max_tokens=300, ignore_eos=True))
        chunks = [c async for c in engine.generate(request)]
        assert sum(len(c.token_ids) for c in chunks) == 300
        assert chunks[-1].finish_reason == "length"
        await engine.close()
    run_virtual(main())


def test_without_eos_mean_tokens_a_generate_runs_to_max_tokens() -> None:
    async def main() -> None:
        engine = make_engine()
        chunks = [c async for c in engine.generate(gen("a", 500))]
        assert sum(len(c.token_ids) for c in chunks) == 500
        await engine.close()
    run_virtual(main())
    with pytest.raises(EngineConfigError, match="eos_mean_tokens"):
        SimulatedEngineConfig.from_mapping({"eos_mean_tokens": 0})
