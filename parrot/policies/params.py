"""Parse a policy's YAML parameters into its frozen Params dataclass, with errors that name the
bad key or value and what is allowed."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Mapping, TypeVar

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
    return value
