"""The builtin engine: a LLaMA-family runner with a paged KV cache, context fork and
continuous batching, implementing `parrot.engines.protocol.Engine` in-process.

Modules, in data-flow order (docs/ENGINE.md has the details):
  config        BuiltinEngineConfig, parsed from the engine's YAML mapping
  loader        model spec -> shape, weights, tokenizer (prepare: build the SmolLM2 cache)
  engine        the async Engine: admission, the batching loop, streaming
  scheduler     continuous batching: decode steps + prefill chunks under budgets, eviction
  block_manager reference-counted KV blocks, fork / release
  context       contexts and work items;  outputs / detokenizer / sampler: tokens -> chunks
  runner        batch -> tensors -> forward -> sampled tokens
  model, rope, attention, cascade, kv_cache   the forward pass over the paged KV cache

Importing this package is cheap: torch and transformers load in `create_engine`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from collections.abc import Mapping

from parrot.engines.builtin.config import BuiltinConfigError, BuiltinEngineConfig

if TYPE_CHECKING:
    from parrot.engines.protocol import Engine

__all__ = ["BuiltinConfigError", "BuiltinEngineConfig", "create_engine"]


def create_engine(name: str, params: Mapping[str, Any] | None) -> Engine:
    """Build a builtin engine from its YAML mapping (blocking: loads the model).

    Bad keys or values raise BuiltinConfigError (an InvalidRequestError) naming them."""
    config = BuiltinEngineConfig.from_mapping(params)
    # before the imports below (torch, Triton: seconds on a fresh machine), so the kernels'
    # precompile workers import alongside them (cuda/early_precompile.py)
    from parrot.engines.builtin.cuda.early_precompile import launch_early_precompile

    early = launch_early_precompile(config)
    try:
        from parrot.engines.builtin.build import build_engine
    except ImportError as exc:
        if early is not None:
            early.stop()
        from parrot.extras import missing_extra
        raise missing_extra("engine", "the builtin engine", exc) from None

    return build_engine(name, config, early_precompile=early)
