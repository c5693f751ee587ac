"""Policies by name: built-ins register themselves; `module:Class` loads a user's policy."""

from __future__ import annotations

import importlib
from typing import Any
from collections.abc import Mapping

from parrot.errors import PolicyConfigError
from parrot.policies.base import Policy
from parrot.validation import Checks

_CHECK = Checks("policy", PolicyConfigError)


class PolicyRegistry:
    def __init__(self) -> None:
        self._by_name: dict[str, type[Policy]] = {}

    def register(self, cls: type[Policy]) -> type[Policy]:
        name = getattr(cls, "name", None)
        if not isinstance(name, str) or not name:
            _CHECK.fail("name", f"{name!r} is not valid",
                        f"a non-empty string set by {cls.__qualname__}")
        if name in self._by_name and self._by_name[name] is not cls:
            _CHECK.fail("name", f"{name!r} is already registered by "
                                f"{self._by_name[name].__qualname__}", "a name of its own")
        self._by_name[name] = cls
        return cls

    @property
    def names(self) -> list[str]:
        return sorted(self._by_name)

    def resolve(self, name: str) -> type[Policy]:
        """A registered name, or `package.module:ClassName` of a Policy subclass."""
        allowed = f"one of {self.names} or 'module:Class'"
        _CHECK.require(isinstance(name, str) and bool(name), "name", name, allowed)
        if name in self._by_name:
            return self._by_name[name]
        if ":" not in name:
            _CHECK.fail("name", f"unknown policy {name!r}", allowed)
        module_name, _, attr = name.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            _CHECK.fail("name", f"cannot import policy module {module_name!r} ({exc})", allowed)
        cls = getattr(module, attr, None)
        if not (isinstance(cls, type) and issubclass(cls, Policy)):
            _CHECK.fail("name", f"{name!r} is not a parrot.policies.Policy subclass", allowed)
        return cls

    def create(self, name: str, params: Mapping[str, Any] | None = None) -> Policy:
        cls = self.resolve(name)
        return cls(cls.Params.from_mapping(params))


def default_registry() -> PolicyRegistry:
    """A registry holding every built-in policy."""
    from parrot.policies import builtin_policies

    registry = PolicyRegistry()
    for cls in builtin_policies():
        registry.register(cls)
    return registry
