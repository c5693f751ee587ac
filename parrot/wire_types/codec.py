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
import threading
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
        for name, omit_none in _layout(type(self)).encoded:
            value = getattr(self, name)
            if value is None and omit_none and omit_nulls:
                continue
            out[name] = encode(value)
        return out

    @classmethod
    def from_wire(cls: type[M], data: object, path: str = "", *, strict: bool = True) -> M:
        """Parse the JSON form. `strict=False` ignores unknown fields: for the manager's own
        internal dicts (a field added there reaches the API when the type names it)."""
        try:
            return fast_decoder(cls)(data, strict)  # type: ignore[no-any-return]
        except Exception:  # not taken as is: the path-tracking decoder says why (or not)
            return _decode_with_paths(cls, data, path, strict)


def _decode_with_paths(cls: type[M], data: object, path: str, strict: bool) -> M:
    """`from_wire` field by field, each error naming its field's path: the reference decoder,
    run for a message the fast decoder does not take (so every error is this one's)."""
    path = path or cls.WIRE_NAME or cls.__name__
    if type(data) is not dict and not isinstance(data, Mapping):
        raise InvalidRequestError(f"{path} must be a JSON object, got {_kind(data)}")
    layout = _LAYOUTS.get(cls) or _layout(cls)
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
    return _decoder(tp)(data, path, strict)


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


def _layout(cls: type) -> _Layout:
    if cls not in _LAYOUTS:
        hints = typing.get_type_hints(cls)
        fields = [f for f in dataclasses.fields(cls) if f.init]
        _LAYOUTS[cls] = _Layout(
            frozenset(f.name for f in fields),
            tuple((f.name, _decoder(hints[f.name]),
                   f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
                   _as_is(hints[f.name]))
                  for f in fields),
            tuple((f.name, f.default is None) for f in dataclasses.fields(cls)),
            tuple((f.name, typing.get_args(hints[f.name])) for f in fields
                  if typing.get_origin(hints[f.name]) is typing.Literal))
    return _LAYOUTS[cls]


def _as_is(tp: Any) -> frozenset[type]:
    """The types of the values the decoder of `tp` returns unchanged: `tp` itself, or the
    members of a union of them, where JSON scalars (an int for a float is converted: not
    listed; a bool is no int: its exact type is what counts)."""
    options = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union,
                                                               types.UnionType) else (tp,)
    return frozenset(o for o in options if o in _PLAIN) if all(
        o in _PLAIN for o in options) else frozenset()


def _decoder(tp: Any) -> Decoder:
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
        item = _decoder(args[0])

        def sequence(data: object, path: str, strict: bool) -> Any:
            if not isinstance(data, list):
                raise _bad(path, "a list", data)
            return tuple(item(x, f"{path}[{i}]", strict) for i, x in enumerate(data))
        return sequence
    if origin in (dict, collections.abc.Mapping):
        value = _decoder(args[1])

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
    decoders = [_decoder(a) for a in options]

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
    return all(data.get(name) in values for name, values in _layout(option).literals)


# --- fast decoders: one generated function per message class ---------------------------------
#
# Most messages are well formed, so `from_wire` first runs a function compiled once per class:
# it merges the JSON object into a template of the fields (each field's default where the fast
# code keeps it as it is, else a MISSING marker), takes the values that need no conversion
# after an exact type check (`type(v) is str`), calls the same decoders as above for the rest
# with no path (building "submit.placeholders[0].name" for every field is most of a generic
# decoder's cost), and makes that dict the object's fields (then its `__post_init__` rules run
# as always). Anything it does not take raises, and `from_wire` decodes the message again
# with paths: a rejected message gets exactly the path-tracking decoder's error, and an
# odd-but-valid one (a Mapping that is no dict, an ignored unknown field) its result.

FastDecoder = Callable[[object, bool], Any]


class _NotAsIs(Exception):
    """A message the fast decoder does not take: the path-tracking decoder decides."""


_FAST: dict[type, FastDecoder] = {}
_MISSING = object()   # in a template: the message must give the field (or its default is set)
_NO_PATH = ""         # the path a fast decoder passes on: its errors are never shown


def fast_decoder(cls: type[WireMessage]) -> FastDecoder:
    """`cls`'s generated decoder: `(data, strict) -> message`, raising (anything) for a
    message it does not take as is; `from_wire` then decodes it with paths."""
    fast = _FAST.get(cls)
    if fast is None:
        # Once per class, by the first thread that needs it (a big batch parses off the loop).
        with _COMPILING_LOCK:
            fast = _FAST.get(cls) or _compile_fast(cls)
            _FAST[cls] = fast
    return fast


