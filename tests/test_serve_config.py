from pathlib import Path

import pytest

from parrot.serve_config import ConfigError, ServeConfig
from parrot.policies.registry import default_registry

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("path", ["policies.yaml", "configs/sim.yaml"])
def test_shipped_configs_load_and_name_a_known_policy(path):
    config = ServeConfig.load(ROOT / path)
    default_registry().create(config.policy.name, config.policy.params)
    assert config.engines


@pytest.mark.parametrize("data, message", [
    ({"managr": {}}, "unknown key"),
    ({"manager": {"port": 70000}}, "manager.port"),
    ({"engines": [{"name": "a", "kind": "gpu"}]}, "kind"),
    ({"engines": [{"name": "a", "kind": "remote"}]}, "url"),
    ({"engines": [{"name": "a"}, {"name": "a"}]}, "unique"),
    ({"engines": [{"name": "a", "latency_capacity": 0}]}, "latency_capacity"),
    ({"engines": [{"name": "a", "latency_capacity": "fast"}]}, "latency_capacity"),
    ({"engines": [{"name": "a b"}]}, "name"),
    ({"manager": {"admin_token": "short"}}, "admin_token"),
    ({"manager": {"max_active_calls": 0}}, "max_active_calls"),
    ({"manager": {"max_sessions": True}}, "max_sessions"),
    ({"manager": {"request_header_timeout_s": 0}}, "request_header_timeout_s"),
    ({"manager": {"max_output_tokens": -1}}, "max_output_tokens"),
    ({"manager": {"shutdown_grace_s": -1}}, "shutdown_grace_s"),
    ({"manager": {"engine_restart_max": -1}}, "engine_restart_max"),
    ({"manager": {"engine_restart_max": 1.5}}, "engine_restart_max"),
    ({"manager": {"engine_restart_backoff_s": 0}}, "engine_restart_backoff_s"),
    ({"manager": {"engine_restart_window_s": -5}}, "engine_restart_window_s"),
    ({"tenants": {"a": 1}}, "tenants"),
    ({"tenants": [{"name": "a"}]}, "api_key"),
    ({"tenants": [{"name": "a", "api_key": "too-short"}]}, "api_key"),
    ({"tenants": [{"name": "a", "api_key": "k" * 20, "share": True}]}, "unknown key"),
    ({"tenants": [{"name": "a", "api_key": "k" * 20, "max_active_calls": 0}]},
     "max_active_calls"),
    ({"tenants": [{"name": "a", "api_key": "k" * 20, "max_active_calls": "9"}]},
     "max_active_calls"),
    ({"tenants": [{"name": "a", "api_key": "k" * 20}, {"name": "b", "api_key": "k" * 20}]},
     "unique keys"),
    ({"tenants": [{"name": "a", "api_key": "k" * 20}, {"name": "a", "api_key": "j" * 20}]},
     "unique names"),
])
def test_invalid_configs_name_the_problem(data, message):
    with pytest.raises(ConfigError, match=message):
        ServeConfig.from_mapping(data)


def test_tenants_parse_and_secrets_stay_out_of_errors():
    config = ServeConfig.from_mapping({"tenants": [
        {"name": "a", "api_key": "a" * 20}, {"name": "b", "api_key": "b" * 20,
                                             "share_prefixes": True}]})
    assert [(t.name, t.share_prefixes) for t in config.tenants] == [("a", False), ("b", True)]
    with pytest.raises(ConfigError) as info:
        ServeConfig.from_mapping({"tenants": [{"name": "a", "api_key": "secret key with spaces"}]})
    assert "secret" not in str(info.value)


def test_capacities_may_be_auto():
    config = ServeConfig.from_mapping({"engines": [
        {"name": "a", "latency_capacity": "auto", "throughput_capacity": "auto"},
        {"name": "b"}]})
    auto, default = config.engines
    assert (auto.latency_capacity, auto.throughput_capacity) == (None, None)
    # auto is the default for both: the paper's rule on the engine's own profile
    assert (default.latency_capacity, default.throughput_capacity) == (None, None)
