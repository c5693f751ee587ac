"""Structured outputs and tool calls through the official `openai` client against
parrot-serve on the builtin engine with SmolLM2 (CPU): real constrained decoding at
temperature 1.0, a few samples each (bench/constrained_acceptance.py runs 50)."""

from __future__ import annotations

import json

import openai
import pytest

from tests.serve_process import NEEDS_SMOLLM2, parrot_serve, smollm2_config

jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("llguidance")
pytestmark = [pytest.mark.model, pytest.mark.slow, NEEDS_SMOLLM2]

CONFIG = smollm2_config(kv_cache_tokens=8192)
CITY = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 20},
    "country": {"type": "string", "maxLength": 20},
    "size": {"enum": ["small", "medium", "large"]},
    "sights": {"type": "array", "items": {"type": "string", "maxLength": 16}, "maxItems": 2}},
    "required": ["city", "country", "size", "sights"], "additionalProperties": False}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 20}, "unit": {"enum": ["c", "f"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with parrot_serve(CONFIG, tmp_path_factory.mktemp("smol-tools"), timeout_s=90) as (url, _):
        with openai.OpenAI(base_url=url + "/v1", api_key="unused") as c:
            yield c


def test_json_schema_reply_validates(client):
    reply = client.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "Describe Paris as JSON."}],
        max_tokens=96, temperature=1.0, seed=3, n=2, response_format={
            "type": "json_schema", "json_schema": {"name": "city", "schema": CITY,
                                                   "strict": True}})
    for choice in reply.choices:
        assert choice.finish_reason == "stop", choice.message.content
        jsonschema.validate(json.loads(choice.message.content), CITY)


def test_required_tool_call_streamed(client):
    stream = client.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "Weather in Rome?"}],
        tools=[WEATHER], tool_choice="required", max_tokens=48, temperature=1.0, seed=1,
        stream=True)
    chunks = list(stream)
    calls = [c.choices[0].delta.tool_calls[0] for c in chunks
             if c.choices and c.choices[0].delta.tool_calls]
    assert calls[0].function.name == "get_weather" and calls[0].id
    arguments = json.loads("".join(c.function.arguments or "" for c in calls))
    jsonschema.validate(arguments, WEATHER["function"]["parameters"])
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