_COMPILING_LOCK = threading.RLock()   # re-entered: a class compiles the classes it nests
_COMPILING: set[type] = set()         # the classes being compiled, under the lock


def _compile_fast(cls: type) -> FastDecoder:
    _COMPILING.add(cls)
    try:
        hints = typing.get_type_hints(cls)
        source = _Source(cls)
        fields = [f for f in dataclasses.fields(cls) if f.init]
        for f, (name, decoder, _, as_is) in zip(fields, _layout(cls).decoded):
            target = f"message[{name!r}]"
            source.field(f, _kept(f.default, hints[name], as_is),
                         _value_lines(source, target, hints[name], decoder, as_is))
        return source.compile()
    finally:
        _COMPILING.discard(cls)


def _kept(default: Any, tp: Any, as_is: frozenset[type]) -> bool:
    """Whether the fast lines of a field of type `tp` leave `default` as it is, so the
    template can hold it: a JSON scalar of the field's own types, or an optional's None."""
    return default is not dataclasses.MISSING and (
        type(default) in as_is or default is None and _optional(tp) is not None)


def _optional(tp: Any) -> Any:
    """The other type of `X | None`, else None."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if len(args) == 2 and type(None) in args:
            return next(a for a in args if a is not type(None))
    return None


class _Source:
    """The text of one class's fast decoder and the values it names, added field by field."""

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.template: dict[str, Any] = {}
        self.env: dict[str, Any] = {"cls": cls, "template": self.template,
                                    "NotAsIs": _NotAsIs, "MISSING": _MISSING,
                                    "NO_PATH": _NO_PATH}
        self.lines = ["def fast(data, strict):",
                      "    if type(data) is not dict:",
                      "        raise NotAsIs",
                      "    message = {**template, **data}"]

    def name(self, value: Any) -> str:
        """A name in the generated code for `value` (a decoder, a default, a type)."""
        key = f"k{len(self.env)}"
        self.env[key] = value
        return key

    def field(self, f: dataclasses.Field[Any], kept: bool, convert: list[str]) -> None:
        """Field `f`: its template value, and the lines reading it from the message into
        `v` and converting it (`convert`); an absent field takes its default, as `__init__`
        gives it, or (a required one) is not taken."""
        self.lines.append(f"    v = message[{f.name!r}]")
        if kept:
            self.template[f.name] = f.default
            self.lines += ["    " + line for line in convert]
            return
        self.template[f.name] = _MISSING
        if f.default is not dataclasses.MISSING:
            absent = f"message[{f.name!r}] = {self.name(f.default)}"
        elif f.default_factory is not dataclasses.MISSING:
            absent = f"message[{f.name!r}] = {self.name(f.default_factory)}()"
        else:
            absent = "raise NotAsIs"
        self.lines += ["    if v is MISSING:", f"        {absent}"]
        if convert:
            self.lines += ["    else:"] + ["        " + line for line in convert]

    def compile(self) -> FastDecoder:
        # A key the class has no field for makes the merged dict longer: an unknown field
        # (an error), or one `strict=False` ignores: either way, the path decoder's call.
        self.lines[4:4] = [f"    if len(message) != {len(self.template)}:",
                           "        raise NotAsIs"]
        self.lines += self._construction()
        exec(compile("\n".join(self.lines), f"<fast decoder of {self.cls.__name__}>", "exec"),
             self.env)
        return self.env["fast"]  # type: ignore[no-any-return]

    def _construction(self) -> list[str]:
        """Lines making the message from the merged dict: as its `__init__` would where that is
        a dataclass's own, without its one frozen `object.__setattr__` per field (the costly
        part of it), the dict becoming the fields at once; then its value rules, as always."""
        if not _init_is_generated(self.cls):
            return ["    return cls(**message)"]
        self.env.update(new=object.__new__, set_attribute=object.__setattr__)
        lines = ["    built = new(cls)", "    set_attribute(built, '__dict__', message)"]
        if hasattr(self.cls, "__post_init__"):
            lines.append("    built.__post_init__()")
        return lines + ["    return built"]


