"""BuiltinEngineConfig parsing: errors name the bad key or value and the allowed ones."""

from __future__ import annotations

import pytest

from parrot.engines.builtin import BuiltinConfigError, BuiltinEngineConfig
from parrot.errors import ConfigError, EngineConfigError, InvalidRequestError


def test_defaults_and_alias():
    config = BuiltinEngineConfig.from_mapping({"max_num_batched_tokens": 512})
    assert (config.model, config.block_size, config.max_batch_tokens) == ("smollm2", 16, 512)
    assert BuiltinEngineConfig.from_mapping(None) == BuiltinEngineConfig()


@pytest.mark.parametrize("params, message", [
    ({"modle": "tiny"}, "builtin engine: unknown key(s) ['modle']; allowed: ["),
    ({"dtype": "fp8"}, "builtin engine.dtype: 'fp8' is not valid; allowed: one of ['auto', "),
    ({"device": "tpu"}, "builtin engine.device: 'tpu' is not valid; allowed: 'auto', 'cpu'"),
    ({"block_size": 0}, "builtin engine.block_size: 0 is out of range; allowed: integer >= 1 "
                        "and <= 1024"),
    ({"num_blocks": 8, "kv_cache_tokens": 1024}, "allowed: at most one of num_blocks, "
                                                 "kv_cache_tokens"),
    ({"kv_cache_fraction": 1.5}, "builtin engine.kv_cache_fraction: 1.5 is out of range; "
                                 "allowed: number > 0.0 and <= 0.95"),
    ({"max_batch_tokens": True}, "builtin engine.max_batch_tokens: True is not valid"),
    ({"attention_backend": "cuda"}, "allowed: one of ['auto', 'torch', 'triton']"),
    ({"shared_prefix_min_group": 1}, "shared_prefix_min_group: 1 is out of range; "
                                     "allowed: integer >= 2"),
])
def test_bad_values_are_named(params, message):
    with pytest.raises(BuiltinConfigError) as info:
        BuiltinEngineConfig.from_mapping(params)
    assert message in str(info.value)
    assert isinstance(info.value, EngineConfigError) and isinstance(info.value, ConfigError)
    assert isinstance(info.value, InvalidRequestError)


def test_import_is_cheap():
    import subprocess
    import sys

    code = ("import sys, parrot.engines.builtin; "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
