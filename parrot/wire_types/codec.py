"""JSON <-> typed wire messages: one codec driven by the dataclasses' type hints.

A `WireMessage` is a frozen dataclass of the wire API (`parrot.wire_types`). Its JSON form
follows its fields: `to_wire()` writes every field (an optional field left at its default
`None` is left out, as clients always did), `from_wire()` reads one, rejecting unknown fields
and wrong types with an `InvalidRequestError` that names the field by its path
(`submit.placeholders[1].in_out`). Value rules live in each class's `__post_init__`, so a
message built in Python is checked exactly as one parsed from JSON.

The same hints generate the OpenAPI schemas (`parrot/server/schema.py`), so the document, the
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

from parrot.chat import ChatTemplate
from parrot.errors import InvalidRequestError
from parrot.sampling import SamplingParams
from parrot.speed_profile import ProfileError, SpeedProfile
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
    # the engine protocol's EngineInfo (parrot/engines/protocol.py)
    ChatTemplate: (lambda t: t.to_json(), lambda data, path: _chat_template(data, path)),
    SpeedProfile: (lambda p: p.to_latency_profile(),
                   lambda data, path: _speed_profile(data, path)),
}


# `from_wire` tries a message class's generated decoder first (fast_decoder.py, which builds on
# this module's decoders and installs itself here when imported: the package imports it).
FastDecoder = Callable[[object, bool], Any]
FastDecoders = Callable[[type], FastDecoder]
_fast_decoders: FastDecoders | None = None


def use_fast_decoders(decoders: FastDecoders | None) -> FastDecoders | None:
    """Make `decoders` (class -> its fast decoder; None: none) what `from_wire` tries first;
    returns the ones it replaces."""
    global _fast_decoders
    previous, _fast_decoders = _fast_decoders, decoders
    return previous


class WireMessage:
    """Base of the wire API's frozen dataclasses (see the module docstring)."""

    # How errors name a top-level message ("submit", "get", ...); nested ones use their path.
    WIRE_NAME: ClassVar[str] = ""
    # Whether an optional field at its default None is left out of the JSON (the manager's API)
    # or written as null (the engine protocol, whose documented shape has every field).
    OMIT_NULLS: ClassVar[bool] = True

    def to_wire(self) -> JsonObject:
        out: JsonObject = {}
        omit_nulls = type(self).OMIT_NULLS
        for name, omit_none in field_layout(type(self)).encoded:
            value = getattr(self, name)
            if value is None and omit_none and omit_nulls:
                continue
            out[name] = encode(value)
        return out

    @classmethod
    def from_wire(cls: type[M], data: object, path: str = "", *, strict: bool = True) -> M:
        """Parse the JSON form. `strict=False` ignores unknown fields: for the manager's own
        internal dicts (a field added there reaches the API when the type names it)."""
        fast = _fast_decoders
        if fast is not None:
            try:
                return fast(cls)(data, strict)  # type: ignore[no-any-return]
            except Exception:  # noqa: BLE001 - not taken as is: the path decoder says why
                pass
        return _decode_with_paths(cls, data, path, strict)


def _decode_with_paths(cls: type[M], data: object, path: str, strict: bool) -> M:
    """`from_wire` field by field, each error naming its field's path: the reference decoder,
    run for a message the fast decoder does not take (so every error is this one's)."""
    path = path or cls.WIRE_NAME or cls.__name__
    if type(data) is not dict and not isinstance(data, Mapping):
        raise InvalidRequestError(f"{path} must be a JSON object, got {_kind(data)}")
    layout = _LAYOUTS.get(cls) or field_layout(cls)
    if strict and not layout.names.issuperset(data):
        unknown = sorted(str(k) for k in set(data) - layout.names)
        raise InvalidRequestError(f"{path}: unknown field(s) {unknown}; allowed: "
                                  f"{sorted(layout.names)}")
    kwargs: dict[str, Any] = {}
    for name, decoder, required, as_is in layout.decoded:
        if name in data:
            value = data[name]
            # A value its decoder would return unchanged skips it (and its path string).
            kwargs[name] = value if type(value) in as_is else decoder(
                value, f"{path}.{name}", strict)
        elif required:
            raise InvalidRequestError(f"{path}.{name} is required")
    try:
        return cls(**kwargs)
    except InvalidRequestError as exc:  # a value rule of __post_init__: say where
        exc.args = (f"{path}: {exc}",)
        raise