def _init_is_generated(cls: type) -> bool:
    """Whether `cls.__init__` is the one `@dataclass` wrote (compiled from a string): it sets
    each field, in order, and calls `__post_init__`; nothing else (no InitVar or ClassVar
    pseudo-field, no field left out of it, instances with a `__dict__`)."""
    init = getattr(getattr(cls, "__init__", None), "__code__", None)
    fields = dataclasses.fields(cls)
    return (init is not None and init.co_filename == "<string>"
            and len(fields) == len(cls.__dataclass_fields__)  # type: ignore[attr-defined]
            and all(f.init for f in fields)
            and not any("__slots__" in vars(k) for k in cls.__mro__[:-1]))


def _value_lines(source: _Source, target: str, tp: Any, decoder: Decoder,
                 as_is: frozenset[type]) -> list[str]:
    """Lines turning `v` (a field's JSON value) into the field's value at `target` (left
    alone when unchanged): the common shapes written out, the others by the field's own
    decoder (without a path)."""
    if as_is:  # JSON scalars (a union of them): kept as they are, converted otherwise
        test = (f"type(v) is not {source.name(next(iter(as_is)))}" if len(as_is) == 1
                else f"type(v) not in {source.name(as_is)}")
        return [f"if {test}:", f"    {target} = {source.name(decoder)}(v, NO_PATH, strict)"]
    other = _optional(tp)
    if other is not None:  # null, or the other type
        return ["if v is not None:"] + ["    " + line for line in _value_lines(
            source, target, other, _decoder(other), _as_is(other))]
    return _shape_lines(source, target, tp, decoder)


def _shape_lines(source: _Source, target: str, tp: Any, decoder: Decoder) -> list[str]:
    """Lines for a value that is not a JSON scalar: a message, a foreign type, a tuple."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp in FOREIGN:
        return _foreign_lines(source, target, tp)
    if isinstance(tp, type) and issubclass(tp, WireMessage):
        return [f"{target} = {_message_call(source, tp)}(v, strict)"]
    if origin is typing.Literal and all(type(a) is str for a in args):
        return [f"if type(v) is not str or v not in {source.name(frozenset(args))}:",
                "    raise NotAsIs"]
    if origin in (tuple, collections.abc.Sequence):  # read as the path decoder reads them
        return _tuple_lines(source, target, args[0])
    return [f"{target} = {source.name(decoder)}(v, NO_PATH, strict)"]


def _foreign_lines(source: _Source, target: str, tp: type) -> list[str]:
    """A foreign type by its decoder; the two every call has (its sampling, an output's
    criteria) by the function behind it, called from the generated code directly."""
    if tp is SamplingParams:  # as `_sampling` reads a dict
        return ["if type(v) is not dict:", "    raise NotAsIs",
                f"{target} = {source.name(SamplingParams.from_json)}(v)"]
    if tp is Criterion:
        return [f"{target} = {source.name(Criterion.parse)}(v)"]
    return [f"{target} = {source.name(FOREIGN[tp][1])}(v, NO_PATH)"]


def _tuple_lines(source: _Source, target: str, item: Any) -> list[str]:
    """A list of JSON scalars of one type checked item by item, of messages decoded each."""
    lines = ["if type(v) is not list:", "    raise NotAsIs"]
    if item in (str, int, bool):  # exactly that type (a bool is no int) or not taken
        return lines + ["for x in v:", f"    if type(x) is not {source.name(item)}:",
                        "        raise NotAsIs", f"{target} = tuple(v)"]
    if isinstance(item, type) and issubclass(item, WireMessage):
        return lines + [f"{target} = tuple([{_message_call(source, item)}(x, strict) "
                        "for x in v])"]
    return lines + [f"{target} = tuple([{source.name(_decoder(item))}(x, NO_PATH, strict) "
                    "for x in v])"]


def _message_call(source: _Source, tp: type[WireMessage]) -> str:
    """The name of a `(data, strict)` function decoding a nested message: its fast decoder,
    or its own `from_wire` where it has one (which reads its JSON form its own way)."""
    if tp.from_wire.__func__ is not WireMessage.from_wire.__func__:  # type: ignore[attr-defined]
        return source.name(lambda data, strict: tp.from_wire(data, _NO_PATH, strict=strict))
    if tp in _COMPILING:  # a message nesting its own type (none does yet): found when called
        return source.name(lambda data, strict: fast_decoder(tp)(data, strict))
    return source.name(fast_decoder(tp))


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
