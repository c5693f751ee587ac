"""Small-batch linear layer: ``small_batch_linear(x, w)`` = ``F.linear(x, w)`` for x [T, K]
with T <= ``MAX_GEMV_ROWS`` (decode at batch 1-4), W [N, K] row-major.

At these batch sizes a decode step is a weight read: the floor is bytes(W) / memory
bandwidth. ``GemvTuning`` picks the tile; ``scripts/bench_gemv.py`` measures the kernel
against cuBLAS (``F.linear``) on the model's shapes and reports which reads the weights
faster. On CPU tensors without ``TRITON_INTERPRET=1`` it is ``F.linear``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .decode import _use_triton

MAX_GEMV_ROWS = 4


@dataclass(frozen=True)
class GemvTuning:
    block_n: int = 16
    block_k: int = 512
    num_warps: int = 4
    num_stages: int = 1


# Best tiles at one row on an H200 (bf16), from `scripts/bench_gemv.py`
# (docs/results/gemv_h200.md): (N, K) -> tile. At one row each beats cuBLAS by 5-17%; at two
# or more rows cuBLAS wins on all shapes but one, so the engine uses this kernel at T = 1 only.
# Shapes not listed take the default tile (the best single tile over the five shapes).
MEASURED_TILES = {
    (12288, 4096): GemvTuning(32, 256, 8, 1),     # LLaMA-7B fused QKV
    (4096, 4096): GemvTuning(16, 1024, 8, 3),     # o_proj
    (22016, 4096): GemvTuning(8, 512, 4, 1),      # fused gate/up
    (4096, 11008): GemvTuning(16, 1024, 8, 3),    # down
    (32000, 4096): GemvTuning(16, 512, 4, 1),     # LM head
}


def tuning_for(n: int, k: int) -> GemvTuning:
    return MEASURED_TILES.get((n, k), GemvTuning())


def small_batch_linear(x: torch.Tensor, w: torch.Tensor, *, out: torch.Tensor | None = None,
                       tuning: GemvTuning | None = None) -> torch.Tensor:
    """x [T, K] (T <= MAX_GEMV_ROWS, contiguous rows), w [N, K] -> x @ w.T [T, N]."""
    if x.dim() != 2 or w.dim() != 2 or x.shape[1] != w.shape[1]:
        raise ValueError(f"small_batch_linear: x {tuple(x.shape)} and w {tuple(w.shape)} "
                         "must be [T, K] and [N, K]")
    if x.shape[0] > MAX_GEMV_ROWS:
        raise ValueError(f"small_batch_linear: {x.shape[0]} rows, at most {MAX_GEMV_ROWS}")
    if x.stride(1) != 1 or w.stride(1) != 1:
        raise ValueError("small_batch_linear: the last dims of x and w must be contiguous")
    if not _use_triton(x):
        result = F.linear(x, w)
        return result if out is None else out.copy_(result)
    from . import _jit_gemv as jit

    t, k = x.shape
    n = w.shape[0]
    y = out if out is not None else torch.empty((t, n), dtype=x.dtype, device=x.device)
    if t == 0:
        return y
    tuning = tuning or tuning_for(n, k)
    jit._gemv_kernel[(-(-n // tuning.block_n),)](
        x, w, y, n, k, x.stride(0), w.stride(0), y.stride(0), ROWS=t,
        BLOCK_N=tuning.block_n, BLOCK_K=tuning.block_k, EVEN_K=k % tuning.block_k == 0,
        num_warps=tuning.num_warps, num_stages=tuning.num_stages)
    return y
