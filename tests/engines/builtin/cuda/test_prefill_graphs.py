"""Prefill graphs (prefill_graphs.py): token buckets, padding of the fixed inputs, and the
piecewise step (layers between eager attention calls) against the eager forward pass, on the
CPU with `capture=False` (the same pieces and buffers, no capture; the fused ops run under
the Triton interpreter). The capture itself needs a GPU (bench/bench_engine.py
--suite-fill measures it there)."""

from __future__ import annotations

import asyncio

import pytest
import torch

from parrot.engines.builtin.llama.attention import AttentionMetadata, PrefillChunk, make_decode_fn
from parrot.engines.builtin.build import load_bundle
from parrot.engines.builtin.config import BuiltinConfigError, BuiltinEngineConfig
from parrot.engines.builtin.kv_cache import KVCache
from parrot.engines.builtin.cuda.prefill_graphs import PrefillGraphs, token_bucket, token_buckets
from parrot.engines.protocol import FillRequest, GenerateRequest
from parrot.sampling import SamplingParams

parrot_kernels = pytest.importorskip("parrot_kernels")
BS = 4


@pytest.fixture(scope="module")
def fused_bundle():
    bundle = load_bundle(BuiltinEngineConfig(model="tiny", dtype="float32", device="cpu",
                                             num_blocks=64, seed=7))
    bundle.model.use_decode(make_decode_fn(parrot_kernels))
    bundle.model.use_fused(parrot_kernels)
    bundle.uses_kernels = True
    return bundle


def make_graphs(bundle, num_blocks: int = 64, max_tokens: int = 64) -> PrefillGraphs:
    kv = KVCache(bundle.shape, num_blocks, BS, bundle.model.dtype, bundle.model.device,
                 scratch_block=True)
    return PrefillGraphs(bundle.model, kv, max_tokens=max_tokens, capture=False)


def test_token_buckets():
    assert token_buckets(512) == [16, 32, 64, 128, 256, 384, 512]
    assert token_buckets(1000) == [16, 32, 64, 128, 256, 384, 512, 640, 768, 896, 1000]
    assert token_buckets(100) == [16, 32, 64, 100]
    assert token_buckets(8) == [8]
    assert [token_bucket(n, 512) for n in (1, 16, 17, 100, 257, 384, 385, 512)] == [
        16, 16, 32, 128, 384, 384, 512, 512]
    assert token_bucket(70, 100) == 100
    assert token_bucket(513, 512) is None and token_bucket(0, 512) is None


def test_fill_pads_every_row_past_the_step(fused_bundle):
    """A smaller step after a larger one in the same bucket must not leave the larger one's
    slots behind: the padding rows would write their K/V into another context's blocks."""
    graphs = make_graphs(fused_bundle)
    scratch = graphs.kv.scratch_block * BS
    graphs.fill(list(range(1, 11)), list(range(10)), list(range(40, 50)), 16)
    graphs.fill([7, 8], [3, 4], [12, 13], 16)
    assert graphs.input_ids[:16].tolist() == [7, 8] + [0] * 14
    assert graphs.positions[:16].tolist() == [3, 4] + [0] * 14
    assert graphs.slots[:16].tolist() == [12, 13] + [scratch] * 14


def test_needs_fused_ops_and_a_scratch_block(fused_bundle):
    plain = load_bundle(BuiltinEngineConfig(model="tiny", dtype="float32", device="cpu",
                                            num_blocks=8))
    kv = KVCache(plain.shape, 8, BS, plain.model.dtype, plain.model.device, scratch_block=True)
    with pytest.raises(ValueError, match="fused"):
        PrefillGraphs(plain.model, kv, max_tokens=16, capture=False)
    kv = KVCache(fused_bundle.shape, 8, BS, fused_bundle.model.dtype, fused_bundle.model.device)
    with pytest.raises(ValueError, match="scratch"):
        PrefillGraphs(fused_bundle.model, kv, max_tokens=16, capture=False)


def prefill_meta(slots: list[int], start: int, blocks: list[int]) -> AttentionMetadata:
    n = len(slots)
    return AttentionMetadata(torch.tensor(slots), 0, None, None, None,
                             [PrefillChunk(0, n, start, torch.tensor(blocks))])


