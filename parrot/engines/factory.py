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

from parrot.engines.latency_model import EngineConfigError
from parrot.engines.protocol import Engine

ENGINE_KINDS = ("simulated", "builtin", "remote", "openai", "vllm")
_REMOTE_KEYS = ("url", "secret", "connect_timeout_s", "request_timeout_s", "probe_timeout_s",
                "pool_size")


def create_engine(kind: str, name: str, params: Mapping[str, Any] | None = None) -> Engine:
    params = {} if params is None else params
    if not isinstance(params, Mapping):
        raise EngineConfigError(f"engine {name!r}: params must be a mapping, got {params!r}")
    if kind == "simulated":
        from parrot.engines.simulated import SimulatedEngine, SimulatedEngineConfig
        return SimulatedEngine(name, SimulatedEngineConfig.from_mapping(params))
    if kind == "builtin":
        try:
            from parrot.engines.builtin import create_engine as create_builtin
        except ImportError as exc:
            raise EngineConfigError(f"engine {name!r}: the builtin engine is unavailable "
                                    f"({exc}); install parrot-serve[engine]") from exc
        return create_builtin(name, params)
    if kind == "remote":
        return _remote(name, params)
    if kind == "openai":
        from parrot.engines.openai_engine import create_openai_engine
        return create_openai_engine(name, params)
    if kind == "vllm":
        from parrot.engines.vllm_engine import create_vllm_engine
        return create_vllm_engine(name, params)
    raise EngineConfigError(f"unknown engine kind {kind!r}; known kinds: {list(ENGINE_KINDS)}")


def _remote(name: str, params: Mapping[str, Any]) -> Engine:
    from parrot.engines.client import HttpEngine, HttpEngineSettings
    from parrot.errors import InvalidRequestError

    unknown = sorted(set(params) - set(_REMOTE_KEYS))
    if unknown:
        raise EngineConfigError(
            f"remote engine {name!r}: unknown key(s) {unknown}; allowed: {list(_REMOTE_KEYS)}")
    if "url" not in params:
        raise EngineConfigError(f"remote engine {name!r}: params need 'url'")
    secret = params.get("secret")
    if secret is not None and (not isinstance(secret, str) or not secret):
        raise EngineConfigError(f"remote engine {name!r}: secret must be a non-empty string")
    knobs = {k: params[k] for k in _REMOTE_KEYS[2:] if k in params}
    try:
        settings = HttpEngineSettings(**knobs)
    except InvalidRequestError as exc:
        raise EngineConfigError(f"remote engine {name!r}: {exc}") from None
    return HttpEngine(str(params["url"]), name=name, secret=secret, settings=settings)
