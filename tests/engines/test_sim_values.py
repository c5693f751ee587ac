"""The simulated engine's constrained values: valid for their constraint, varied by seed."""

from __future__ import annotations

import json
import random
import re

import pytest

from parrot.constraints import Choice, JsonObject, JsonSchema, Regex
from parrot.engines.latency_model import SimulatedEngineConfig
from parrot.engines.protocol import FillRequest, GenerateRequest
from parrot.engines.sim_values import sample_value
from parrot.engines.simulated import SimulatedEngine
from parrot.sampling import SamplingParams

jsonschema = pytest.importorskip("jsonschema")

SCHEMAS = [
    {"type": "object", "properties": {"a": {"type": "integer", "minimum": 3, "maximum": 9},
                                      "b": {"type": ["string", "null"]},
                                      "c": {"type": "array", "items": {"enum": [1, "x"]},
                                            "minItems": 2, "maxItems": 2}},
     "required": ["a", "c"], "additionalProperties": False},
    # what Pydantic writes for a nested model: $defs and $ref
    {"$defs": {"Step": {"type": "object", "properties": {"tool": {"const": "calc"},
                                                         "n": {"type": "number"}},
                        "required": ["tool", "n"]}},
     "type": "object", "properties": {"steps": {"type": "array",
                                                "items": {"$ref": "#/$defs/Step"}}},
     "required": ["steps"]},
    {"anyOf": [{"type": "boolean"}, {"type": "string", "pattern": "^id-[0-9a-f]{4}$"}]},
]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_json_values_are_valid_and_vary(schema):
    texts = {sample_value(JsonSchema.of(schema), random.Random(seed)) for seed in range(20)}
    for text in texts:
        jsonschema.validate(json.loads(text), schema)
    assert len(texts) > 1


def test_regex_choice_and_object_values():
    for pattern in [r"[A-Z][a-z]{2,5}-\d{3}", r"(yes|no)( maybe)?", r"[^,]{1,4},x+"]:
        for seed in range(10):
            assert re.fullmatch(pattern, sample_value(Regex(pattern), random.Random(seed)))
    assert sample_value(Choice(("a", "b")), random.Random(0)) in ("a", "b")
    assert isinstance(json.loads(sample_value(JsonObject(), random.Random(0))), dict)


async def test_the_simulated_engine_generates_the_value():
    engine = SimulatedEngine("sim", SimulatedEngineConfig.from_mapping({"zero_latency": True}))
    await engine.fill(FillRequest("p", text="Give me a code: "))
    result = await engine.generate_all(GenerateRequest("g", parent_context_id="p", sampling=(
        SamplingParams(max_tokens=8, constraint=Regex("[0-9]{5}")))))
    assert re.fullmatch("[0-9]{5}", result.text) and result.finish_reason == "eos"
    assert len(result.token_ids) == 8
    await engine.close()