def test_piecewise_prefill_matches_the_eager_forward(fused_bundle):
    """Two chunks of one context (the second attends to the first in the cache) through the
    padded pieces == model.forward, hidden states and the K/V written; only padding rows
    touch the scratch block."""
    graphs = make_graphs(fused_bundle)
    model, kv = fused_bundle.model, graphs.kv
    torch.manual_seed(0)
    kv.data.normal_()
    before = kv.data.clone()
    blocks = [3, 9, 5]
    ids = [11, 42, 7, 99, 3, 15, 27, 8, 64]
    chunks = [(0, 5), (5, 9)]

    def slots(a: int, b: int) -> list[int]:
        return [blocks[p // BS] * BS + p % BS for p in range(a, b)]

    got = []
    for a, b in chunks:
        hidden = graphs.run(ids[a:b], list(range(a, b)), slots(a, b),
                            prefill_meta(slots(a, b), a, blocks[:-(-b // BS)]))
        assert hidden is not None and hidden.shape[0] == b - a
        got.append(hidden.clone())
    assert graphs.num_replays == 2 and graphs.num_captured == 1     # both in bucket 16
    after = kv.data.clone()
    kv.data.copy_(before)
    for (a, b), hidden in zip(chunks, got):
        expected = model.forward(torch.tensor(ids[a:b]), torch.arange(a, b), kv.layers,
                                 prefill_meta(slots(a, b), a, blocks[:-(-b // BS)]))
        torch.testing.assert_close(hidden, expected, rtol=1e-5, atol=1e-5)
    real = torch.ones(kv.num_blocks + 1, dtype=torch.bool)
    real[kv.scratch_block] = False
    torch.testing.assert_close(after[:, :, real], kv.data[:, :, real])
    untouched = [b for b in range(kv.num_blocks) if b not in blocks]
    assert torch.equal(after[:, :, untouched], before[:, :, untouched])
    assert not torch.equal(after[:, :, kv.scratch_block], before[:, :, kv.scratch_block])


def test_a_step_over_the_largest_bucket_runs_eagerly(fused_bundle):
    graphs = make_graphs(fused_bundle, max_tokens=16)
    n = 17
    slots = list(range(n))
    assert graphs.run([1] * n, list(range(n)), slots, prefill_meta(slots, 0, [0, 1, 2, 3, 4])
                      ) is None
    assert graphs.num_replays == 0 and graphs.num_captured == 0


async def serve(engine) -> list[tuple[int, ...]]:
    """Fills, forks, a Fill that joins a running decode (a mixed step) and one of 21 tokens."""
    params = SamplingParams(max_tokens=6, ignore_eos=True)
    await engine.fill(FillRequest("sys", token_ids=tuple(range(10, 31))))   # 21 tokens
    await engine.fill(FillRequest("c0", "sys", token_ids=(40, 50)))
    first = asyncio.ensure_future(engine.generate_all(GenerateRequest("c0", sampling=params)))
    await asyncio.sleep(0)
    await engine.fill(FillRequest("c1", "sys", token_ids=(41, 51, 61)))
    await engine.fill(FillRequest("lone", token_ids=(7, 8, 9)))
    rest = await asyncio.gather(*(engine.generate_all(GenerateRequest(c, sampling=params))
                                  for c in ("c1", "lone")))
    return [r.token_ids for r in [await first, *rest]]


@pytest.mark.parametrize("max_tokens", [64, 16])
async def test_engine_with_prefill_graphs_matches_eager(make_engine, fused_bundle, max_tokens):
    """Every step through the pieces (no decode graphs here: decode-only steps take the
    pieces too) gives the eager engine's tokens; with 16-row buckets the 21-token Fill runs
    eagerly and is not counted."""
    common = dict(block_size=BS, num_blocks=64)
    expected = await serve(make_engine(fused_bundle, **common))
    assert all(len(t) == 6 for t in expected)
    engine = make_engine(fused_bundle, prefill_graphs=lambda model, kv, **_: PrefillGraphs(
        model, kv, max_tokens=max_tokens, capture=False), **common)
    runner = engine.runner
    graphs = runner.prefill_graphs
    assert await serve(engine) == expected
    stats = await engine.stats()
    eager_steps = 1 if max_tokens == 16 else 0
    count = stats.counter
    assert count("num_piecewise_steps") == graphs.num_replays == count("num_steps") - eager_steps
    assert count("num_graph_steps") == 0 and 0 < count("piecewise_step_ms") <= count("step_ms")


def test_config_key():
    assert BuiltinEngineConfig().prefill_graph_max_tokens == 512
    assert BuiltinEngineConfig(prefill_graph_max_tokens=0).prefill_graph_max_tokens == 0
    for bad in (-1, "512", 1.5):
        with pytest.raises(BuiltinConfigError, match="prefill_graph_max_tokens"):
            BuiltinEngineConfig(prefill_graph_max_tokens=bad)
