"""Fast decoders: one function generated per wire message class, which `WireMessage.from_wire`
(codec.py) tries first; this module installs them there when imported (`use_fast_decoders`;
`parrot.wire_types` imports it).

Most messages are well formed, so `from_wire` first runs a function compiled once per class:
it merges the JSON object into a template of the fields (each field's default where the fast
code keeps it as it is, else a MISSING marker), takes the values that need no conversion
after an exact type check (`type(v) is str`), calls codec.py's decoders for the rest with no
path (building "submit.placeholders[0].name" for every field is most of a generic decoder's
cost), and makes that dict the object's fields (then its `__post_init__` rules run as always).
Anything it does not take raises, and `from_wire` decodes the message again with paths: a
rejected message gets exactly the path-tracking decoder's error, and an odd-but-valid one (a
Mapping that is no dict, an ignored unknown field) its result.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import threading
import types
import typing
from typing import Any

from parrot.sampling import SamplingParams
from parrot.types import Criterion
from parrot.wire_types.codec import (FOREIGN, Decoder, FastDecoder, WireMessage, decoder_for,
                                     field_layout, unchanged_types, use_fast_decoders)

class _NotAsIs(Exception):
    """A message the fast decoder does not take: the path-tracking decoder decides."""


_FAST: dict[type, FastDecoder] = {}
_MISSING = object()   # in a template: the message must give the field (or its default is set)
_NO_PATH = ""         # the path a fast decoder passes on: its errors are never shown


def for_class(cls: type[WireMessage]) -> FastDecoder:
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
        for f, (name, decoder, _, as_is) in zip(fields, field_layout(cls).decoded):
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
            source, target, other, decoder_for(other), unchanged_types(other))]
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
    return lines + [f"{target} = tuple([{source.name(decoder_for(item))}(x, NO_PATH, strict) "
                    "for x in v])"]


def _message_call(source: _Source, tp: type[WireMessage]) -> str:
    """The name of a `(data, strict)` function decoding a nested message: its fast decoder,
    or its own `from_wire` where it has one (which reads its JSON form its own way)."""
    if tp.from_wire.__func__ is not WireMessage.from_wire.__func__:  # type: ignore[attr-defined]
        return source.name(lambda data, strict: tp.from_wire(data, _NO_PATH, strict=strict))
    if tp in _COMPILING:  # a message nesting its own type (none does yet): found when called
        return source.name(lambda data, strict: for_class(tp)(data, strict))
    return source.name(for_class(tp))


use_fast_decoders(for_class)
