"""Stall-free batching on the real SmolLM2-135M-Instruct weights (float32, CPU): a long prompt
that arrives while another stream decodes is split into chunks that join the decode steps
(`step_token_budget`), and every greedy token is the same as with the prompt in one chunk."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from parrot.engines.protocol import FillRequest, GenerateRequest
from parrot.sampling import SamplingParams

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.model

SHORT = "<|im_start|>user\nCount from one to fifty in words.<|im_end|>\n<|im_start|>assistant\n"
LONG = "".join(f"Note {i}: the river rose after the storm, and the ferry waited at the dock. "
               for i in range(30)) + "Summarise the notes in one sentence:"
BUDGET = 96          # the chunked engine's step: 1 decode + 95 prompt tokens


async def serve(engine) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The short prompt's 40 greedy tokens, with the long prompt filled once it is decoding,
    then the long prompt's 12 greedy tokens."""
    await engine.fill(FillRequest("s", text=SHORT))
    short: list[int] = []
    fill = None
    async for chunk in engine.generate(GenerateRequest(
            "s", sampling=SamplingParams(max_tokens=40, ignore_eos=True))):
        short.extend(chunk.token_ids)
        if fill is None and len(short) >= 2:    # the prompt arrives mid-stream
            fill = asyncio.create_task(engine.fill(FillRequest("l", text=LONG)))
    assert fill is not None
    await fill
    long = await engine.generate_all(GenerateRequest(
        "l", sampling=SamplingParams(max_tokens=12, ignore_eos=True)))
    return tuple(short), long.token_ids


def steps(trace: Path) -> list[dict]:
    return [json.loads(line) for line in trace.read_text().splitlines()]


async def test_a_chunked_long_prompt_gives_the_same_greedy_tokens(smollm2_bundle, make_engine,
                                                                   tmp_path):
    common = dict(num_blocks=128, max_batch_tokens=2048)
    whole = make_engine(smollm2_bundle, step_trace=str(tmp_path / "whole.jsonl"), **common)
    chunked = make_engine(smollm2_bundle, step_token_budget=BUDGET,
                          step_trace=str(tmp_path / "chunked.jsonl"), **common)
    expected = await serve(whole)
    got = await serve(chunked)
    await whole.close()
    await chunked.close()

    prompt_tokens = len(smollm2_bundle.tokenizer(LONG, add_special_tokens=False).input_ids)
    assert prompt_tokens > 4 * BUDGET
    # without a budget (auto, no speed profile on the CPU) the prompt is one chunk...
    short_fill, one = [s for s in steps(tmp_path / "whole.jsonl") if s["prefill_chunks"]]
    assert short_fill["decode_rows"] == 0
    assert one["prefill_tokens"] == prompt_tokens - 1 and one["decode_rows"] == 1
    # ...with it, chunks of at most the budget, each beside the running decode
    short_fill, *mixed = [s for s in steps(tmp_path / "chunked.jsonl") if s["prefill_chunks"]]
    assert sum(s["prefill_tokens"] for s in mixed) == prompt_tokens - 1
    assert len(mixed) == -(-(prompt_tokens - 1) // (BUDGET - 1))
    assert all(s["decode_rows"] == 1 and s["decode_rows"] + s["prefill_tokens"] <= BUDGET
               for s in mixed)
    assert got == expected
