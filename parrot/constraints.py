"""Output constraints: what an output's text must match, decoded under a grammar.

A constraint rides on an output's `SamplingParams.constraint` (wire form: an object with a
`type`), so it travels wherever sampling does: a submit's per-output sampling, the engine
protocol's Generate, the OpenAI routes' `response_format` / `tools`. Four kinds:

* `JsonSchema(schema)`: a JSON value valid under a JSON Schema (`{"type": "json_schema",
  "schema": {...}}`);
* `JsonObject()`: any JSON object (`{"type": "json_object"}`);
* `Regex(pattern)`: text matching the whole regular expression (`{"type": "regex",
  "pattern": "..."}`; the Rust `regex` crate's syntax, which llguidance compiles);
* `Choice(choices)`: exactly one of a list of strings (`{"type": "choice", "choices": [...]}`).

Checks in two depths: the constructors check the shape (cheap, always); `check_constraint`
checks that the schema or pattern compiles (llguidance's grammar validation where it is
installed, else `jsonschema`'s meta-schema and Python's `re`), and is called where a request
enters (the submit's outputs, the OpenAI routes), so a bad schema is a 400 naming the
placeholder, never an engine error. Results are cached per constraint (constraints are
frozen, hashable values: a schema is held as its canonical JSON text).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from parrot.errors import InvalidRequestError

MAX_CHOICES = 1024
MAX_CONSTRAINT_CHARS = 100_000   # a schema or pattern's text; larger grammars are refused

# JSON is decoded with fixed separators and no free whitespace: a small model given free
# whitespace may emit newlines until max_tokens, and a canonical layout is what json.dumps
# writes. (The grammar allows exactly this layout; `parse` is unaffected.)
JSON_OPTIONS: Any = {"whitespace_flexible": False, "item_separator": ", ",
                                "key_separator": ": "}


class ConstraintError(InvalidRequestError):
    """A constraint that is malformed or does not compile (a 400)."""


@dataclass(frozen=True)
class JsonSchema:
    schema_json: str          # the schema as compact JSON text (hashable, the cache key)
    name: str | None = None   # a label (OpenAI's json_schema.name), not part of the grammar

    @property
    def schema(self) -> Any:
        return json.loads(self.schema_json)

    @classmethod
    def of(cls, schema: Any, name: str | None = None) -> JsonSchema:
        """From a JSON Schema (a mapping or boolean) or a Pydantic model class."""
        if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
            name = name or schema.__name__
            schema = schema.model_json_schema()
        if not isinstance(schema, (Mapping, bool)):
            raise ConstraintError(f"a JSON Schema is an object, got {type(schema).__name__}")
        try:
            # key order kept: properties are generated in the order the schema lists them
            text = json.dumps(schema, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ConstraintError(f"the JSON Schema is not JSON: {exc}") from None
        if len(text) > MAX_CONSTRAINT_CHARS:
            raise ConstraintError(f"the JSON Schema is over {MAX_CONSTRAINT_CHARS} characters")
        return cls(text, name)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"type": "json_schema", "schema": self.schema}
        if self.name is not None:
            data["name"] = self.name
        return data


@dataclass(frozen=True)
class JsonObject:
    def to_json(self) -> dict[str, Any]:
        return {"type": "json_object"}


@dataclass(frozen=True)
class Regex:
    pattern: str

    def __post_init__(self) -> None:
        if not isinstance(self.pattern, str) or not self.pattern:
            raise ConstraintError(f"a regex constraint needs a non-empty pattern, "
                                  f"got {self.pattern!r}")
        if len(self.pattern) > MAX_CONSTRAINT_CHARS:
            raise ConstraintError(f"the pattern is over {MAX_CONSTRAINT_CHARS} characters")

    def to_json(self) -> dict[str, Any]:
        return {"type": "regex", "pattern": self.pattern}


@dataclass(frozen=True)
class Choice:
    choices: tuple[str, ...]

    def __post_init__(self) -> None:
        if (not isinstance(self.choices, tuple) or not 1 <= len(self.choices) <= MAX_CHOICES
                or not all(isinstance(c, str) and c for c in self.choices)):
            raise ConstraintError(f"a choice constraint needs 1 to {MAX_CHOICES} non-empty "
                                  f"strings, got {self.choices!r}")

    def to_json(self) -> dict[str, Any]:
        return {"type": "choice", "choices": list(self.choices)}


Constraint = JsonSchema | JsonObject | Regex | Choice
CONSTRAINT_TYPES = (JsonSchema, JsonObject, Regex, Choice)
KINDS = ("json_schema", "json_object", "regex", "choice")


def constraint_from_json(data: Any) -> Constraint | None:
    """The wire form -> a constraint (None stays None); shape errors raise ConstraintError."""
    if data is None or isinstance(data, CONSTRAINT_TYPES):
        return data
    if not isinstance(data, Mapping):
        raise ConstraintError(f"a constraint is an object with a 'type' ({', '.join(KINDS)}), "
                              f"got {data!r}")
    kind = data.get("type")
    allowed = {"json_schema": {"schema", "name"}, "json_object": set(), "regex": {"pattern"},
               "choice": {"choices"}}
    if kind not in allowed:
        raise ConstraintError(f"constraint.type must be one of {list(KINDS)}, got {kind!r}")
    unknown = sorted(set(data) - allowed[kind] - {"type"})
    if unknown:
        raise ConstraintError(f"unknown field(s) {unknown} in a {kind} constraint; allowed: "
                              f"{sorted(allowed[kind])}")
    if kind == "json_schema":
        if "schema" not in data:
            raise ConstraintError("a json_schema constraint needs 'schema'")
        name = data.get("name")
        if name is not None and not isinstance(name, str):
            raise ConstraintError(f"constraint.name must be a string, got {name!r}")
        return JsonSchema.of(data["schema"], name)
    if kind == "json_object":
        return JsonObject()
    if kind == "regex":
        return Regex(data.get("pattern"))  # type: ignore[arg-type]
    choices = data.get("choices")
    if not isinstance(choices, Sequence) or isinstance(choices, str):
        raise ConstraintError(f"constraint.choices must be a list of strings, got {choices!r}")
    return Choice(tuple(choices))


# --- the frontend's spelling ---------------------------------------------------------------

def json_output(schema: Any = None, *, name: str | None = None) -> Constraint:
    """`parrot.json(Model)` / `parrot.json({...schema...})`; `parrot.json()`: any object."""
    return JsonObject() if schema is None else JsonSchema.of(schema, name)


def regex(pattern: str) -> Regex:
    return Regex(pattern)


def choice(choices: Sequence[str]) -> Choice:
    if isinstance(choices, str):
        raise ConstraintError("choice() takes a list of strings, not one string")
    return Choice(tuple(choices))


# --- compilation to a grammar (llguidance's text form) and the deep check -------------------

def grammar_text(constraint: Constraint) -> str:
    """The llguidance grammar of a constraint (needs the `structured` extra)."""
    from llguidance import LLMatcher  # gated by the callers (parrot.extras)

    if isinstance(constraint, JsonSchema):
        return LLMatcher.grammar_from_json_schema(constraint.schema_json, defaults=JSON_OPTIONS)
    if isinstance(constraint, JsonObject):
        return LLMatcher.grammar_from_json_schema({"type": "object"}, defaults=JSON_OPTIONS)
    if isinstance(constraint, Regex):
        return LLMatcher.grammar_from_regex(constraint.pattern)
    alternatives = " | ".join(json.dumps(c) for c in constraint.choices)
    return LLMatcher.grammar_from_lark(f"start: {alternatives}")


def check_constraint(constraint: Constraint | None, where: str) -> None:
    """Raise ConstraintError naming `where` (e.g. "output 'plan'") when the constraint's schema
    or pattern does not compile."""
    if constraint is None:
        return
    problem = _problem(constraint)
    if problem:
        raise ConstraintError(f"{where}: invalid {constraint.to_json()['type']} constraint: "
                              f"{problem}")


@functools.lru_cache(maxsize=1024)
def _problem(constraint: Constraint) -> str:
    """'' when the constraint compiles, else why not (cached per constraint)."""
    if isinstance(constraint, JsonSchema):
        schema = constraint.schema
        try:
            import jsonschema
        except ImportError:
            pass
        else:
            try:
                jsonschema.validators.validator_for(schema).check_schema(schema)
            except jsonschema.SchemaError as exc:
                return f"not a valid JSON Schema: {exc.message}"
    if isinstance(constraint, Regex):
        try:
            re.compile(constraint.pattern)
        except re.error as exc:
            return f"the pattern does not compile: {exc}"
    try:
        from llguidance import LLMatcher
    except ImportError:
        return ""   # the engine that decodes it compiles it again, with llguidance
    try:
        message = LLMatcher.validate_grammar(grammar_text(constraint))
    except ValueError as exc:
        return str(exc)
    return "" if not message or message.startswith("WARNING") else message.strip()


def openai_fields(constraint: Constraint) -> dict[str, Any]:
    """The fields of an OpenAI-compatible /v1/completions body that ask the server for this
    constraint: OpenAI's `response_format` for JSON (vLLM and Parrot take it on completions
    too), vLLM's `guided_regex` / `guided_choice` for the others (Parrot takes them too)."""
    if isinstance(constraint, JsonSchema):
        return {"response_format": {"type": "json_schema", "json_schema": {
            "name": constraint.name or "output", "schema": constraint.schema, "strict": True}}}
    if isinstance(constraint, JsonObject):
        return {"response_format": {"type": "json_object"}}
    if isinstance(constraint, Regex):
        return {"guided_regex": constraint.pattern}
    return {"guided_choice": list(constraint.choices)}


def parse_value(constraint: Constraint | None, text: str) -> Any:
    """The value of a constrained output's text: the JSON value for the JSON kinds, the text
    itself for regex and choice. Text that is not JSON (a generation cut by max_tokens)
    raises ConstraintError."""
    if isinstance(constraint, (JsonSchema, JsonObject)):
        try:
            return json.loads(text)
        except ValueError as exc:
            raise ConstraintError(f"the output is not complete JSON ({exc}); was it cut by "
                                  "max_tokens?") from None
    return text
