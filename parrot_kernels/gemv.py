"""Small-batch linear layer: ``small_batch_linear(x, w)`` = ``F.linear(x, w)`` for x [T, K]
with T <= ``MAX_GEMV_ROWS`` (decode at batch 1-64), W [N, K] row-major.

At these batch sizes a decode step is a weight read: the floor is bytes(W) / memory
bandwidth. Two kernels: ``GemvTuning`` tiles the elementwise one (1-4 rows, the engine runs it
at one row), ``DotTuning`` the tensor-core one (2-64 rows); the tuning given picks the kernel,
and without one T = 1 takes the elementwise kernel, more rows the tensor-core one.
``bench/bench_gemv.py`` measures both against cuBLAS (``F.linear``) on the model's shapes
and reports which reads the weights faster. On CPU tensors without ``TRITON_INTERPRET=1`` it
is ``F.linear``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .launch import launcher
from .decode import _use_triton

MAX_GEMV_ROWS = 64
MAX_ELEMENTWISE_ROWS = 4   # the elementwise kernel keeps one accumulator tile per row


def dot_rows(t: int) -> int:
    """The rows the tensor-core kernel pads x to: a power of two, at least 16 (the MMA's
    minimum), so one compiled kernel serves every row count up to it."""
    return max(16, 1 << (t - 1).bit_length())


@dataclass(frozen=True)
class GemvTuning:
    block_n: int = 16
    block_k: int = 512
    num_warps: int = 4
    num_stages: int = 1


# Best tiles at one row on an H200 (bf16), from `bench/bench_gemv.py`
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


@dataclass(frozen=True)
class DotTuning:
    """A tile of the tensor-core kernel (``_skinny_dot_kernel``); block_n, block_k >= 16.
    The default fits the shared memory at every padding (x's tile grows with the rows: a
    32 x 256 tile in 4 stages does not fit at 64 rows on an H200)."""
    block_n: int = 64
    block_k: int = 64
    num_warps: int = 4
    num_stages: int = 4


# The tensor-core kernel's best tiles on an H200 (bf16), from `bench/bench_gemv.py --kernel
# dot` (docs/results/gemv_dot_h200.md): (N, K, padded rows) -> tile. At 2-16 rows it beats
# cuBLAS on every LLaMA-7B shape (0.89-0.95x the time); at 17-64 rows only on the shapes listed
# (o_proj and down at 64 rows, down at 32, are cuBLAS's: `kernel_wins`).
MEASURED_DOT_TILES = {
    (12288, 4096, 16): DotTuning(64, 128, 4, 4),      # fused QKV
    (4096, 4096, 16): DotTuning(64, 256, 4, 5),       # o_proj
    (22016, 4096, 16): DotTuning(64, 128, 4, 3),      # fused gate/up
    (4096, 11008, 16): DotTuning(64, 256, 4, 5),      # down
    (32000, 4096, 16): DotTuning(128, 128, 4, 3),     # LM head
    (12288, 4096, 32): DotTuning(128, 128, 8, 4),
    (4096, 4096, 32): DotTuning(64, 128, 4, 6),
    (22016, 4096, 32): DotTuning(64, 64, 4, 4),
    (32000, 4096, 32): DotTuning(64, 64, 4, 3),
    (12288, 4096, 64): DotTuning(128, 128, 8, 4),
    (22016, 4096, 64): DotTuning(64, 64, 4, 4),
    (32000, 4096, 64): DotTuning(64, 64, 4, 3),
}
# Shapes not listed: at 16 rows the tile that won most shapes above, at 32-64 the default.
DEFAULT_DOT_TILE = {16: DotTuning(64, 128, 4, 4), 32: DotTuning(), 64: DotTuning()}


def tuning_for(n: int, k: int, rows: int = 1) -> GemvTuning | DotTuning:
    """The measured tile of the kernel that runs `rows` rows of an [n, k] weight."""
    if rows == 1:
        return MEASURED_TILES.get((n, k), GemvTuning())
    pad = dot_rows(rows)
    return MEASURED_DOT_TILES.get((n, k, pad), DEFAULT_DOT_TILE[pad])


def kernel_wins(n: int, k: int, rows: int) -> bool:
    """Whether these kernels read an [n, k] weight faster than cuBLAS at `rows` rows, as
    measured on an H200: at 1-16 rows on every shape measured (so on any shape), at 17-64
    rows only where a tile of ``MEASURED_DOT_TILES`` won."""
    if not 1 <= rows <= MAX_GEMV_ROWS:
        return False
    return rows <= 16 or (n, k, dot_rows(rows)) in MEASURED_DOT_TILES


def small_batch_linear(x: torch.Tensor, w: torch.Tensor, *, out: torch.Tensor | None = None,
                       tuning: GemvTuning | DotTuning | None = None) -> torch.Tensor:
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
    tuning = tuning or tuning_for(n, k, t)
    grid = (-(-n // tuning.block_n),)
    if isinstance(tuning, DotTuning):
        if tuning.block_n < 16 or tuning.block_k < 16:
            raise ValueError(f"small_batch_linear: {tuning} needs block_n, block_k >= 16")
        launcher(jit._skinny_dot_kernel)(grid,
            x, w, y, t, n, k, x.stride(0), w.stride(0), y.stride(0), ROWS_PAD=dot_rows(t),
            BLOCK_N=tuning.block_n, BLOCK_K=tuning.block_k, EVEN_N=n % tuning.block_n == 0,
            EVEN_K=k % tuning.block_k == 0, IEEE=x.dtype == torch.float32,
            num_warps=tuning.num_warps, num_stages=tuning.num_stages)
        return y
    if t > MAX_ELEMENTWISE_ROWS:
        raise ValueError(f"small_batch_linear: {t} rows, at most {MAX_ELEMENTWISE_ROWS} with "
                         f"{type(tuning).__name__} (DotTuning runs up to {MAX_GEMV_ROWS})")
    launcher(jit._gemv_kernel)(grid,
        x, w, y, n, k, x.stride(0), w.stride(0), y.stride(0), ROWS=t,
        BLOCK_N=tuning.block_n, BLOCK_K=tuning.block_k, EVEN_K=k % tuning.block_k == 0,
        num_warps=tuning.num_warps, num_stages=tuning.num_stages)
    return y
