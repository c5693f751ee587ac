"""JSON Schema (OpenAPI 3.1) from typed dataclasses, for /openapi.json.

A dataclass becomes an object schema under `components/schemas` (its docstring the
description); a field without a default (or with `metadata={"required": True}`) is required;
`metadata={"schema": T}` documents a field as type `T` (a parsed form that never travels).
Types: str/int/float/bool/None, `X | Y`, `Literal`, `tuple[X, ...]`/`list[X]` (arrays),
`Mapping`/`dict` (objects), enums (their values), nested dataclasses (`$ref`). A type whose wire
form differs from its Python form names it in `WIRE_FORMS`.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import inspect
import types
import typing
from typing import Any

from parrot.sampling import SamplingParams
from parrot.transforms import Transform
from parrot.wire_types import ChatSpec, SamplingOverride

# Types serialized differently from their fields (their `to_wire`/`to_json` say how).
WIRE_FORMS: dict[type, dict[str, Any]] = {
    ChatSpec: {"description": "render the prompt through the model's chat template (text "
                              "before an output = the user's turn): true or {system?}",
               "anyOf": [{"type": "boolean"}, {
                   "type": "object", "additionalProperties": False,
                   "properties": {"system": {"type": "string"}}}]},
    Transform: {"description": "a transform: 'strip' | 'parse_list' | 'parse_json' | "
                               "{type: 'json_path', path} | {type: 'regex', pattern, group?}",
                "anyOf": [{"type": "string", "enum": ["strip", "parse_list", "parse_json"]},
                          {"type": "object", "required": ["type"],
                           "properties": {"type": {"type": "string",
                                                   "enum": ["json_path", "regex"]},
                                          "path": {"type": "string"},
                                          "pattern": {"type": "string"},
                                          "group": {"type": "integer"}}}]},
}


class SchemaBuilder:
    """Collects the component schemas the generated ones refer to."""

    def __init__(self) -> None:
        self.components: dict[str, dict[str, Any]] = {}

    def ref(self, cls: type) -> dict[str, Any]:
        if cls.__name__ not in self.components:
            self.components[cls.__name__] = {}  # placeholder: recursive types terminate
            self.components[cls.__name__] = self.object_schema(cls)
        return {"$ref": f"#/components/schemas/{cls.__name__}"}

    def object_schema(self, cls: type, *, skip: tuple[str, ...] = (),
                      extra: dict[str, Any] | None = None) -> dict[str, Any]:
        hints = typing.get_type_hints(cls)
        properties: dict[str, Any] = {}
        required: list[str] = []
        for f in dataclasses.fields(cls):
            if f.name in skip or not f.init:
                continue
            properties[f.name] = self.of(f.metadata.get("schema", hints[f.name]))
            has_default = f.default is not dataclasses.MISSING \
                or f.default_factory is not dataclasses.MISSING
            if not has_default or f.metadata.get("required"):
                required.append(f.name)
        properties.update(extra or {})
        # A class with OPEN_SCHEMA (the OpenAI bodies) accepts fields it does not list.
        schema: dict[str, Any] = {"type": "object", "properties": properties,
                                  "additionalProperties": bool(getattr(cls, "OPEN_SCHEMA",
                                                                       False))}
        if required:
            schema["required"] = required
        doc = inspect.getdoc(cls)
        if doc and not doc.startswith(cls.__name__ + "("):  # not the dataclass's generated one
            schema["description"] = doc
        return schema

    def of(self, tp: Any) -> dict[str, Any]:
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if tp in WIRE_FORMS:
            return WIRE_FORMS[tp]
        if tp is SamplingOverride:  # some fields of SamplingParams (none is required there)
            return self.ref(SamplingParams)
        if tp is Any:
            return {}
        if tp is type(None):
            return {"type": "null"}
        simple = {str: "string", bool: "boolean", int: "integer", float: "number"}
        if tp in simple:
            return {"type": simple[tp]}
        if origin in (typing.Union, types.UnionType):
            return {"anyOf": [self.of(a) for a in args]}
        if origin is typing.Literal:
            return {"enum": list(args)}
        if origin in (tuple, list, collections.abc.Sequence):
            return {"type": "array", "items": self.of(args[0]) if args else {}}
        if origin in (dict, collections.abc.Mapping) or tp in (dict, collections.abc.Mapping):
            return {"type": "object",
                    "additionalProperties": self.of(args[1]) if len(args) == 2 else {}}
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return {"type": "string", "enum": [m.value for m in tp]}
        if dataclasses.is_dataclass(tp):
            return self.ref(tp)  # type: ignore[arg-type]
        raise TypeError(f"no JSON schema for {tp!r}")
