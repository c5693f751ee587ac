"""The `vllm` engine kind. Where vllm does not import, only its configuration, the one-line
error naming the package, and the lowering of contexts onto prompts (against a stand-in with
vLLM's generate/abort shapes) are tested; with vllm and a GPU, the real engine runs SmolLM2."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import AsyncIterator

import pytest

from parrot.engines.factory import create_engine
from parrot.engines.latency_model import EngineConfigError
from parrot.engines.protocol import FillRequest, GenerateRequest
from parrot.engines.vllm_engine import VLLMEngine, VLLMEngineConfig
from parrot.errors import PromptTooLongError, UnknownContextError
from parrot.extras import MissingExtraError
from parrot.sampling import SamplingParams

HAS_VLLM = importlib.util.find_spec("vllm") is not None
SMOLLM2 = Path.home() / ".cache/parrot/models/smollm2-135m-instruct"


@pytest.mark.skipif(HAS_VLLM, reason="vllm is installed")
def test_without_vllm_one_line_names_the_package():
    with pytest.raises(MissingExtraError) as exc:
        create_engine("vllm", "v0", {"model": "any"})
    assert str(exc.value) == ("engine 'v0' (kind vllm) needs the 'vllm' extra (no module "
                              "'vllm'): pip install 'parrot-serve[vllm]'")


def test_config_is_validated():
    with pytest.raises(EngineConfigError, match="unknown key"):
        VLLMEngineConfig.from_mapping({"model": "m", "tp": 2})
    with pytest.raises(EngineConfigError, match="required key 'model' is missing"):
        VLLMEngineConfig.from_mapping({})
    with pytest.raises(EngineConfigError, match="tensor_parallel_size"):
        VLLMEngineConfig.from_mapping({"model": "m", "tensor_parallel_size": 0})


@dataclass
class _Sample:
    text: str
    token_ids: list[int]
    finish_reason: str | None


@dataclass
class _Output:
    outputs: list[_Sample]
    finished: bool


class _Tokenizer:
    chat_template = None

    def __call__(self, text: str, add_special_tokens: bool = False) -> Any:
        return type("Enc", (), {"input_ids": [ord(c) for c in text]})()


class _StandInLLM:
    """vLLM's AsyncLLMEngine surface: generate(prompt, params, request_id) yields cumulative
    RequestOutputs; this one echoes the prompt's last tokens back, one per step."""

    def __init__(self) -> None:
        self.prompts: list[list[int]] = []
        self.aborted: list[str] = []
        self.resets = 0

    async def get_tokenizer(self) -> Any:
        return _Tokenizer()

    async def generate(self, prompt: dict, params: Any, request_id: str) -> AsyncIterator[Any]:
        ids = prompt["prompt_token_ids"]
        self.prompts.append(list(ids))
        out: list[int] = []
        for i in range(params.max_tokens):
            out.append(ids[-1 - i])
            done = i == params.max_tokens - 1
            yield _Output([_Sample("".join(map(chr, out)), list(out),
                                   "length" if done else None)], done)

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)

    async def reset_prefix_cache(self) -> bool:
        self.resets += 1
        return True


async def test_contexts_lower_to_token_prompts():
    llm = _StandInLLM()
    engine = VLLMEngine("v0", VLLMEngineConfig("m", max_model_len=64), llm,
                        to_vllm_sampling=lambda s: s)
    await engine.start()
    await engine.fill(FillRequest("a", text="abc"))
    chunks = [c async for c in engine.generate(GenerateRequest(
        "b", parent_context_id="a", sampling=SamplingParams(max_tokens=2)))]
    assert llm.prompts == [[97, 98, 99]]
    assert "".join(c.text for c in chunks) == "cb" and chunks[-1].finish_reason == "length"
    assert engine.context_tokens("b") == [97, 98, 99, 99, 98]
    assert engine.context_tokens("a") == [97, 98, 99]
    stats = await engine.stats()    # one Generate of two tokens: timed after its first
    assert stats.counter("tpot_generates") == 1 and stats.counter("tpot_us_sum") >= 0
    with pytest.raises(PromptTooLongError):
        await engine.fill(FillRequest("c", text="x" * 65))
    with pytest.raises(UnknownContextError):
        await engine.free_context("nope")


async def test_a_prompt_in_the_generate_joins_the_context_and_its_length_comes_first():
    llm = _StandInLLM()
    engine = VLLMEngine("v0", VLLMEngineConfig("m", max_model_len=64), llm,
                        to_vllm_sampling=lambda s: s)
    await engine.start()
    assert (await engine.info()).takes_prompt_in_generate
    await engine.fill(FillRequest("a", text="abc"))
    chunks = [c async for c in engine.generate(GenerateRequest(
        "b", parent_context_id="a", sampling=SamplingParams(max_tokens=2), text="de"))]
    assert llm.prompts == [[97, 98, 99, 100, 101]]   # the parent's tokens, then the prompt
    assert [c.prompt_len for c in chunks] == [5, None]
    assert engine.context_tokens("b") == [97, 98, 99, 100, 101, 101, 100]
    with pytest.raises(PromptTooLongError):   # checked as a Fill of it would be
        await engine.generate_all(GenerateRequest("c", text="x" * 65))


async def test_reset_prefix_cache_is_vllms_own():
    llm = _StandInLLM()
    engine = VLLMEngine("v0", VLLMEngineConfig("m", max_model_len=64), llm,
                        to_vllm_sampling=lambda s: s)
    assert await engine.reset_prefix_cache() == 0 and llm.resets == 1


async def test_a_generate_let_go_mid_way_counts_the_tokens_vllm_handed_over():
    """Aborted after 3 of its 10 tokens: one aborted Generate of 3 tokens, and vLLM told to
    abort it; a Generate closed after its last chunk finished and counts nothing."""
    llm = _StandInLLM()
    engine = VLLMEngine("v0", VLLMEngineConfig("m", max_model_len=64), llm,
                        to_vllm_sampling=lambda s: s)
    await engine.start()
    await engine.fill(FillRequest("a", text="abcdefghijkl"))
    whole = engine.generate(GenerateRequest("b", "a", SamplingParams(max_tokens=2)))
    chunks = [await anext(whole), await anext(whole)]
    assert chunks[-1].is_finished
    await whole.aclose()          # as the engine server closes a stream after its last chunk
    stream = engine.generate(GenerateRequest("c", "a", SamplingParams(max_tokens=10)))
    for _ in range(3):
        await anext(stream)
    await stream.aclose()
    stats = await engine.stats()
    assert (stats.counter("aborted_generates"), stats.counter("aborted_decode_tokens")) == (1, 3)
    assert llm.aborted[-1] == "v0-1"


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_VLLM or not SMOLLM2.is_dir(), reason="needs vllm and SmolLM2")
async def test_real_vllm_engine_on_smollm2():
    engine = create_engine("vllm", "v0", {"model": str(SMOLLM2), "max_model_len": 2048,
                                          "gpu_memory_utilization": 0.3})
    await engine.start()
    try:
        info = await engine.info()
        assert info.kind == "vllm" and info.chat_template is not None
        await engine.fill(FillRequest("sys", text="The capital of France is"))
        text = "".join([c.text async for c in engine.generate(GenerateRequest(
            "q", parent_context_id="sys", sampling=SamplingParams(max_tokens=4)))])
        assert "Paris" in text
    finally:
        await engine.close()
