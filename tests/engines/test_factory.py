from __future__ import annotations

import re
import subprocess
import sys

import pytest

from parrot.engines.client import HttpEngine
from parrot.engines.factory import create_engine
from parrot.engines.simulated import SimulatedEngine
from parrot.errors import EngineConfigError
from parrot.types import EngineKind


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
    ("gpu", {}, "engine 'e'.kind: 'gpu' is not valid; allowed: one of ['simulated', "),
    ("remote", {}, "remote engine 'e': required key 'url' is missing"),
    ("remote", {"url": "http://x", "port": 1}, "port"),
    ("remote", {"url": "http://x", "connect_timeout_s": -1}, "connect_timeout_s"),
    ("simulated", {"num_blocks": -3}, "num_blocks"),
    ("simulated", [1, 2], "mapping"),
])
def test_bad_kind_or_params_name_the_problem(kind: str, params: object, words: str) -> None:
    with pytest.raises(EngineConfigError, match=re.escape(words)) as info:
        create_engine(kind, "e", params)  # type: ignore[arg-type]
    if kind == "gpu":
        assert all(k.value in str(info.value) for k in EngineKind)


def test_builtin_is_imported_lazily() -> None:
    code = ("import sys, parrot.engines.factory; "
            "assert 'parrot.engines.builtin' not in sys.modules; assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)


def test_every_engine_kind_is_built_by_the_factory() -> None:
    # Each kind reaches its own builder: a params error names that kind's config, never an
    # "unknown kind" (builtin needs torch, so only its lazy import is asserted above).
    owners = {EngineKind.SIMULATED: "simulated engine", EngineKind.REMOTE: "remote engine",
              EngineKind.OPENAI: "openai engine", EngineKind.VLLM: "vllm engine"}
    for kind, owner in owners.items():
        with pytest.raises(EngineConfigError) as info:
            create_engine(kind, "e", {"no_such_key": 1})
        assert info.value.key.startswith(owner) and "unknown key(s) ['no_such_key']" in str(
            info.value)
    assert create_engine("simulated", "s", {}).name == "s"  # the plain value works as well
