"""Every configuration error is one `ConfigError` form (`<key>: <problem>; allowed: ...`) whose
key is the full path of the bad value, whichever config it comes from, on both sides of a wire."""

from __future__ import annotations

import pytest

from parrot.serve_config import ConfigError as CoreConfigError
from parrot.serve_config import EngineSpec, ManagerConfig, ServeConfig
from parrot.engines.builtin.config import BuiltinConfigError, BuiltinEngineConfig
from parrot.engines.client import HttpEngineSettings
from parrot.engines.factory import create_engine
from parrot.engines.latency_model import SimulatedEngineConfig
from parrot.engines.openai_engine import OpenAIEngineConfig
from parrot.engines.vllm_engine import VLLMEngineConfig
from parrot.errors import (ConfigError, EngineConfigError, InvalidRequestError, ParrotError,
                           PolicyConfigError, error_from_wire)
from parrot.policies.registry import default_registry
from parrot.sim.cluster import ClusterConfigError, ClusterSpec
from parrot.sim.workloads.spec import WorkloadConfigError, WorkloadSpec


def test_one_base_for_every_config_error():
    assert CoreConfigError is ConfigError
    for cls in (EngineConfigError, BuiltinConfigError, PolicyConfigError, ClusterConfigError,
                WorkloadConfigError):
        assert issubclass(cls, ConfigError) and issubclass(cls, InvalidRequestError)
    assert issubclass(BuiltinConfigError, EngineConfigError)
    assert not issubclass(ClusterConfigError, ValueError)  # no longer a second hierarchy


@pytest.mark.parametrize("make, error, key, problem", [
    (lambda: ServeConfig.from_mapping({"manager": {"port": 70000}}), ConfigError,
     "manager.port", "70000 is out of range; allowed: integer >= 0 and <= 65535"),
    (lambda: ManagerConfig(engine_request_timeout_s=0), ConfigError,
     "manager.engine_request_timeout_s", "0 is out of range; allowed: number > 0 or null"),
    (lambda: ServeConfig.from_mapping({"managr": {}}), ConfigError,
     "<root>", "unknown key(s) ['managr']; allowed: ['engines', 'manager', 'policy', 'tenants']"),
    (lambda: ServeConfig.from_mapping({"engines": [{"name": "a", "kind": "gpu"}]}), ConfigError,
     "engines['a'].kind", "'gpu' is not valid; allowed: one of ['simulated', 'builtin', "
                          "'remote', 'openai', 'vllm']"),
    (lambda: EngineSpec(name="a", speed=-1), ConfigError,
     "engines['a'].speed", "-1 is out of range; allowed: number > 0"),
    (lambda: ServeConfig.from_mapping({"tenants": [{"name": "t"}]}), ConfigError,
     "tenants[0]", "required key 'api_key' is missing"),
    (lambda: SimulatedEngineConfig.from_mapping({"max_num_seqs": 0}), EngineConfigError,
     "simulated engine.max_num_seqs", "0 is out of range; allowed: integer >= 1"),
    (lambda: SimulatedEngineConfig.from_mapping({"decode_table": [[0, 1.0], [5, -2.0]]}),
     EngineConfigError, "simulated engine.decode_table[1][1]",
     "-2.0 is out of range; allowed: number >= 0"),
    (lambda: BuiltinEngineConfig(dtype="fp8"), BuiltinConfigError,
     "builtin engine.dtype", "'fp8' is not valid; allowed: one of ['auto', 'float32', "
                             "'bfloat16', 'float16', 'float64']"),
    (lambda: HttpEngineSettings(pool_size=0), EngineConfigError,
     "remote engine.pool_size", "0 is out of range; allowed: integer >= 1"),
    (lambda: create_engine("remote", "r", {"url": "http://x", "secret": ""}), EngineConfigError,
     "remote engine 'r'.secret", "'' is not valid; allowed: a non-empty string or null"),
    (lambda: OpenAIEngineConfig.from_mapping({"url": "ftp://x"}), EngineConfigError,
     "openai engine.url", "'ftp://x' is not valid; allowed: a URL starting with http:// or "
                          "https://"),
    (lambda: VLLMEngineConfig.from_mapping({"model": "m", "max_model_len": 0}),
     EngineConfigError, "vllm engine.max_model_len", "0 is out of range"),
    (lambda: default_registry().create("latency_centric", {"token_capacity": 0}),
     PolicyConfigError, "latency_centric.token_capacity", "0 is out of range; allowed: "
                                                          "integer >= 1"),
    (lambda: default_registry().create("throughput_centric", {"x": 1}), PolicyConfigError,
     "ThroughputCentricParams", "unknown parameter(s) ['x']; allowed: ['token_capacity']"),
    (lambda: default_registry().create("app_centric", {"colocation_slack": 11}),
     PolicyConfigError, "app_centric.colocation_slack", "11.0 is out of range; allowed: "
                                                        "number >= 0.0 and <= 10.0"),
    (lambda: ClusterSpec(num_engines=0), ClusterConfigError,
     "num_engines", "0 is out of range; allowed: integer >= 1 and <= 1024"),
    (lambda: ClusterSpec(network_delay_s=(0.3, 0.2)), ClusterConfigError,
     "network_delay_s", "(0.3, 0.2) is not valid; allowed: (low, high) seconds with "
                        "0 <= low <= high"),
    (lambda: WorkloadSpec(chat_rate=-1.0), WorkloadConfigError,
     "chat_rate", "-1.0 is out of range; allowed: number >= 0"),
    (lambda: WorkloadSpec(chat_output_tokens=(5, 2)), WorkloadConfigError,
     "chat_output_tokens", "(5, 2) is not valid; allowed: two integers 1 <= low <= high"),
])
def test_each_config_names_the_key_path(make, error, key, problem):
    with pytest.raises(error) as info:
        make()
    assert type(info.value) is error
    assert info.value.key == key
    assert str(info.value).startswith(f"{key}: {problem}")


def test_the_key_survives_the_wire():
    exc = EngineConfigError("engines['a'].params.num_blocks", "0 is out of range",
                            "integer >= 1")
    wire = exc.to_wire()
    assert wire == {"error": {"type": "EngineConfigError",
                              "message": "engines['a'].params.num_blocks: 0 is out of range; "
                                         "allowed: integer >= 1",
                              "key": "engines['a'].params.num_blocks"}}
    back = error_from_wire(wire, 400)
    assert type(back) is EngineConfigError and back.status == 400
    assert (back.key, str(back)) == (exc.key, str(exc))
    # A reply without the key (another server) still gives the class and the whole message.
    bare = error_from_wire({"error": {"type": "PolicyConfigError", "message": "bad"}}, 400)
    assert type(bare) is PolicyConfigError and str(bare) == "<config>: bad"
    assert type(error_from_wire({"error": "x"}, 400)) is ParrotError


def test_a_single_preformatted_message_keeps_the_form():
    # User policies written before the split raise PolicyConfigError(message).
    exc = PolicyConfigError("round_robin.skip_unhealthy: 'no' is not valid; allowed: true, false")
    assert exc.key == "round_robin.skip_unhealthy"
    assert str(exc) == "round_robin.skip_unhealthy: 'no' is not valid; allowed: true, false"
    assert str(PolicyConfigError("no key here")) == "<config>: no key here"
