from pathlib import Path

import pytest

from parrot.core.config import ConfigError, ServeConfig
from parrot.policies.registry import default_registry

ROOT = Path(__file__).resolve().parents[2]


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
    ({"engines": [{"name": "a b"}]}, "name"),
])
def test_invalid_configs_name_the_problem(data, message):
    with pytest.raises(ConfigError, match=message):
        ServeConfig.from_mapping(data)
