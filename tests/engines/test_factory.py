from __future__ import annotations

import subprocess
import sys

import pytest

from parrot.engines.client import HttpEngine
from parrot.engines.factory import ENGINE_KINDS, create_engine
from parrot.engines.latency_model import EngineConfigError
from parrot.engines.simulated import SimulatedEngine


def test_simulated_kind_parses_params() -> None:
    engine = create_engine("simulated", "s1", {"num_blocks": 12, "zero_latency": True})
    assert isinstance(engine, SimulatedEngine)
    assert engine.name == "s1" and engine.config.num_blocks == 12
    assert engine.config.latency.zero_latency


def test_remote_kind_builds_an_http_client() -> None:
    engine = create_engine("remote", "r1", {"url": "http://127.0.0.1:9/", "request_timeout_s": 3})
    assert isinstance(engine, HttpEngine)
    assert (engine.name, engine.url) == ("r1", "http://127.0.0.1:9")


@pytest.mark.parametrize("kind, params, words", [
    ("gpu", {}, "known kinds"),
    ("remote", {}, "url"),
    ("remote", {"url": "http://x", "port": 1}, "port"),
    ("remote", {"url": "http://x", "connect_timeout_s": -1}, "connect_timeout_s"),
    ("simulated", {"num_blocks": -3}, "num_blocks"),
    ("simulated", [1, 2], "mapping"),
])
def test_bad_kind_or_params_name_the_problem(kind: str, params: object, words: str) -> None:
    with pytest.raises(EngineConfigError, match=words) as info:
        create_engine(kind, "e", params)  # type: ignore[arg-type]
    if kind == "gpu":
        assert all(k in str(info.value) for k in ENGINE_KINDS)


def test_builtin_is_imported_lazily() -> None:
    code = ("import sys, parrot.engines.factory; "
            "assert 'parrot.engines.builtin' not in sys.modules; assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)
