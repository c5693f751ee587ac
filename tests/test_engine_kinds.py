"""One EngineKind enum (parrot/types.py) for the serve config (core) and the engine factory and
the engine CLI (engines), which must never import core."""

from __future__ import annotations

import subprocess
import sys

import pytest

from parrot.cli.engine import SERVED_KINDS, build_parser
from parrot.serve_config import ConfigError, EngineSpec, ServeConfig
from parrot.engines.factory import create_engine
from parrot.engines.launcher import EngineProcess, LaunchSpec
from parrot.errors import EngineConfigError
from parrot.types import EngineKind

KINDS = ["simulated", "builtin", "remote", "openai", "vllm"]


def test_the_kinds_and_their_spelling():
    assert [k.value for k in EngineKind] == KINDS
    assert str(EngineKind.BUILTIN) == "builtin" and f"{EngineKind.VLLM}" == "vllm"
    assert EngineKind("remote") is EngineKind.REMOTE and EngineKind.REMOTE == "remote"


def test_core_config_parses_kinds_into_the_enum():
    config = ServeConfig.from_mapping({"engines": [
        {"name": "a", "kind": "builtin"}, {"name": "b", "kind": "remote", "url": "http://h:1"}]})
    assert [e.kind for e in config.engines] == [EngineKind.BUILTIN, EngineKind.REMOTE]
    assert all(type(e.kind) is EngineKind for e in config.engines)
    assert EngineSpec(name="c").kind is EngineKind.SIMULATED
    with pytest.raises(ConfigError) as info:
        EngineSpec(name="d", kind="gpu")
    assert str(info.value) == f"engines['d'].kind: 'gpu' is not valid; allowed: one of {KINDS}"


def test_the_engine_layer_accepts_the_same_kinds():
    with pytest.raises(EngineConfigError) as info:
        create_engine("gpu", "e")
    assert str(info.value) == f"engine 'e'.kind: 'gpu' is not valid; allowed: one of {KINDS}"
    assert create_engine(EngineKind.SIMULATED, "s").name == "s"
    # parrot-engine serves every kind but remote (a remote engine is already a server).
    assert list(SERVED_KINDS) == [k for k in KINDS if k != "remote"]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--kind", "remote", "--name", "x"])
    command = EngineProcess(LaunchSpec("e", EngineKind.SIMULATED)).command()
    assert command[command.index("--kind") + 1] == "simulated"


def test_engines_do_not_import_the_manager_server_or_policies():
    code = ("import sys, parrot.engines.factory, parrot.engines.launcher, parrot.cli.engine; "
            "bad = sorted(m for m in sys.modules if m.startswith(("
            "'parrot.manager', 'parrot.server', "
            "'parrot.policies'))); assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
