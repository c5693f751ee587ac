"""response_format and tools through the official `openai` client against parrot-serve on a
simulated engine (which decodes a value sampled from the constraint): JSON Schema replies that
validate, forced tool calls as `tool_calls` with finish_reason "tool_calls", streamed as
OpenAI streams them, tool messages in the input, and 400s naming the field."""

from __future__ import annotations

import json

import openai
import pytest

from parrot.server.openai_tools import ToolStream, ToolUse, parse_tool_use
from tests.serve_process import SIM_ENGINE, parrot_serve

jsonschema = pytest.importorskip("jsonschema")

CONFIG = {"policy": {"name": "least_queue"}, "engines": [{"name": "sim-0", **SIM_ENGINE}]}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}
CLOCK = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}}
PERSON = {"type": "object", "properties": {
    "name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "pets": {"type": "array", "items": {"enum": ["cat", "dog"]}}},
    "required": ["name", "age", "pets"], "additionalProperties": False}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with parrot_serve(CONFIG, tmp_path_factory.mktemp("tools")) as (url, _):
        with openai.OpenAI(base_url=url + "/v1", api_key="unused") as c:
            yield c


def test_response_format_json_schema_and_object(client):
    reply = client.chat.completions.create(
        model="simulated", messages=ASK, max_tokens=32, response_format={
            "type": "json_schema", "json_schema": {"name": "person", "schema": PERSON,
                                                   "strict": True}})
    jsonschema.validate(json.loads(reply.choices[0].message.content), PERSON)
    reply = client.chat.completions.create(model="simulated", messages=ASK, max_tokens=8,
                                           response_format={"type": "json_object"})
    assert isinstance(json.loads(reply.choices[0].message.content), dict)


@pytest.mark.parametrize("tool_choice", [
    "required", {"type": "function", "function": {"name": "get_time"}}])
def test_forced_tool_calls(client, tool_choice):
    reply = client.chat.completions.create(model="simulated", messages=ASK, max_tokens=32,
                                           tools=[WEATHER, CLOCK], tool_choice=tool_choice)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    tool = {"get_weather": WEATHER, "get_time": CLOCK}[call.function.name]
    if isinstance(tool_choice, dict):
        assert call.function.name == "get_time"
    jsonschema.validate(json.loads(call.function.arguments), tool["function"]["parameters"])


def test_streamed_tool_call_deltas(client):
    stream = client.chat.completions.create(model="simulated", messages=ASK, max_tokens=32,
                                            tools=[WEATHER], tool_choice="required",
                                            stream=True)
    chunks = [c for c in stream]
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    calls = [d.tool_calls[0] for d in deltas if d.tool_calls]
    assert calls[0].id.startswith("call_") and calls[0].function.name == "get_weather"
    assert calls[0].function.arguments == "" and all(c.id is None for c in calls[1:])
    arguments = "".join(c.function.arguments for c in calls)
    jsonschema.validate(json.loads(arguments), WEATHER["function"]["parameters"])
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_tool_messages_in_the_input_and_auto(client):
    messages = [*ASK, {"role": "assistant", "content": None, "tool_calls": [{
        "id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": '{"city": "Paris", "unit": "c"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees, sunny"}]
    reply = client.chat.completions.create(model="simulated", messages=messages, max_tokens=4,
                                           tools=[WEATHER])   # tool_choice: auto
    assert reply.choices[0].finish_reason == "length"
    assert isinstance(reply.choices[0].message.content, str)


@pytest.mark.parametrize("body, param", [
    ({"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "nonsense"}}}}, "response_format"),
    ({"response_format": {"type": "xml"}}, "response_format"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function",
                                          "function": {"name": "nope"}}}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
])
def test_bad_structured_fields_are_400s_naming_the_field(client, body, param):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="simulated", messages=ASK, **body)
    assert info.value.body["param"] == param


def test_auto_replies_are_parsed_in_the_hermes_format():
    tools = parse_tool_use({"tools": [WEATHER]})
    text = 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": ' \
           '{"city": "Oslo", "unit": "c"}}\n</tool_call>'
    message, reason = tools.message(text, "stop")
    assert reason == "tool_calls"
    assert json.loads(message["tool_calls"][0]["function"]["arguments"])["city"] == "Oslo"
    assert tools.message("It is sunny.", "stop") == (
        {"role": "assistant", "content": "It is sunny."}, "stop")
    # an unknown tool's name is content, not a call
    assert tools.message('<tool_call>{"name": "rm", "arguments": {}}</tool_call>',
                         "stop")[1] == "stop"


def test_a_forced_stream_splits_name_and_arguments():
    stream = ToolStream(ToolUse(parse_tool_use({"tools": [WEATHER]}).tools, "required"), 0)
    text = '{"name": "get_weather", "arguments": {"city": "Rome", "unit": "c"}}'
    out = [d for piece in (text[:10], text[10:40], text[40:]) for d in stream.feed(piece, None)]
    out += stream.feed(None, "stop")
    args = "".join(d["delta"]["tool_calls"][0]["function"]["arguments"]
                   for d in out if d["delta"].get("tool_calls"))
    assert json.loads(args) == {"city": "Rome", "unit": "c"}
    assert out[-1]["finish_reason"] == "tool_calls"