def encode(value: Any) -> Json:
    if type(value) in _PLAIN:  # most values: written as they are
        return value  # type: ignore[no-any-return]
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
    return decoder_for(tp)(data, path, strict)


# --- decoders, built once per type (parsing is on every message's path) ---------------------------

Decoder = Callable[[object, str, bool], Any]


# The JSON scalars' types: a value of exactly one of them is its own wire form, and the
# decoder of a field of that type (or a union of them) returns it unchanged.
_PLAIN = frozenset({str, int, float, bool, type(None)})


@dataclasses.dataclass(frozen=True)
class _Layout:
    names: frozenset[str]                                # the init fields
    # (name, decoder, required, the value types the decoder returns unchanged)
    decoded: tuple[tuple[str, Decoder, bool, frozenset[type]], ...]
    encoded: tuple[tuple[str, bool], ...]                # (name, left out when None)
    literals: tuple[tuple[str, tuple[Any, ...]], ...]    # fields with a fixed value set


_LAYOUTS: dict[type, _Layout] = {}
_DECODERS: dict[Any, Decoder] = {}


def field_layout(cls: type) -> _Layout:
    if cls not in _LAYOUTS:
        hints = typing.get_type_hints(cls)
        fields = [f for f in dataclasses.fields(cls) if f.init]
        _LAYOUTS[cls] = _Layout(
            frozenset(f.name for f in fields),
            tuple((f.name, decoder_for(hints[f.name]),
                   f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
                   unchanged_types(hints[f.name]))
                  for f in fields),
            tuple((f.name, f.default is None) for f in dataclasses.fields(cls)),
            tuple((f.name, typing.get_args(hints[f.name])) for f in fields
                  if typing.get_origin(hints[f.name]) is typing.Literal))
    return _LAYOUTS[cls]


def unchanged_types(tp: Any) -> frozenset[type]:
    """The types of the values the decoder of `tp` returns unchanged: `tp` itself, or the
    members of a union of them, where JSON scalars (an int for a float is converted: not
    listed; a bool is no int: its exact type is what counts)."""
    options = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union,
                                                               types.UnionType) else (tp,)
    return frozenset(o for o in options if o in _PLAIN) if all(
        o in _PLAIN for o in options) else frozenset()


def decoder_for(tp: Any) -> Decoder:
    if tp not in _DECODERS:
        _DECODERS[tp] = _build_decoder(tp)
    return _DECODERS[tp]


def _build_decoder(tp: Any) -> Decoder:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp in FOREIGN:
        parse = FOREIGN[tp][1]
        return lambda data, path, strict: parse(data, path)
    if isinstance(tp, type) and issubclass(tp, WireMessage):
        return lambda data, path, strict: tp.from_wire(data, path, strict=strict)
    if origin in (typing.Union, types.UnionType):
        return _union_decoder(args)
    if origin is typing.Literal:
        def literal(data: object, path: str, strict: bool) -> Any:
            if data not in args or isinstance(data, bool) != isinstance(args[0], bool):
                raise _bad(path, f"one of {list(args)}", data)
            return data
        return literal
    if origin in (tuple, collections.abc.Sequence):
        item = decoder_for(args[0])

        def sequence(data: object, path: str, strict: bool) -> Any:
            if not isinstance(data, list):
                raise _bad(path, "a list", data)
            return tuple(item(x, f"{path}[{i}]", strict) for i, x in enumerate(data))
        return sequence
    if origin in (dict, collections.abc.Mapping):
        value = decoder_for(args[1])

        def mapping(data: object, path: str, strict: bool) -> Any:
            if not isinstance(data, Mapping):
                raise _bad(path, "an object", data)
            return {k: value(v, f"{path}.{k}", strict) for k, v in data.items()}
        return mapping
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        def member(data: object, path: str, strict: bool) -> Any:
            try:
                return tp(data)
            except ValueError:
                raise _bad(path, f"one of {[m.value for m in tp]}", data) from None
        return member
    return _scalar_decoder(tp)


