"""The simulated engine's automatic prefix caching (vLLM APC / SGLang radix cache): a fill
from scratch reuses the leading full blocks a finished context left cached."""

from __future__ import annotations

import asyncio

import pytest

from parrot.engines.protocol import FillRequest, GenerateRequest
from parrot.engines.sim_prefix_cache import PrefixCache, block_hashes
from parrot.engines.simulated import SimulatedEngine, SimulatedEngineConfig
from parrot.sampling import SamplingParams
from parrot.sim.clock import run_virtual

# 16-token blocks of 4-character tokens: 64 characters a block.
SYSTEM = "".join(f"rule {i:03d} of the assistant. " for i in range(40))   # 1,080 chars


def engine(caching: bool, **params: object) -> SimulatedEngine:
    config = {"prefix_caching": caching, "decode_base_ms": 10.0, "decode_per_token_ms": 0.0,
              "prefill_per_token_ms": 1.0, "block_size": 16, "num_blocks": 256, **params}
    return SimulatedEngine("sim", SimulatedEngineConfig.from_mapping(config))


async def request(sim: SimulatedEngine, ctx: str, prompt: str) -> float:
    """One request-level call (fill the whole prompt, generate, free); its seconds."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    await sim.fill(FillRequest(ctx, text=prompt))
    await sim.generate_all(GenerateRequest(ctx, None, SamplingParams(max_tokens=4)))
    await sim.free_context(ctx)
    return loop.time() - start


def test_block_hashes_chain_full_blocks_only():
    first = list(block_hashes(SYSTEM, 16))
    assert len(first) == len(SYSTEM) // 64 == 16
    assert list(block_hashes(SYSTEM + "more", 16)) == first
    assert list(block_hashes("x" + SYSTEM, 16))[0] != first[0]
    cache = PrefixCache(16)
    cache.index("c", SYSTEM, 270)
    assert cache.match(SYSTEM + " a question") == ("c", 16)
    assert cache.oldest() is None                 # live: not evictable
    cache.keep("c", "cached")
    assert cache.match(SYSTEM) == ("cached", 16) and cache.oldest() == "cached"
    cache.forget("cached")
    assert cache.match(SYSTEM) is None
    assert cache.match("another text entirely" * 10) is None


@pytest.mark.parametrize("caching, second_prefill", [(True, 18), (False, 274)])
def test_a_second_request_reuses_the_cached_system_prompt(caching, second_prefill):
    """Both prompts start with the same 1,080-character system prompt (270 tokens, 16 full
    blocks of 64 characters). The second prompt is 274 tokens; with caching it prefills only
    past the 16 blocks (256 tokens): 18; without, all 274."""
    async def main() -> tuple[float, int]:
        sim = engine(caching)
        await request(sim, "a", SYSTEM + " first?")
        before = (await sim.stats()).counter("prefill_tokens")
        seconds = await request(sim, "b", SYSTEM + " second question")
        prefilled = (await sim.stats()).counter("prefill_tokens") - before
        await sim.close()
        return seconds, prefilled

    seconds, prefilled = run_virtual(main())
    assert prefilled == second_prefill
    assert seconds == pytest.approx(prefilled * 0.001 + 4 * 0.010, abs=1e-9)


def test_cached_contexts_are_evicted_when_a_request_needs_their_blocks():
    """64 blocks: a cached 1,080-character context holds 18 of them; a request needing 60
    evicts it instead of waiting."""
    async def main() -> int:
        sim = engine(True, num_blocks=64)
        await request(sim, "a", SYSTEM + " first?")
        assert (await sim.stats()).num_contexts == 1                  # kept, cached
        await request(sim, "b", "z" * (4 * 16 * 59))                 # 59 blocks + output
        stats = await sim.stats()
        await sim.close()
        return stats.num_contexts

    assert run_virtual(main()) == 1     # only b's context is cached now


async def test_reset_forgets_the_cache_over_http_and_the_next_request_prefills_in_full():
    """Between two benchmark runs: the cached system prompt is forgotten, so the second
    request prefills all of it; a live context keeps its KV. Over the engine's HTTP route."""
    from aiohttp.test_utils import TestServer

    from parrot.engines.client import HttpEngine
    from parrot.engines.server import create_app

    async def main() -> tuple[int, int, int, int]:
        sim = engine(True)
        server = TestServer(create_app(sim))
        await server.start_server()
        client = HttpEngine(str(server.make_url("")), name="remote", secret=None)
        try:
            await request(sim, "a", SYSTEM + " first?")          # cached when freed
            await sim.fill(FillRequest("live", text=SYSTEM + " kept"))
            forgotten = await client.reset_prefix_cache()
            before = await sim.stats()
            await request(sim, "b", SYSTEM + " second")
            after = await sim.stats()
            again = await client.reset_prefix_cache()
            return (forgotten, after.counter("prefill_tokens") - before.counter("prefill_tokens"),
                    after.counter("prefix_cache_hit_tokens")
                    - before.counter("prefix_cache_hit_tokens"), again)
        finally:
            await client.close()
            await server.close()

    forgotten, prefilled, hits, again = await main()
    assert (forgotten, prefilled, hits) == (17, 272, 0)   # 1,087 + 16 generated characters
    assert again == 17        # "b" was cached when freed; "live" is never counted
