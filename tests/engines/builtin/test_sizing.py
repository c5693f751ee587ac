"""Serving defaults sized from the device (sizing.py): the KV cache, max_num_seqs and the graph
buckets as a pure function of the free memory, the model's shape and the config."""

from __future__ import annotations

import pytest

from parrot.engines.builtin.config import BuiltinEngineConfig
from parrot.engines.builtin.llama.shapes import NAMED_SHAPES
from parrot.engines.builtin.sizing import (DEFAULT_CPU_KV_TOKENS, ServingSize,
                                           activation_reserve_bytes, size_serving)

GIB = 2**30
LLAMA_7B = NAMED_SHAPES["llama-7b"]
BF16 = 2
KV_TOKEN = LLAMA_7B.kv_bytes_per_token(BF16)      # 512 KiB: 2 x 32 layers x 32 heads x 128


def size(free_gib: float | None, on_cuda: bool = True, **params) -> ServingSize:
    config = BuiltinEngineConfig.from_mapping({"model": "llama-7b", **params})
    free = None if free_gib is None else int(free_gib * GIB)
    return size_serving(config, LLAMA_7B, dtype_bytes=BF16, on_cuda=on_cuda, free_bytes=free)


def test_an_h200_serving_llama_7b_gets_256_sequences_and_graphs_to_256_rows():
    s = size(127.0)                    # 141 GB less the 13.5 GB of weights and the context
    assert KV_TOKEN == 512 * 1024
    assert s.num_blocks == int(127.0 * GIB * 0.8) // KV_TOKEN // 16 == 13004
    assert s.kv_tokens == 208064
    assert (s.max_num_seqs, s.graph_max_batch) == (256, 256)
    assert s.graph_batch_buckets == (1, 2, 4, 8, 16, 32, 64, 128, 256)
    assert s.seqs_source.startswith("auto") and s.kv_source == "0.8 of 127.0 GiB free"


def test_a_small_gpu_keeps_the_old_64_and_an_h100_gets_128():
    small = size(8.0)                  # a 24-GB card after the weights: 13,104 tokens
    assert small.kv_tokens == int(8 * GIB * 0.8) // KV_TOKEN // 16 * 16
    assert (small.max_num_seqs, small.graph_max_batch) == (64, 64)
    h100 = size(60.0)                  # 80 GB less the weights: 98,304 tokens / 512 = 192
    assert (h100.max_num_seqs, h100.graph_batch_buckets[-1]) == (128, 128)


def test_configured_numbers_are_kept():
    s = size(127.0, max_num_seqs=96)
    assert (s.max_num_seqs, s.seqs_source) == (96, "config")
    assert s.graph_batch_buckets == (1, 2, 4, 8, 16, 32, 64, 96)     # graphs up to max_num_seqs
    assert size(127.0, max_num_seqs=64, cuda_graph_max_batch=128).graph_max_batch == 64
    assert size(127.0, cuda_graph_max_batch=32).graph_max_batch == 32
    fixed = size(None, num_blocks=500)
    assert (fixed.num_blocks, fixed.kv_source, fixed.max_num_seqs) == (500, "num_blocks", 64)
    assert size(None, kv_cache_tokens=300_000).max_num_seqs == 256   # 585 seats of 512: capped


def test_the_cpu_default():
    s = size(None, on_cuda=False)
    assert (s.kv_tokens, s.kv_source, s.max_num_seqs) == (DEFAULT_CPU_KV_TOKENS,
                                                          "the CPU default", 64)


def test_the_activation_reserve_bounds_the_kv_cache_on_a_small_gpu():
    reserve = activation_reserve_bytes(LLAMA_7B, BF16, 2048, 256)
    # per token 4 x 4096 + 2 x 32 x 128 + 3 x 11008 elements; fp32 logits of 256 rows, twice
    assert reserve == 2 * (2048 * (16384 + 8192 + 33024) * 2 + 2 * 256 * 32000 * 4)
    free = reserve + GIB               # 80% of it would eat into the activations
    s = size(free / GIB)
    assert s.kv_tokens == (free - reserve) // KV_TOKEN // 16 * 16


def test_a_cache_of_no_block_is_an_error():
    with pytest.raises(ValueError, match="less than one block"):
        size(0.0001)
    with pytest.raises(ValueError, match="needs the free memory"):
        size(None)


async def test_the_engine_reports_what_it_serves_with(tiny_bundle, make_engine):
    from parrot.engines.protocol import EngineInfo, ServingLimits
    from parrot.speed_profile import SpeedProfile

    engine = make_engine(tiny_bundle, num_blocks=48, max_batch_tokens=512)
    info = await engine.info()
    assert info.serving == ServingLimits(
        max_num_seqs=64, max_batch_tokens=512, kv_cache_tokens=48 * 16, graph_batch_sizes=(),
        step_token_budget="step token budget: auto without a speed profile, so 512 tokens "
                          "per step (max_batch_tokens)")
    assert EngineInfo.from_wire(info.to_wire()) == info          # as the engine server sends it
    engine.use_speed_profile(SpeedProfile(0.02, ((0, 10.0), (100_000, 110.0))))
    serving = (await engine.info()).serving
    assert serving is not None and serving.step_token_budget.startswith(
        "step token budget: auto, ITL target 50 ms: prefill tokens beside decodes 511 at 0 KV")
