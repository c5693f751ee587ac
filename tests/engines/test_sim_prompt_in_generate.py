"""A Generate that carries its prompt on the simulated engine: what a Fill of the prompt and
then a Generate give (tokens, hidden stops, cached prefixes, KV), a decode step sooner."""

from __future__ import annotations

import asyncio

import pytest

from parrot.engines.protocol import FillRequest, GenerateRequest
from parrot.engines.sim_eos import eos_marker
from parrot.engines.simulated import SimulatedEngine, SimulatedEngineConfig
from parrot.sampling import SamplingParams
from parrot.sim.clock import run_virtual

DECODE_S, PREFILL_S = 0.010, 0.001     # per step, per prompt token
SYSTEM = "".join(f"rule {i:03d} of the assistant. " for i in range(40))   # 270 tokens


def engine(**params: object) -> SimulatedEngine:
    config = {"decode_base_ms": DECODE_S * 1000, "decode_per_token_ms": 0.0,
              "prefill_per_token_ms": PREFILL_S * 1000, "block_size": 16, "num_blocks": 256,
              **params}
    return SimulatedEngine("sim", SimulatedEngineConfig.from_mapping(config))


async def timed_call(sim: SimulatedEngine, ctx: str, prompt: str, *, fused: bool,
                     max_tokens: int = 4, ignore_eos: bool = True
                     ) -> tuple[tuple[int, ...], int | None, float, float]:
    """(token ids, the prompt's length as reported, seconds to the first chunk, to the end)."""
    loop = asyncio.get_running_loop()
    sampling = SamplingParams(max_tokens=max_tokens, ignore_eos=ignore_eos)
    start = loop.time()
    prompt_len = None
    if not fused:
        prompt_len = (await sim.fill(FillRequest(ctx, text=prompt))).context_len
    request = GenerateRequest(ctx, sampling=sampling, text=prompt if fused else None)
    chunks, first = [], None
    async for chunk in sim.generate(request):
        if first is None:
            first = loop.time() - start
            prompt_len = chunk.prompt_len if fused else prompt_len
        chunks.append(chunk)
    assert first is not None
    return (tuple(t for c in chunks for t in c.token_ids), prompt_len, first,
            loop.time() - start)


@pytest.mark.parametrize("prompt_tokens", [5, 300])
def test_the_same_tokens_as_a_fill_and_a_generate_one_decode_step_sooner(prompt_tokens):
    async def main() -> None:
        split, fused = engine(), engine()
        prompt = "abcd" * prompt_tokens
        tokens, length, first, end = await timed_call(split, "c", prompt, fused=False)
        f_tokens, f_length, f_first, f_end = await timed_call(fused, "c", prompt, fused=True)
        assert f_tokens == tokens and len(tokens) == 4
        assert f_length == length == prompt_tokens
        # the prompt's prefill step also gives the first token: one decode step saved
        assert first == pytest.approx(prompt_tokens * PREFILL_S + DECODE_S)
        assert f_first == pytest.approx(prompt_tokens * PREFILL_S)
        assert end - f_end == pytest.approx(DECODE_S)
        assert ((await fused.stats()).num_tokens_in_use
                == (await split.stats()).num_tokens_in_use == prompt_tokens + 4)
        for sim in (split, fused):
            sim.check_invariants()
            await sim.close()
    run_virtual(main())


def test_a_hidden_stop_in_the_prompt_ends_the_generate_as_after_a_fill():
    async def main() -> None:
        prompt = "tell me a story " + eos_marker(3)
        for fused in (False, True):
            sim = engine()
            tokens, *_ = await timed_call(sim, "c", prompt, fused=fused, max_tokens=50,
                                          ignore_eos=False)
            assert len(tokens) == 3
            await sim.close()
    run_virtual(main())


def test_a_prompt_in_a_generate_reuses_a_cached_prefix_as_a_fill_does():
    async def main() -> None:
        for fused in (False, True):
            sim = engine(prefix_caching=True)
            await timed_call(sim, "a", SYSTEM + " first?", fused=fused)
            await sim.free_context("a")
            before = (await sim.stats()).counter("prefill_tokens")
            _, length, *_ = await timed_call(sim, "b", SYSTEM + " second question",
                                             fused=fused)
            stats = await sim.stats()
            # 274 tokens, the leading 16 blocks (256) cached: 18 prefilled
            assert (length, stats.counter("prefill_tokens") - before) == (274, 18)
            assert stats.counter("prefix_cache_hit_tokens") == 256
            await sim.free_context("b")
            sim.check_invariants()
            await sim.close()
    run_virtual(main())


def test_a_generate_left_during_its_prompt_gives_its_blocks_back():
    async def main() -> None:
        sim = engine()
        request = GenerateRequest("c", sampling=SamplingParams(max_tokens=8), text="x" * 4000)
        chunks = sim.generate(request)
        task = asyncio.ensure_future(anext(chunks))
        await asyncio.sleep(PREFILL_S * 10)     # inside the 1,000-token prompt's prefill
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await chunks.aclose()
        await sim.free_context("c")
        stats = await sim.stats()
        assert (stats.num_contexts, stats.num_blocks_free) == (0, stats.num_blocks_total)
        sim.check_invariants()
        await sim.close()
    run_virtual(main())
