"""The builtin engine on the real SmolLM2-135M-Instruct weights (float32, CPU)."""

from __future__ import annotations

import asyncio

import pytest

from parrot.engines.protocol import FillRequest, GenerateRequest
from parrot.sampling import SamplingParams

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.model

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "Once upon a time, in a small village",
]
SYSTEM = ("<|im_start|>system\nYou are a helpful assistant who answers briefly and "
          "precisely.<|im_end|>\n<|im_start|>user\n")


@pytest.fixture(scope="module")
def hf_model(smollm2_bundle):
    from transformers import AutoModelForCausalLM

    from parrot.engines.builtin.config import default_cache_dir
    from parrot.engines.builtin.llama.loader import prepare_smollm2

    folder = prepare_smollm2(default_cache_dir())
    return AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()


def hf_greedy(hf_model, ids: list[int], n: int) -> list[int]:
    input_ids = torch.tensor([ids])
    with torch.inference_mode():
        out = hf_model.generate(input_ids, attention_mask=torch.ones_like(input_ids),
                                max_new_tokens=n, do_sample=False, pad_token_id=2)
    return out[0, len(ids):].tolist()


async def test_greedy_is_token_identical_to_hf_generate(smollm2_bundle, make_engine, hf_model):
    engine = make_engine(smollm2_bundle, num_blocks=64)
    tokenizer = smollm2_bundle.tokenizer

    async def run(i: int) -> tuple[int, ...]:
        await engine.fill(FillRequest(f"p{i}", text=PROMPTS[i]))
        result = await engine.generate_all(GenerateRequest(
            f"p{i}", sampling=SamplingParams(max_tokens=24)))
        return result.token_ids

    got = await asyncio.gather(*(run(i) for i in range(len(PROMPTS))))   # one batch
    for prompt, tokens in zip(PROMPTS, got):
        ids = tokenizer(prompt, add_special_tokens=False).input_ids
        assert list(tokens) == hf_greedy(hf_model, ids, 24), prompt


async def test_fork_of_shared_prompt_matches_scratch_and_shares_blocks(smollm2_bundle,
                                                                        make_engine):
    engine = make_engine(smollm2_bundle, num_blocks=64)
    await engine.fill(FillRequest("sys", text=SYSTEM))
    sys_len = (await engine.stats()).num_tokens_in_use
    free = (await engine.stats()).num_blocks_free
    questions = ["What is the capital of Italy?", "Name a primary colour."]
    forks = []
    for i, q in enumerate(questions):
        await engine.fill(FillRequest(f"f{i}", "sys", text=q + "<|im_end|>\n"))
        forks.append(f"f{i}")
    shared = (sys_len - 1) // 16                  # full blocks of the parent's computed tokens
    assert shared >= 1
    own = 0
    for name in forks:
        table = engine.block_table(name)
        assert table[:shared] == engine.block_table("sys")[:shared]
        own += len(table) - shared
    # the forks allocated only their own tail blocks, nothing for the shared ones
    assert (await engine.stats()).num_blocks_free == free - own
    params = SamplingParams(max_tokens=12)
    forked = await asyncio.gather(*(engine.generate_all(GenerateRequest(
        f"f{i}", sampling=params)) for i in range(len(questions))))
    for i, q in enumerate(questions):
        await engine.fill(FillRequest(f"s{i}", text=SYSTEM + q + "<|im_end|>\n"))
        scratch = await engine.generate_all(GenerateRequest(f"s{i}", sampling=params))
        assert forked[i].token_ids == scratch.token_ids


async def test_eos_stop_strings_and_streaming_text(smollm2_bundle, make_engine):
    engine = make_engine(smollm2_bundle, num_blocks=64)
    await engine.fill(FillRequest("chat", text=PROMPTS[2]))
    result = await engine.generate_all(GenerateRequest("chat", sampling=SamplingParams(
        max_tokens=24)))
    assert (result.text, result.finish_reason) == ("The answer is 4.", "eos")
    assert result.token_ids[-1] == 2                              # <|im_end|> stays in the ids

    await engine.fill(FillRequest("code", text=PROMPTS[1]))
    await engine.fill(FillRequest("code2", "code", token_ids=()))
    full = await engine.generate_all(GenerateRequest("code", sampling=SamplingParams(
        max_tokens=20)))
    assert full.text == smollm2_bundle.tokenizer.decode(list(full.token_ids))
    pieces = []
    async for chunk in engine.generate(GenerateRequest("code2", sampling=SamplingParams(
            max_tokens=20, stop=("return",)))):
        pieces.append(chunk)
    assert pieces[-1].finish_reason == "stop"
    assert "".join(c.text for c in pieces) == full.text[:full.text.index("return")]
    assert len(pieces) > 3                                         # streamed, not one blob
