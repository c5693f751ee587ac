"""Constraint types: wire form, shape and compile checks, and how they ride on SamplingParams
and the engine protocol."""

from __future__ import annotations

import pytest

import parrot
from parrot.constraints import (Choice, ConstraintError, JsonObject, JsonSchema, Regex,
                                check_constraint, constraint_from_json, openai_fields,
                                parse_value)
from parrot.engines.protocol import GenerateRequest
from parrot.errors import InvalidRequestError
from parrot.sampling import SamplingParams

SCHEMA = {"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "string"}}}


@pytest.mark.parametrize("constraint", [
    JsonSchema.of(SCHEMA, "thing"), JsonObject(), Regex("[a-z]+"), Choice(("x", "y z"))])
def test_the_wire_form_round_trips_through_the_engine_protocol(constraint):
    request = GenerateRequest("c", sampling=SamplingParams(max_tokens=5, constraint=constraint))
    again = GenerateRequest.from_wire(request.to_wire())
    assert again.sampling.constraint == constraint
    assert constraint_from_json(constraint.to_json()) == constraint


def test_schema_key_order_is_kept():
    # properties are generated in the schema's order, so the order is part of the constraint
    assert list(JsonSchema.of(SCHEMA).schema["properties"]) == ["b", "a"]


def test_unconstrained_wire_form_is_unchanged():
    assert "constraint" not in SamplingParams().to_json()


@pytest.mark.parametrize("data, message", [
    ({"type": "grammar"}, "constraint.type must be one of"),
    ({"type": "regex"}, "non-empty pattern"),
    ({"type": "choice", "choices": []}, "1 to 1024"),
    ({"type": "json_schema"}, "needs 'schema'"),
    ({"type": "json_schema", "schema": [1]}, "a JSON Schema is an object"),
    ({"type": "regex", "pattern": "a", "flags": "i"}, "unknown field"),
    ("json", "a constraint is an object"),
])
def test_shape_errors(data, message):
    with pytest.raises(ConstraintError, match=message):
        constraint_from_json(data)


@pytest.mark.parametrize("constraint", [
    JsonSchema.of({"type": "nonsense"}), JsonSchema.of({"properties": 5}), Regex("a(b")])
def test_compile_errors_name_where(constraint):
    with pytest.raises(ConstraintError, match="output 'plan': invalid"):
        check_constraint(constraint, "output 'plan'")


def test_a_constraint_refuses_stop_strings_and_ignore_eos():
    with pytest.raises(InvalidRequestError, match="stop"):
        SamplingParams(stop=("\n",), constraint=JsonObject())
    with pytest.raises(InvalidRequestError, match="ignore_eos"):
        SamplingParams(ignore_eos=True, constraint=Regex("a"))


def test_frontend_spelling_and_parsing():
    assert parrot.json() == JsonObject()
    assert parrot.json(SCHEMA) == JsonSchema.of(SCHEMA)
    assert parrot.choice(["a"]) == Choice(("a",)) and parrot.regex("a") == Regex("a")
    with pytest.raises(ConstraintError):
        parrot.choice("ab")
    assert parse_value(JsonObject(), '{"a": 1}') == {"a": 1}
    assert parse_value(Regex("a+"), "aa") == "aa"
    with pytest.raises(ConstraintError, match="max_tokens"):
        parse_value(JsonSchema.of(SCHEMA), '{"a": ')


def test_openai_fields():
    assert openai_fields(JsonObject()) == {"response_format": {"type": "json_object"}}
    assert openai_fields(Regex("x"))["guided_regex"] == "x"
    assert openai_fields(Choice(("a", "b")))["guided_choice"] == ["a", "b"]
    fields = openai_fields(JsonSchema.of(SCHEMA, "n"))["response_format"]
    assert fields["json_schema"] == {"name": "n", "schema": SCHEMA, "strict": True}
