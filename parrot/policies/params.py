"""Parse a policy's YAML parameters into its frozen Params dataclass, with errors that name the
bad key or value and what is allowed (a Params' own `__post_init__` checks its ranges with
`parrot.validation.Checks(<policy name>, PolicyConfigError)`)."""

from __future__ import annotations

import dataclasses
import enum
import typing
from typing import Any, TypeVar
from collections.abc import Mapping

from parrot.errors import PolicyConfigError
from parrot.validation import Checks, is_int, is_number

P = TypeVar("P")


def parse_params(cls: type[P], data: Mapping[str, Any]) -> P:
    check = Checks(cls.__qualname__, PolicyConfigError)
    check.mapping("", data)
    known = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(known))
    if unknown:
        check.fail("", f"unknown parameter(s) {unknown}", str(sorted(known)))
    hints = typing.get_type_hints(cls)
    kwargs = {key: _coerce(check, key, hints[key], value) for key, value in data.items()}
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        check.fail("", str(exc))


def _coerce(check: Checks, key: str, hint: Any, value: Any) -> Any:
    """`value` as the field's type: YAML gives ints for floats and strings for enums."""
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        if isinstance(value, hint):
            return value
        try:
            return hint(value)
        except ValueError:
            check.fail(key, f"{value!r} is not one of {[m.value for m in hint]}")
    ok = {bool: isinstance(value, bool), int: is_int(value), str: isinstance(value, str),
          float: is_number(value)}.get(hint, True)
    if not ok:
        check.fail(key, f"{value!r} is not a valid {getattr(hint, '__name__', hint)}")
    return float(value) if hint is float else value
