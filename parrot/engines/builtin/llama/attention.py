"""Attention over the paged KV cache: the metadata of one step and the two compute paths.

Per layer, K and V caches are [num_blocks, block_size, num_kv_heads, head_dim]. A step's tokens
come as one flat batch: the decode rows first (one token each), then the prefill chunks.
* decode: the Triton kernels of `parrot_kernels` on CUDA when importable (the shared-prefix
  kernel when the step found groups sharing a long prefix), else a batched torch path that
  gathers each row's blocks through its block table.
* prefill: torch SDPA per chunk (a few chunks per step), causal over the chunk's context; or,
  with `prefill_attention: paged`, every chunk in one Triton launch per layer reading its
  context in the paged cache (`parrot_kernels.paged_prefill_attention`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

log = logging.getLogger(__name__)

# The SDPA backends prefill may use on CUDA: all but cuDNN. torch 2.11 sends causal attention
# (is_causal, and the lower-right bias over a fresh chunk) to cuDNN on an H200, which builds an
# execution plan for every new sequence length: 65 ms on a shape's first call against 0.2 ms
# for flash (`bench/bench_prefill_attention.py`, docs/results/prefill_attention_h200.md).
# A serving engine meets a new chunk length on almost every request (64 Fills of 700-1,400
# tokens ran at 40% of the fixed-length prefill rate), a fixed-length benchmark never does.
PREFILL_SDPA_BACKENDS = (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                         SDPBackend.MATH)


def prefill_sdpa_backends(device: torch.device) -> contextlib.AbstractContextManager[object]:
    """The context a step's prefill attention runs in (entered once per forward pass)."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    return sdpa_kernel(list(PREFILL_SDPA_BACKENDS))


@dataclass
class SharedPrefixMeta:
    """Decode rows grouped so each group's shared prefix is read once (see cascade.py)."""

    group_indptr: torch.Tensor          # [G + 1] int32
    prefix_block_tables: torch.Tensor   # [G, max_prefix_blocks] int32
    prefix_lens: torch.Tensor           # [G] int32
    suffix_block_tables: torch.Tensor   # [B, max_suffix_blocks] int32
    suffix_lens: torch.Tensor           # [B] int32


@dataclass
class PrefillChunk:
    """Rows [row_start, row_end) of the flat batch hold positions [pos_start, pos_start + n)."""

    row_start: int
    row_end: int
    pos_start: int
    block_table: torch.Tensor           # the context's blocks, int64 (int32 and padded: a row
                                        # of the paged prefill plan's table)


@dataclass
class AttentionMetadata:
    slot_mapping: torch.Tensor          # [T] int64: block * block_size + offset of each token
    num_decode: int                     # rows [0, num_decode) are decodes
    decode_block_tables: torch.Tensor | None  # [num_decode, max_blocks] int32
    decode_seq_lens: torch.Tensor | None      # [num_decode] int32, the new token included
    shared_prefix: SharedPrefixMeta | None
    prefills: list[PrefillChunk]
    # The step's prefill chunks planned for the paged prefill kernel (parrot_kernels
    # PrefillPlan), when the model runs it; None: SDPA per chunk (prefill_torch).
    prefill_plan: Any = None
    # The step's attention launches recorded at its first layer and the tensors they were
    # recorded with (parrot_kernels.launch.Recording), replayed at every other layer
    attention_replay: Any = None

    @property
    def decode_rows(self) -> int:
        """Rows the decode attention computes: num_decode, or more where the runner padded
        the decode metadata to its graph bucket."""
        lens = (self.shared_prefix.suffix_lens if self.shared_prefix is not None
                else self.decode_seq_lens)
        return self.num_decode if lens is None else int(lens.shape[0])


class DecodeFn(Protocol):
    """q [B, Hq, D] -> [B, Hq, D], written into `out` ([B, Hq, D]) when given."""

    def __call__(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 meta: AttentionMetadata, scale: float, *, out: torch.Tensor | None = None
                 ) -> torch.Tensor: ...