def _scalar_decoder(tp: Any) -> Decoder:
    # bool is an int in Python: `true` must not pass for 1 (nor 1 for a boolean).
    checks: dict[Any, tuple[Callable[[object], bool], str]] = {
        type(None): (lambda d: d is None, "null"),
        bool: (lambda d: isinstance(d, bool), "a boolean"),
        int: (lambda d: isinstance(d, int) and not isinstance(d, bool), "an integer"),
        float: (lambda d: isinstance(d, (int, float)) and not isinstance(d, bool), "a number"),
        str: (lambda d: isinstance(d, str), "a string"),
    }
    if tp not in checks:  # e.g. RejectedCall: parsed by its message's own from_wire
        def unreadable(data: object, path: str, strict: bool) -> Any:
            raise TypeError(f"{path}: no wire form for {tp!r}")
        return unreadable
    ok, expected = checks[tp]

    def scalar(data: object, path: str, strict: bool) -> Any:
        if not ok(data):
            raise _bad(path, expected, data)
        return float(data) if tp is float else data  # type: ignore[arg-type]
    return scalar


def _union_decoder(args: tuple[Any, ...]) -> Decoder:
    nullable = type(None) in args
    options = [a for a in args if a is not type(None)]
    decoders = [decoder_for(a) for a in options]

    def union(data: object, path: str, strict: bool) -> Any:
        if data is None and nullable:
            return None
        if len(decoders) == 1:
            return decoders[0](data, path, strict)
        errors = []
        for option, decoder in zip(options, decoders):  # e.g. SubmitReply | ErrorReply
            if not _may_be(option, data):
                continue
            try:
                return decoder(data, path, strict)
            except InvalidRequestError as exc:
                errors.append(str(exc))
        raise InvalidRequestError(f"{path} matches none of its forms: {'; '.join(errors)}")
    return union


def _may_be(option: Any, data: object) -> bool:
    """Whether `data` can be an `option` of a union by its fixed-value fields (a call node's
    `kind: "call"`): cheaper than a failed parse."""
    if not (isinstance(option, type) and issubclass(option, WireMessage)
            and isinstance(data, Mapping)):
        return True
    return all(data.get(name) in values for name, values in field_layout(option).literals)


def _sampling(data: object, path: str) -> SamplingParams:
    if type(data) is not dict and not isinstance(data, Mapping):  # a dict: no ABC check
        raise _bad(path, "an object", data)
    return SamplingParams.from_json(data)


def _chat_template(data: object, path: str) -> ChatTemplate:
    template = ChatTemplate.from_json(data)
    if template is None:
        raise _bad(path, "an object {source, bos_token?, eos_token?}", data)
    return template


def _speed_profile(data: object, path: str) -> SpeedProfile:
    """An engine's reported profile; one that is not a valid profile names what is wrong (a
    broken engine, not a reason to guess)."""
    if not isinstance(data, Mapping) or "prefill_per_token_ms" not in data \
            or "decode_table" not in data:
        raise _bad(path, "null or a mapping with prefill_per_token_ms and decode_table", data)
    try:
        return SpeedProfile.from_latency_profile(data)
    except (ProfileError, TypeError, ValueError) as exc:
        raise InvalidRequestError(f"{path}: {exc}") from None


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


_VALUE_TOO_LONG = f"'value' must be a string of at most {MAX_VALUE_CHARS} characters"


def check_value(value: str | None) -> None:
    check(value is None or len(value) <= MAX_VALUE_CHARS, _VALUE_TOO_LONG)


def check_session_id(session_id: str) -> None:
    check(bool(session_id), "'session_id' must be a non-empty string")
