"""Build an engine by kind: the one place that knows every backend.

    simulated  SimulatedEngine, params as in SimulatedEngineConfig.from_mapping
    builtin    the PyTorch engine, parrot.engines.builtin.create_engine(name, params)
               (imported only when asked for: it pulls in torch)
    remote     HttpEngine to an engine process, params {url, secret?, connect_timeout_s?,
               request_timeout_s?, probe_timeout_s?, pool_size?} (see client.HttpEngineSettings)
    openai     OpenAIEngine: any OpenAI-compatible server (vLLM, SGLang, llama.cpp, Parrot)
    vllm       VLLMEngine: vLLM's async engine in this process (needs the vllm package)
"""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping

from parrot.engines.protocol import Engine
from parrot.errors import EngineConfigError
from parrot.types import EngineKind
from parrot.validation import Checks

_REMOTE_KEYS = ("url", "secret", "connect_timeout_s", "request_timeout_s", "probe_timeout_s",
                "pool_size")


def create_engine(kind: EngineKind | str, name: str,
                  params: Mapping[str, Any] | None = None) -> Engine:
    check = Checks(f"engine {name!r}", EngineConfigError)
    kind = check.enum("kind", kind, EngineKind)
    params = check.mapping("params", {} if params is None else params)
    if kind is EngineKind.SIMULATED:
        from parrot.engines.simulated import SimulatedEngine, SimulatedEngineConfig
        return SimulatedEngine(name, SimulatedEngineConfig.from_mapping(params))
    if kind is EngineKind.BUILTIN:
        try:
            from parrot.engines.builtin import create_engine as create_builtin
        except ImportError as exc:
            check.fail("kind", f"the builtin engine is unavailable ({exc})",
                       "install parrot-serve[engine]")
        return create_builtin(name, params)
    if kind is EngineKind.REMOTE:
        return _remote(name, params)
    if kind is EngineKind.OPENAI:
        from parrot.engines.openai_engine import create_openai_engine
        return create_openai_engine(name, params)
    from parrot.engines.vllm_engine import create_vllm_engine
    return create_vllm_engine(name, params)


def _remote(name: str, params: Mapping[str, Any]) -> Engine:
    from parrot.engines.client import HttpEngine, HttpEngineSettings
    check = Checks(f"remote engine {name!r}", EngineConfigError)
    check.keys(params, _REMOTE_KEYS, required=("url",))
    secret = params.get("secret")
    check.text("secret", secret, optional=True)
    settings = HttpEngineSettings(**{k: params[k] for k in _REMOTE_KEYS[2:] if k in params})
    return HttpEngine(str(params["url"]), name=name, secret=secret, settings=settings)