def write_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             slot_mapping: torch.Tensor) -> None:
    """k/v [T, Hkv, D] into the caches at slot_mapping [T]."""
    k_cache.view(-1, *k_cache.shape[2:]).index_copy_(0, slot_mapping, k)
    v_cache.view(-1, *v_cache.shape[2:]).index_copy_(0, slot_mapping, v)


def decode_torch(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 meta: AttentionMetadata, scale: float, *, out: torch.Tensor | None = None
                 ) -> torch.Tensor:
    """q [B, Hq, D] -> [B, Hq, D]; each row attends its own seq_len tokens."""
    assert meta.decode_block_tables is not None and meta.decode_seq_lens is not None
    tables, lens = meta.decode_block_tables.long(), meta.decode_seq_lens
    batch, num_heads, head_dim = q.shape
    num_kv_heads, block_size = k_cache.shape[2], k_cache.shape[1]
    length = tables.shape[1] * block_size
    # index_select, not k_cache[tables]: advanced indexing is much slower on the CPU
    flat = tables.view(-1)
    k = k_cache.index_select(0, flat).view(batch, length, num_kv_heads, head_dim).transpose(1, 2)
    v = v_cache.index_select(0, flat).view(batch, length, num_kv_heads, head_dim).transpose(1, 2)
    valid = torch.arange(length, device=q.device)[None, :] < lens[:, None]   # [B, L]
    group = num_heads // num_kv_heads
    qg = q.view(batch, num_kv_heads, group, head_dim)                        # [B, Hkv, G, D]
    result = F.scaled_dot_product_attention(qg, k, v, attn_mask=valid[:, None, None, :],
                                            scale=scale).reshape(batch, num_heads, head_dim)
    return result if out is None else out.copy_(result)


