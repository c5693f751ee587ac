"""The one set of checks behind every configuration dataclass (serve config, engine params, policy
params, simulated clusters and workloads).

A `Checks` is bound to a key prefix and a `ConfigError` subclass, so a `__post_init__` reads as
a list of rules and every failure has the same form, naming the full key path:

    check = Checks("manager")
    check.number("port", self.port, minimum=0, maximum=65535, integer=True)
    # -> ConfigError: manager.port: 70000 is out of range; allowed: integer >= 0 and <= 65535

A value of the wrong type "is not valid", one of the right type outside its bounds "is out of
range"; `allowed` always says what would be accepted. Booleans are never numbers, and numbers
must be finite (a config spells "unbounded" as null, never as inf or NaN).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn, TypeVar

from parrot.errors import ConfigError

E = TypeVar("E", bound=enum.Enum)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """An int or a finite float, not a bool."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


class Checks:
    """Checks of the keys under `where` ("" for top-level keys), raising `error`."""

    def __init__(self, where: str = "", error: type[ConfigError] = ConfigError) -> None:
        self.where, self.error = where, error

    def key(self, name: str) -> str:
        """The full key path of `name` ("" names the prefix itself)."""
        if not name:
            return self.where or "<root>"
        return f"{self.where}.{name}" if self.where else name

    def fail(self, name: str, problem: str, allowed: str | None = None) -> NoReturn:
        raise self.error(self.key(name), problem, allowed)

    def require(self, ok: bool, name: str, value: Any, allowed: str) -> None:
        """The general rule: `ok` or `value` is not valid (pass "<hidden>" for secrets)."""
        if not ok:
            self.fail(name, f"{value!r} is not valid", allowed)

    def number(self, name: str, value: Any, *, minimum: float | None = None,
               maximum: float | None = None, exclusive_minimum: bool = False,
               integer: bool = False, optional: bool = False) -> None:
        """A finite number (an int with `integer`) within the bounds; None too if `optional`."""
        if optional and value is None:
            return
        bounds = []
        if minimum is not None:
            bounds.append(f"> {minimum}" if exclusive_minimum else f">= {minimum}")
        if maximum is not None:
            bounds.append(f"<= {maximum}")
        allowed = " ".join(["integer" if integer else "number", " and ".join(bounds)]).strip()
        if optional:
            allowed += " or null"
        if not (is_int(value) if integer else is_number(value)):
            self.fail(name, f"{value!r} is not valid", allowed)
        too_low = minimum is not None and (value <= minimum if exclusive_minimum
                                           else value < minimum)
        if too_low or (maximum is not None and value > maximum):
            self.fail(name, f"{value!r} is out of range", allowed)

    def positive_int(self, name: str, value: Any, *, optional: bool = False) -> None:
        self.number(name, value, minimum=1, integer=True, optional=optional)

    def positive(self, name: str, value: Any, *, optional: bool = False) -> None:
        """A number > 0 (seconds, rates, speeds)."""
        self.number(name, value, minimum=0, exclusive_minimum=True, optional=optional)

    def fraction(self, name: str, value: Any, *, maximum: float = 1.0) -> None:
        """A number in (0, maximum]."""
        self.number(name, value, minimum=0.0, maximum=maximum, exclusive_minimum=True)

    def boolean(self, name: str, value: Any) -> None:
        self.require(isinstance(value, bool), name, value, "true or false")

    def text(self, name: str, value: Any, *, optional: bool = False) -> None:
        """A non-empty string (a name, a path, a URL)."""
        self.require((optional and value is None) or (isinstance(value, str) and bool(value)),
                     name, value, "a non-empty string" + (" or null" if optional else ""))

    def one_of(self, name: str, value: Any, choices: Iterable[Any]) -> None:
        choices = list(choices)
        self.require(value in choices, name, value, f"one of {choices}")

    def enum(self, name: str, value: Any, enum_cls: type[E]) -> E:
        """`value` (a member or a member's value) as the member of `enum_cls`."""
        try:
            return enum_cls(value)
        except (ValueError, TypeError):
            self.fail(name, f"{value!r} is not valid",
                      f"one of {[member.value for member in enum_cls]}")

    def mapping(self, name: str, value: Any) -> Mapping[str, Any]:
        self.require(isinstance(value, Mapping), name, value, "a mapping")
        return value

    def keys(self, data: Mapping[str, Any], allowed: Iterable[str], *,
             required: Iterable[str] = (), name: str = "") -> None:
        """No key of `data` outside `allowed`, and every `required` one present."""
        allowed = sorted(allowed)
        unknown = sorted(set(data) - set(allowed))
        if unknown:
            self.fail(name, f"unknown key(s) {unknown}", str(allowed))
        missing = [key for key in required if key not in data]
        if missing:
            self.fail(name, f"required key {missing[0]!r} is missing")


def key_value(item: str) -> tuple[str, Any] | None:
    """A command line's `KEY=VALUE` as (KEY, VALUE read as a YAML scalar: `false`, `4096`,
    `paged`); None when it has no `=` or no KEY (the caller says what it expected)."""
    import yaml  # only the command-line tools need it

    key, sep, value = item.partition("=")
    key = key.strip()
    return (key, yaml.safe_load(value)) if sep and key else None
