"""Serving defaults sized from the device: the KV cache, max_num_seqs and the graph buckets.

`size_serving` is a pure function of the memory left after the weights, the model's shape and
the config, so the rules are tested without a GPU:

* KV cache: `num_blocks` or `kv_cache_tokens` when given; else `kv_cache_fraction` of the free
  memory (CUDA's default 0.8: measured to leave the graphs, the allocator and the activations
  room on an H200 with LLaMA-7B), but never more than what leaves `activation_reserve_bytes`
  free, which matters on small GPUs only (on an H200 the reserve is ~1% of what the fraction
  leaves). The CPU's default is a fixed 16,384 tokens (a CPU engine is for tests and demos).
* max_num_seqs `auto`: as many sequences as the cache holds at SEQ_CONTEXT_TOKENS each,
  rounded down to a power of two (a graph bucket: no step of max_num_seqs rows pads), from
  MIN_AUTO_SEQS to MAX_AUTO_SEQS. A LLaMA-7B engine on an H200 (~190k tokens of KV) gets 256;
  the CPU default (16,384 tokens) keeps the old 64.
* cuda_graph_max_batch `auto`: max_num_seqs, so every decode-only step replays a graph;
  a number is capped by max_num_seqs.
"""

from __future__ import annotations

from dataclasses import dataclass

from parrot.engines.builtin.config import BuiltinEngineConfig
from parrot.engines.builtin.llama.shapes import ModelShape

DEFAULT_CPU_KV_TOKENS = 16384
DEFAULT_CUDA_KV_FRACTION = 0.8

# The context a sequence is sized for: what a serving mix of prompts and outputs averages
# (the load: 100-800-word prompts, 64-384 new tokens). A batch of longer contexts still
# runs; the scheduler preempts when the cache fills.
SEQ_CONTEXT_TOKENS = 512
# Never fewer seats than the old fixed default: a sequence holds only the blocks it uses.
MIN_AUTO_SEQS = 64
# Past ~180 rows an H200's bf16 GEMMs are compute-bound (~180 FLOP per weight byte) and at 256
# rows the step reads ~100 GB of KV: more rows lengthen every step about linearly, so they add
# latency, not throughput.
MAX_AUTO_SEQS = 256


def pow2_floor(n: int) -> int:
    """The largest power of two <= n (n >= 1)."""
    return 1 << (n.bit_length() - 1)


def pow2_buckets(largest: int) -> list[int]:
    """Powers of two below `largest`, then `largest`: the buckets a size is padded up to."""
    buckets, b = [], 1
    while b < largest:
        buckets.append(b)
        b *= 2
    return buckets + [largest]


def batch_buckets(max_batch: int) -> list[int]:
    """The decode graphs' batch buckets."""
    return pow2_buckets(max_batch)


def activation_reserve_bytes(shape: ModelShape, dtype_bytes: int, max_batch_tokens: int,
                             max_rows: int) -> int:
    """A bound on what a step's activations and the graphs' pools take beside the KV cache:
    per token of the largest step, the residual, the normed input, q/k/v, the attention output
    and the MLP's gate/up and product (4H + 2 KV heads + 3I elements); float32 logits of the
    sampled rows (and a copy); twice over, for an eager step beside the graphs' pool."""
    per_token = (4 * shape.hidden_size + 2 * shape.num_kv_heads * shape.head_dim
                 + 3 * shape.intermediate_size) * dtype_bytes
    logits = 2 * max_rows * shape.vocab_size * 4
    return 2 * (max_batch_tokens * per_token + logits)


@dataclass(frozen=True)
class ServingSize:
    """What an engine serves with, and how each number was chosen."""

    num_blocks: int
    block_size: int
    max_num_seqs: int
    graph_max_batch: int          # largest decode-graph batch bucket (when graphs are on)
    kv_source: str                # "num_blocks", "kv_cache_tokens" or "<f> of N GiB free"
    seqs_source: str              # "config" or "auto"

    @property
    def kv_tokens(self) -> int:
        return self.num_blocks * self.block_size

    @property
    def graph_batch_buckets(self) -> tuple[int, ...]:
        return tuple(batch_buckets(self.graph_max_batch))

    def describe(self) -> str:
        return (f"{self.num_blocks} KV blocks of {self.block_size} ({self.kv_tokens} tokens, "
                f"{self.kv_source}), max_num_seqs {self.max_num_seqs} ({self.seqs_source})")


def size_serving(config: BuiltinEngineConfig, shape: ModelShape, *, dtype_bytes: int,
                 on_cuda: bool, free_bytes: int | None) -> ServingSize:
    """The engine's KV cache, max_num_seqs and graph batch limit. `free_bytes`: memory left
    after the weights (free GPU memory, or MemAvailable); needed only when the cache is sized
    by a fraction (by default on CUDA)."""
    bs = config.block_size
    per_token = shape.kv_bytes_per_token(dtype_bytes)
    if config.num_blocks is not None:
        blocks, kv_source = config.num_blocks, "num_blocks"
    else:
        tokens, fraction = config.kv_cache_tokens, config.kv_cache_fraction
        if tokens is None and fraction is None:
            if on_cuda:
                fraction = DEFAULT_CUDA_KV_FRACTION
            else:
                tokens = DEFAULT_CPU_KV_TOKENS
        if tokens is not None:
            kv_source = "kv_cache_tokens" if config.kv_cache_tokens else "the CPU default"
        else:
            assert fraction is not None
            if free_bytes is None:
                raise ValueError("sizing the KV cache by a fraction needs the free memory")
            seqs_bound = (config.max_num_seqs if isinstance(config.max_num_seqs, int)
                          else MAX_AUTO_SEQS)
            reserve = activation_reserve_bytes(shape, dtype_bytes, config.max_batch_tokens,
                                               seqs_bound)
            kv_bytes = min(int(free_bytes * fraction), free_bytes - reserve)
            tokens = max(0, kv_bytes) // per_token
            kv_source = f"{fraction:g} of {free_bytes / 2**30:.1f} GiB free"
        blocks = tokens // bs
        if blocks < 1:
            raise ValueError(f"the KV cache gets {tokens} tokens, less than one block of {bs}; "
                             "raise kv_cache_fraction or set num_blocks")
    if isinstance(config.max_num_seqs, int):
        seqs, seqs_source = config.max_num_seqs, "config"
    else:
        by_kv = pow2_floor(max(1, blocks * bs // SEQ_CONTEXT_TOKENS))
        seqs = min(MAX_AUTO_SEQS, max(MIN_AUTO_SEQS, by_kv))
        seqs_source = f"auto: {blocks * bs} KV tokens / {SEQ_CONTEXT_TOKENS} per sequence"
    graph_max = config.cuda_graph_max_batch
    graph_max = seqs if not isinstance(graph_max, int) else min(graph_max, seqs)
    return ServingSize(blocks, bs, seqs, graph_max, kv_source, seqs_source)


def context_limit(config: BuiltinEngineConfig, shape: ModelShape) -> int:
    """The longest context the config and the model's positions allow (the KV cache's size
    may cap it further)."""
    return min(config.max_context_len or shape.max_position_embeddings,
               shape.max_position_embeddings)
