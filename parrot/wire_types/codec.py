"""JSON <-> typed wire messages: one codec driven by the dataclasses' type hints.

A `WireMessage` is a frozen dataclass of the wire API (`parrot.wire_types`). Its JSON form
follows its fields: `to_wire()` writes every field (an optional field left at its default
`None` is left out, as clients always did), `from_wire()` reads one, rejecting unknown fields
and wrong types with an `InvalidRequestError` that names the field by its path
(`submit.placeholders[1].in_out`). Value rules live in each class's `__post_init__`, so a
message built in Python is checked exactly as one parsed from JSON.

The same hints generate the OpenAPI schemas (`parrot/core/schema.py`), so the document, the
client and the server cannot disagree on a field. Types whose JSON form is not their fields
(`SamplingParams`, `Transform`, `Criterion`) name it in `FOREIGN`.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeAlias, TypeVar

from parrot.errors import InvalidRequestError
from parrot.sampling import SamplingParams
from parrot.transforms import Transform, parse_transforms
from parrot.types import Criterion

Json: TypeAlias = "None | bool | int | float | str | list[Json] | dict[str, Json]"
JsonObject: TypeAlias = "dict[str, Json]"

M = TypeVar("M", bound="WireMessage")

# (encode, decode) of types that are not wire messages but travel in them.
FOREIGN: dict[type, tuple[Callable[[Any], Json], Callable[[object, str], Any]]] = {
    SamplingParams: (lambda p: p.to_json(), lambda data, path: _sampling(data, path)),
    Transform: (lambda t: t.to_json(), lambda data, path: parse_transforms([data], path)[0]),
    Criterion: (lambda c: c.value, lambda data, path: Criterion.parse(data)),
}


class WireMessage:
    """Base of the wire API's frozen dataclasses (see the module docstring)."""

    # How errors name a top-level message ("submit", "get", ...); nested ones use their path.
    WIRE_NAME: ClassVar[str] = ""

    def to_wire(self) -> JsonObject:
        out: JsonObject = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value is None and f.default is None:
                continue
            out[f.name] = encode(value)
        return out

    @classmethod
    def from_wire(cls: type[M], data: object, path: str = "", *, strict: bool = True) -> M:
        """Parse the JSON form. `strict=False` ignores unknown fields: for the manager's own
        internal dicts (a field added there reaches the API when the type names it)."""
        path = path or cls.WIRE_NAME or cls.__name__
        if not isinstance(data, Mapping):
            raise InvalidRequestError(f"{path} must be a JSON object, got {_kind(data)}")
        fields = {f.name: f for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
        unknown = sorted(str(k) for k in set(data) - set(fields))
        if unknown and strict:
            raise InvalidRequestError(f"{path}: unknown field(s) {unknown}; allowed: "
                                      f"{sorted(fields)}")
        hints = _hints(cls)
        kwargs: dict[str, Any] = {}
        for name, f in fields.items():
            if name in data:
                kwargs[name] = decode(hints[name], data[name], f"{path}.{name}", strict)
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise InvalidRequestError(f"{path}.{name} is required")
        try:
            return cls(**kwargs)
        except InvalidRequestError as exc:  # a value rule of __post_init__: say where
            exc.args = (f"{path}: {exc}",)
            raise


def encode(value: Any) -> Json:
    if isinstance(value, WireMessage):
        return value.to_wire()
    if type(value) in FOREIGN:
        return FOREIGN[type(value)][0](value)
    if isinstance(value, enum.Enum):
        return encode(value.value)
    if isinstance(value, (tuple, list)):
        return [encode(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): encode(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"{type(value).__name__} has no wire form")


def decode(tp: Any, data: object, path: str, strict: bool = True) -> Any:
    """`data` (parsed JSON) as type `tp`, or InvalidRequestError naming `path`."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp in FOREIGN:
        return FOREIGN[tp][1](data, path)
    if isinstance(tp, type) and issubclass(tp, WireMessage):
        return tp.from_wire(data, path, strict=strict)
    if origin in (typing.Union, types.UnionType):
        return _decode_union(args, data, path, strict)
    if origin is typing.Literal:
        if data not in args or isinstance(data, bool) != isinstance(args[0], bool):
            raise _bad(path, f"one of {list(args)}", data)
        return data
    if origin in (tuple, collections.abc.Sequence):
        if not isinstance(data, list):
            raise _bad(path, "a list", data)
        return tuple(decode(args[0], item, f"{path}[{i}]", strict) for i, item in enumerate(data))
    if origin in (dict, collections.abc.Mapping):
        if not isinstance(data, Mapping):
            raise _bad(path, "an object", data)
        return {key: decode(args[1], value, f"{path}.{key}", strict)
                for key, value in data.items()}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(data)
        except ValueError:
            raise _bad(path, f"one of {[m.value for m in tp]}", data) from None
    return _decode_scalar(tp, data, path)


def _decode_scalar(tp: Any, data: object, path: str) -> Any:
    if tp is type(None):
        if data is not None:
            raise _bad(path, "null", data)
        return None
    if tp is bool:
        if not isinstance(data, bool):
            raise _bad(path, "a boolean", data)
        return data
    if tp is int:  # bool is an int in Python: `true` must not pass for 1
        if not isinstance(data, int) or isinstance(data, bool):
            raise _bad(path, "an integer", data)
        return data
    if tp is float:
        if not isinstance(data, (int, float)) or isinstance(data, bool):
            raise _bad(path, "a number", data)
        return float(data)
    if tp is str:
        if not isinstance(data, str):
            raise _bad(path, "a string", data)
        return data
    raise TypeError(f"{path}: no wire form for {tp!r}")


def _decode_union(args: tuple[Any, ...], data: object, path: str, strict: bool) -> Any:
    if data is None and type(None) in args:
        return None
    options = [a for a in args if a is not type(None)]
    if len(options) == 1:
        return decode(options[0], data, path, strict)
    errors = []
    for option in options:  # e.g. SubmitReply | ErrorReply: the first that parses
        try:
            return decode(option, data, path, strict)
        except InvalidRequestError as exc:
            errors.append(str(exc))
    raise InvalidRequestError(f"{path} matches none of its forms: {'; '.join(errors)}")


def _sampling(data: object, path: str) -> SamplingParams:
    if not isinstance(data, Mapping):
        raise _bad(path, "an object", data)
    return SamplingParams.from_json(data)


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """The resolved field types of a class (resolved once: they are read on every parse)."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _kind(data: object) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            type(None): "null"}.get(type(data), type(data).__name__)


def _bad(path: str, expected: str, data: object) -> InvalidRequestError:
    shown = repr(data)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    return InvalidRequestError(f"{path} must be {expected}, got {shown}")


# --- value rules shared by the messages ------------------------------------------------------

MAX_VALUE_CHARS = 4_000_000   # a variable's value


def check(ok: bool, message: str) -> None:
    if not ok:
        raise InvalidRequestError(message)


def check_value(value: str | None) -> None:
    check(value is None or len(value) <= MAX_VALUE_CHARS,
          f"'value' must be a string of at most {MAX_VALUE_CHARS} characters")


def check_session_id(session_id: str) -> None:
    check(bool(session_id), "'session_id' must be a non-empty string")
