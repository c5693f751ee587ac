"""Parse a policy's YAML parameters into its frozen Params dataclass, with errors that name the
bad key or value and what is allowed."""

from __future__ import annotations

import dataclasses
import enum
import typing
from typing import Any, TypeVar
from collections.abc import Mapping

from parrot.errors import InvalidRequestError

P = TypeVar("P")


class PolicyConfigError(InvalidRequestError):
    """A policy name or parameter in the configuration is invalid."""


def parse_params(cls: type[P], data: Mapping[str, Any]) -> P:
    if not isinstance(data, Mapping):
        raise PolicyConfigError(f"{cls.__qualname__}: params must be a mapping, got {data!r}")
    known = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise PolicyConfigError(
            f"{cls.__qualname__}: unknown parameter(s) {unknown}; allowed: {sorted(known)}")
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for key, value in data.items():
        kwargs[key] = _coerce(cls.__qualname__, key, hints[key], value)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise PolicyConfigError(f"{cls.__qualname__}: {exc}") from None


def _coerce(owner: str, key: str, hint: Any, value: Any) -> Any:
    bad = PolicyConfigError(f"{owner}.{key}: {value!r} is not a valid {getattr(hint, '__name__', hint)}")
    if hint is bool:
        if not isinstance(value, bool):
            raise bad
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise bad
        return value
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        if isinstance(value, hint):
            return value
        try:
            return hint(value)
        except ValueError:
            raise PolicyConfigError(f"{owner}.{key}: {value!r} is not one of "
                                    f"{[m.value for m in hint]}") from None
    return value


def check_number(owner: str, key: str, value: Any, *, minimum: float,
                 maximum: float | None = None, integer: bool = False,
                 exclusive_minimum: bool = False) -> None:
    """Raise PolicyConfigError naming `value` and the allowed range unless it is in range.

    For a Params dataclass's __post_init__, so direct construction is validated too.
    """
    kind = "integer" if integer else "number"
    low = f"> {minimum}" if exclusive_minimum else f">= {minimum}"
    allowed = f"{kind} {low}" + (f" and <= {maximum}" if maximum is not None else "")
    ok_type = (isinstance(value, int) if integer else isinstance(value, (int, float)))
    if isinstance(value, bool) or not ok_type:
        raise PolicyConfigError(f"{owner}.{key}: {value!r} is not valid; allowed: {allowed}")
    too_low = value <= minimum if exclusive_minimum else value < minimum
    if too_low or (maximum is not None and value > maximum) or value != value:
        raise PolicyConfigError(f"{owner}.{key}: {value!r} is out of range; allowed: {allowed}")
