"""The policy registry: built-in names, duplicates, unknown names, `module:Class` paths."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from parrot.policies import Policy, PolicyConfigError, PolicyRegistry, default_registry
from parrot.policies.app_centric import AppCentricPolicy
from policy_factories import by_call, make_call, make_engine

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_builtin_policies_are_registered():
    assert default_registry().names == ["app_centric", "latency_centric", "least_queue",
                                        "throughput_centric"]


def test_unknown_name_lists_known_ones():
    with pytest.raises(PolicyConfigError) as info:
        default_registry().resolve("fastest")
    assert str(info.value) == ("policy.name: unknown policy 'fastest'; allowed: one of "
                               "['app_centric', 'latency_centric', 'least_queue', "
                               "'throughput_centric'] or 'module:Class'")
    assert info.value.key == "policy.name"


def test_duplicate_name_is_rejected_but_same_class_is_idempotent():
    class Impostor(Policy):
        name = "app_centric"

        def schedule(self, *, calls, engines):
            return []

    registry = default_registry()
    registry.register(AppCentricPolicy)
    with pytest.raises(PolicyConfigError, match="'app_centric' is already registered by "
                                                "AppCentricPolicy"):
        registry.register(Impostor)
    assert registry.resolve("app_centric") is AppCentricPolicy


def test_unknown_param_lists_allowed_ones():
    with pytest.raises(PolicyConfigError, match=r"unknown parameter\(s\) \['speed'\]; "
                                                r"allowed: \['token_capacity'\]"):
        default_registry().create("latency_centric", {"speed": 2})


def test_custom_policy_loaded_by_path(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO_ROOT))
    registry = default_registry()
    cls = registry.resolve("examples.custom_policy:RoundRobinPolicy")
    assert cls.name == "round_robin"
    policy = registry.create("examples.custom_policy:RoundRobinPolicy", {"skip_unhealthy": True})
    engines = [make_engine("e0"), make_engine("e1", healthy=False), make_engine("e2")]
    first = by_call(policy.schedule(calls=[make_call("a"), make_call("b"), make_call("c")],
                                    engines=engines))
    assert first == {"a": "e0", "b": "e2", "c": "e0"}
    # The rotation carries over to the next round.
    assert by_call(policy.schedule(calls=[make_call("d")], engines=engines)) == {"d": "e2"}
    with pytest.raises(PolicyConfigError, match="skip_unhealthy: 'no' is not a valid bool"):
        registry.create("examples.custom_policy:RoundRobinPolicy", {"skip_unhealthy": "no"})


def test_custom_policy_can_also_be_registered_by_name(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO_ROOT))
    registry = default_registry()
    registry.register(registry.resolve("examples.custom_policy:RoundRobinPolicy"))
    assert "round_robin" in registry.names


@pytest.mark.parametrize("path, message", [
    ("no_such_module_xyz:Policy", "cannot import policy module 'no_such_module_xyz'"),
    ("parrot.types:Criterion", "'parrot.types:Criterion' is not a parrot.policies.Policy"),
    ("parrot.policies.app_centric:Missing", "is not a parrot.policies.Policy subclass"),
    ("", "policy.name: '' is not valid; allowed: one of [] or 'module:Class'"),
])
def test_bad_paths_are_rejected(path, message):
    with pytest.raises(PolicyConfigError, match=re.escape(message)):
        PolicyRegistry().resolve(path)
