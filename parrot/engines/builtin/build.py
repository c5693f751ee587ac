"""Assemble a BuiltinEngine from its config: load -> model -> KV cache -> scheduler -> engine."""

from __future__ import annotations

import logging

import torch

from parrot.engines.builtin.attention import load_kernels, make_decode_fn
from parrot.engines.builtin.block_manager import BlockManager
from parrot.engines.builtin.config import BuiltinConfigError, BuiltinEngineConfig
from parrot.engines.builtin.engine import BuiltinEngine
from parrot.engines.builtin.kv_cache import KVCache, num_blocks_for
from parrot.engines.builtin.loader import LoadedModel, load_model, resolve_device, resolve_dtype
from parrot.engines.builtin.model import LlamaModel
from parrot.engines.builtin.runner import ModelRunner
from parrot.engines.builtin.scheduler import Scheduler

log = logging.getLogger(__name__)


def build_engine(name: str, config: BuiltinEngineConfig,
                 loaded: LoadedModel | None = None) -> BuiltinEngine:
    """Blocking (loads weights). `loaded` lets tests and benchmarks share one loaded model;
    its state dict is consumed (the fused weights replace the per-projection ones)."""
    device = resolve_device(config.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise BuiltinConfigError(f"invalid builtin engine device={config.device!r}: "
                                 "CUDA is not available")
    dtype = resolve_dtype(config.dtype, device)
    if config.num_threads is not None:
        torch.set_num_threads(config.num_threads)
    if loaded is None:
        loaded = load_model(config, device, dtype)
    shape = loaded.shape
    kernels = None
    if device.type == "cuda" and config.attention_backend in ("auto", "triton"):
        kernels = load_kernels()
        if kernels is None and config.attention_backend == "triton":
            raise BuiltinConfigError("attention_backend='triton' but parrot_kernels is not "
                                     "importable")
    elif config.attention_backend == "triton":
        raise BuiltinConfigError("attention_backend='triton' needs device cuda")
    num_blocks = num_blocks_for(config, shape, dtype, device)
    capacity = num_blocks * config.block_size
    max_context_len = min(config.max_context_len or shape.max_position_embeddings, capacity)
    if config.max_context_len is not None and config.max_context_len > capacity:
        log.warning("max_context_len %d capped to the KV cache's %d tokens",
                    config.max_context_len, capacity)
    model = LlamaModel(shape, loaded.state_dict, make_decode_fn(kernels),
                       max_positions=max(max_context_len, shape.max_position_embeddings))
    kv_cache = KVCache(shape, num_blocks, config.block_size, dtype, device)
    runner = ModelRunner(model, kv_cache, use_shared_prefix=kernels is not None,
                         shared_prefix_min_tokens=config.shared_prefix_min_tokens,
                         shared_prefix_min_group=config.shared_prefix_min_group)
    scheduler = Scheduler(BlockManager(num_blocks, config.block_size),
                          max_batch_tokens=config.max_batch_tokens,
                          max_num_seqs=config.max_num_seqs, max_context_len=max_context_len,
                          eos_token_ids=loaded.eos_token_ids)
    log.info("builtin engine %r: %s on %s (%s), %d KV blocks of %d, attention %s", name,
             loaded.name, device, dtype, num_blocks, config.block_size,
             "triton" if kernels is not None else "torch")
    return BuiltinEngine(name, loaded.name, runner, scheduler, loaded.tokenizer,
                         shape.vocab_size, config.seed)
