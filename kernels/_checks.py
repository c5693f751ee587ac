"""Argument checks shared by the attention wrappers (decode and prefill)."""
from __future__ import annotations

import torch


def check_heads(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                rows: str) -> None:
    """q [rows, Hq, D] against caches [blocks, block_size, Hkv, D]: the ranks, the head dim
    (a power of two >= 16, equal on both) and Hq a multiple of Hkv."""
    if q.dim() != 3 or k_cache.dim() != 4 or k_cache.shape != v_cache.shape:
        raise ValueError(f"want q [{rows}, Hq, D], caches [blocks, block_size, Hkv, D]; got q "
                         f"{tuple(q.shape)}, k {tuple(k_cache.shape)}, v {tuple(v_cache.shape)}")
    d, kvh = q.shape[2], k_cache.shape[2]
    if k_cache.shape[3] != d or q.shape[1] % kvh or d < 16 or d & (d - 1):
        raise ValueError(f"head_dim {d} (cache {k_cache.shape[3]}) must match and be a power of "
                         f"two >= 16; Hq={q.shape[1]} must be a multiple of Hkv={kvh}")
