"""Constrained decoding in the builtin engine on SmolLM2 (CPU): every sample at temperature 1.0
is valid under its constraint (a handful here; bench/constrained_acceptance.py runs 50 each),
rows of one batch under different constraints or none, and the grammar compiled once."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from parrot.constraints import Choice, JsonSchema, Regex
from parrot.engines.protocol import FillRequest, GenerateRequest
from parrot.sampling import SamplingParams

torch = pytest.importorskip("torch")
pytest.importorskip("llguidance")
jsonschema = pytest.importorskip("jsonschema")
pytestmark = pytest.mark.model

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "level": {"enum": ["low", "medium", "high"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3},
        "owner": {"type": "object", "properties": {"id": {"type": "integer"},
                                                   "active": {"type": "boolean"}},
                  "required": ["id", "active"], "additionalProperties": False},
    },
    "required": ["name", "level", "tags", "owner"],
    "additionalProperties": False,
}
PROMPT = ("<|im_start|>user\nDescribe a software project as JSON.<|im_end|>\n"
          "<|im_start|>assistant\n")


async def _samples(engine, constraint, n: int, max_tokens: int) -> list[tuple[str, str]]:
    await engine.fill(FillRequest("prompt", text=PROMPT))

    async def one(i: int) -> tuple[str, str]:
        result = await engine.generate_all(GenerateRequest(
            f"s{i}", parent_context_id="prompt",
            sampling=SamplingParams(max_tokens=max_tokens, temperature=1.0, seed=100 + i,
                                    constraint=constraint)))
        return result.text, result.finish_reason

    return await asyncio.gather(*(one(i) for i in range(n)))


@pytest.mark.timeout(300)   # ~60 tokens x 3 rows on 2 shared CPU cores
async def test_json_schema_samples_are_valid(smollm2_bundle, make_engine):
    engine = make_engine(smollm2_bundle, num_blocks=128)
    for text, finish in await _samples(engine, JsonSchema.of(SCHEMA), 3, 120):
        assert finish == "eos", text   # the grammar ended it, not max_tokens
        jsonschema.validate(json.loads(text), SCHEMA)
    assert engine.grammar_compiles == 1                  # the one grammar, cached


async def test_regex_and_choice_samples_match(smollm2_bundle, make_engine):
    engine = make_engine(smollm2_bundle, num_blocks=128)
    pattern = r"[A-Z][a-z]{2,6}-[0-9]{3}"
    for text, finish in await _samples(engine, Regex(pattern), 3, 20):
        assert re.fullmatch(pattern, text) and finish == "eos", text
    choices = ("apple", "banana split", "cherry")
    for text, _ in await _samples(engine, Choice(choices), 3, 10):
        assert text in choices


async def test_constrained_and_free_rows_share_a_batch(smollm2_bundle, make_engine):
    """A free row next to a constrained one is sampled exactly as without it (same seed)."""
    engine = make_engine(smollm2_bundle, num_blocks=128)
    await engine.fill(FillRequest("p", text="The capital of France is"))
    free = SamplingParams(max_tokens=6, temperature=0)
    alone = await engine.generate_all(GenerateRequest("a", parent_context_id="p", sampling=free))
    both = await asyncio.gather(
        engine.generate_all(GenerateRequest("b", parent_context_id="p", sampling=free)),
        engine.generate_all(GenerateRequest("c", parent_context_id="p", sampling=SamplingParams(
            max_tokens=6, temperature=0, constraint=Regex("[0-9]{4}")))))
    assert both[0].token_ids == alone.token_ids
    assert re.fullmatch("[0-9]{4}", both[1].text)