def prefill_torch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                  v_cache: torch.Tensor, chunk: PrefillChunk, scale: float) -> torch.Tensor:
    """One chunk: q/k/v [n, H, D] are its fresh rows; earlier positions come from the cache."""
    n = chunk.row_end - chunk.row_start
    # GQA only where the model has it: some SDPA backends refuse the flag even for equal head
    # counts, and torch then falls back to a slower one.
    gqa = q.shape[1] != k.shape[1]
    qs = q[chunk.row_start:chunk.row_end].transpose(0, 1)[None]              # [1, Hq, n, D]
    if chunk.pos_start == 0:
        ks = k[chunk.row_start:chunk.row_end].transpose(0, 1)[None]
        vs = v[chunk.row_start:chunk.row_end].transpose(0, 1)[None]
        out = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scale,
                                             enable_gqa=gqa)
    else:
        length = chunk.pos_start + n
        num_blocks = -(-length // k_cache.shape[1])
        table = chunk.block_table[:num_blocks]
        ks = k_cache.index_select(0, table).flatten(0, 1)[:length].transpose(0, 1)[None]
        vs = v_cache.index_select(0, table).flatten(0, 1)[:length].transpose(0, 1)[None]
        if gqa:   # the lower-right causal path below takes equal head counts
            ks = ks.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
            vs = vs.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        out = F.scaled_dot_product_attention(
            qs, ks, vs, attn_mask=lower_right_causal_mask(n, length, q.device), scale=scale)
    return out[0].transpose(0, 1)                                              # [n, Hq, D]


def lower_right_causal_mask(n: int, length: int, device: torch.device) -> Any:
    """Row i of n new rows (position length - n + i) sees keys 0..length - n + i: causal
    aligned to the bottom right.

    On CUDA a causal bias, not a boolean mask: SDPA would send a boolean mask to cuDNN, which
    builds an execution plan for every new (n, length), ~50 ms each on an H200 (every
    continued or forked context's prefill has a new shape: a serving engine would pay it on
    most requests); the bias runs flash attention, no per-shape cost (docs/ENGINE.md). It is
    imported here, not at module load: its module imports torch._dynamo (~1 s), which the
    paged-prefill path (CUDA's default) never needs. On the CPU the boolean mask itself: the
    bias only materialises the same mask there, and its import landed inside the first
    request that continued a context (measured: one 49-token prefill step of 1,574 ms
    against ~125 ms, in the demo's first Parrot run on the 2-core VM)."""
    if device.type == "cpu":
        return cpu_lower_right_causal_mask(n, length)
    from torch.nn.attention.bias import causal_lower_right

    return causal_lower_right(n, length)


@functools.lru_cache(maxsize=4)
def cpu_lower_right_causal_mask(n: int, length: int) -> torch.Tensor:
    """The boolean mask, built once per chunk shape rather than once per layer: every layer of
    a prefill step asks for the same (n, length). SDPA only reads it."""
    return torch.ones(n, length, dtype=torch.bool).tril(length - n)


def load_kernels() -> ModuleType | None:
    """`parrot_kernels` if importable and it has the decode wrapper, else None."""
    try:
        module = importlib.import_module("parrot_kernels")
    except ImportError:
        return None
    except Exception:  # a broken install must not take the engine down: torch path
        log.exception("parrot_kernels failed to import; using the torch decode path")
        return None
    return module if hasattr(module, "paged_decode_attention") else None


class KernelsUnavailableError(RuntimeError):
    """CUDA was asked to run on the Triton kernels (attention_backend auto or triton) but
    parrot_kernels does not import."""


def choose_backend(requested: str, device_type: str, kernels_importable: bool) -> str:
    """"triton" or "torch" for an engine on this device type.

    On CUDA the torch path is ~4x slower per decode step and runs without CUDA graphs, so it
    is never taken silently: "auto" without the kernels raises KernelsUnavailableError
    (install the repo, or ask for attention_backend: torch to accept the slow path). On the
    CPU "auto" is always torch (the kernels' CPU fallbacks are their slow references)."""
    if device_type != "cuda":
        if requested == "triton":
            raise KernelsUnavailableError("attention_backend 'triton' needs a CUDA device")
        return "torch"
    if requested == "torch":
        return "torch"
    if kernels_importable:
        return "triton"
    raise KernelsUnavailableError(
        f"attention_backend {requested!r} on CUDA but parrot_kernels does not import: the "
        "engine would run the torch attention path without CUDA graphs (several times "
        "slower per token). Install the repo (pip install -e '.[engine,kernels]'), or set "
        "attention_backend: torch to run the slow path on purpose.")


def make_decode_fn(kernels: ModuleType | None) -> DecodeFn:
    """The decode path: the Triton kernels when given, else decode_torch."""
    if kernels is None:
        return decode_torch
    return TritonDecode(kernels)


class TritonDecode:
    """Decode attention on the kernels of `parrot_kernels`. Its work is only kernel launches
    made through the kernels' LaunchCache, so a step's calls may be recorded and replayed
    (`replayable`; the model's attention does so over a step's layers)."""

    replayable = True

    def __init__(self, kernels: ModuleType) -> None:
        self.kernels = kernels

    def __call__(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 meta: AttentionMetadata, scale: float, *, out: torch.Tensor | None = None
                 ) -> torch.Tensor:
        # q may be a strided view of the fused projection: the kernels take its strides.
        # The metadata may cover more rows than q (the runner pads an eager step to its
        # graph bucket): zero query rows fill the difference, their outputs are dropped
        # (a caller passing q and `out` of meta.decode_rows rows saves the two copies).
        kernels = self.kernels
        sp = meta.shared_prefix
        rows = q.shape[0]
        lens = sp.suffix_lens if sp is not None else meta.decode_seq_lens
        assert lens is not None, "a decode step without lengths"
        padded = lens.shape[0]
        into = out
        if padded > rows:
            q = torch.cat([q, q.new_zeros(padded - rows, *q.shape[1:])])
            into = None
        if sp is not None and hasattr(kernels, "shared_prefix_decode_attention"):
            result = kernels.shared_prefix_decode_attention(
                q, k_cache, v_cache, sp.group_indptr, sp.prefix_block_tables, sp.prefix_lens,
                sp.suffix_block_tables, sp.suffix_lens, scale, out=into)
        else:
            result = kernels.paged_decode_attention(q, k_cache, v_cache,
                                                    meta.decode_block_tables,
                                                    meta.decode_seq_lens, scale, out=into)
        result = result[0] if isinstance(result, tuple) else result
        if out is not None and into is None:
            return out.copy_(result[:rows])
        return result[:rows]
