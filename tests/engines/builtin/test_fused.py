"""The fused decode path (parrot_kernels' fused layer ops under the Triton interpreter, the
decode kernels, the graph step's in-graph argmax) against the unfused PyTorch path: the same
greedy tokens for 32 steps on a fixed-seed fp32 model."""

from __future__ import annotations

import asyncio

import pytest

from parrot.engines.builtin.llama.attention import make_decode_fn
from parrot.engines.builtin.build import load_bundle
from parrot.engines.builtin.config import BuiltinEngineConfig
from parrot.engines.builtin.cuda.graphs import DecodeGraphs
from parrot.engines.protocol import FillRequest, GenerateRequest
from parrot.sampling import SamplingParams

parrot_kernels = pytest.importorskip("parrot_kernels")
STEPS = 32


def tiny_config() -> BuiltinEngineConfig:
    return BuiltinEngineConfig(model="tiny", dtype="float32", device="cpu", num_blocks=64,
                               seed=1234)


@pytest.fixture(scope="module")
def fused_bundle():
    bundle = load_bundle(tiny_config())
    bundle.model.use_decode(make_decode_fn(parrot_kernels))
    bundle.model.use_fused(parrot_kernels)
    bundle.uses_kernels = True
    assert bundle.model.fused
    return bundle


async def generate(engine) -> list[tuple[int, ...]]:
    prompts = [tuple(range(5, 22)), (3, 1, 4, 1, 5, 9, 2, 6)]
    for i, p in enumerate(prompts):
        await engine.fill(FillRequest(f"c{i}", token_ids=p))
    params = SamplingParams(max_tokens=STEPS, ignore_eos=True)
    results = await asyncio.gather(*(engine.generate_all(GenerateRequest(f"c{i}",
                                                                         sampling=params))
                                     for i in range(len(prompts))))
    return [r.token_ids for r in results]


async def test_fused_path_matches_unfused_greedy(make_engine, fused_bundle):
    reference = load_bundle(tiny_config())
    assert not reference.model.fused
    expected = await generate(make_engine(reference, block_size=4))
    assert all(len(t) == STEPS for t in expected)
    assert len(set(expected[0])) > 1                 # not a degenerate constant stream
    assert await generate(make_engine(fused_bundle, block_size=4)) == expected


async def test_fused_graph_steps_match_unfused(make_engine, fused_bundle):
    """Decode steps through DecodeGraphs (static buffers, padding, argmax in the step)."""
    expected = await generate(make_engine(load_bundle(tiny_config()), block_size=4))
    engine = make_engine(fused_bundle, block_size=4, decode_graphs=lambda model, kv, *,
                         max_width, max_batch: DecodeGraphs(model, kv, max_batch=4,
                                                            max_width=max_width, capture=False))
    runner = engine.runner
    assert await generate(engine) == expected
    assert runner.graphs.num_replays >= STEPS - 1
