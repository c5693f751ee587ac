"""Fused ops of the decode layer (LLaMA family): one launch each instead of 3-8 PyTorch ops.

* ``add_rms_norm(x, delta, weight, eps)``: ``x += delta`` in place, returns RMSNorm(x) (fp32
  statistics like HF ``LlamaRMSNorm``); ``delta=None`` only normalises.
* ``rope_kv_write(qkv, cos, sin, positions, slots, k_cache, v_cache, num_heads,
  num_kv_heads)``: rotates the q and k heads of the fused projection in place and stores k
  and v at each token's slot of the paged caches; returns q, k, v views of ``qkv``.
* ``silu_mul(gate_up)``: ``silu(gate) * up`` of the fused gate/up projection.

Each matches the PyTorch ops it replaces value for value in the model dtype (the kernels
round intermediates where PyTorch stores them). On CPU tensors without
``TRITON_INTERPRET=1`` the same PyTorch ops run instead (``reference_*`` below).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .launch import launcher
from .decode import _use_triton, triton_next_pow2

SILU_BLOCK = 1024
ROPE_HEAD_BLOCK = 16   # heads per program of rope_kv_write


def reference_add_rms_norm(x: torch.Tensor, delta: torch.Tensor | None, weight: torch.Tensor,
                           eps: float) -> torch.Tensor:
    if delta is not None:
        x.add_(delta)
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def reference_rope_kv_write(qkv, cos, sin, positions, slots, k_cache, v_cache, num_heads: int,
                            num_kv_heads: int):
    t, d = qkv.shape[0], k_cache.shape[-1]
    heads = qkv.view(t, num_heads + 2 * num_kv_heads, d)
    qk = heads[:, :num_heads + num_kv_heads]
    c, s = cos.index_select(0, positions)[:, None, :], sin.index_select(0, positions)[:, None, :]
    half = d // 2
    rotated = torch.cat((-qk[..., half:], qk[..., :half]), dim=-1)
    qk.copy_(qk * c + rotated * s)
    q, k, v = heads.split([num_heads, num_kv_heads, num_kv_heads], dim=1)
    k_cache.view(-1, num_kv_heads, d).index_copy_(0, slots, k)
    v_cache.view(-1, num_kv_heads, d).index_copy_(0, slots, v)
    return q, k, v


def reference_silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def _check_rows(name: str, *tensors: torch.Tensor) -> None:
    for t in tensors:
        if t.dim() != 2 or t.stride(1) != 1:
            raise ValueError(f"{name}: want 2-D tensors with a contiguous last dim, got "
                             f"{tuple(t.shape)} strides {t.stride()}")


def add_rms_norm(x: torch.Tensor, delta: torch.Tensor | None, weight: torch.Tensor,
                 eps: float) -> torch.Tensor:
    """x [T, H] (updated in place when delta [T, H] is given) -> RMSNorm(x) [T, H]."""
    _check_rows("add_rms_norm", x, *(() if delta is None else (delta,)))
    if not _use_triton(x):
        return reference_add_rms_norm(x, delta, weight, eps)
    from . import _jit_fused as jit

    out = torch.empty_like(x)
    hidden = x.shape[1]
    if x.shape[0]:
        d = x if delta is None else delta
        launcher(jit._add_rms_norm_kernel)((x.shape[0],),
            x, d, weight, out, eps, x.stride(0), d.stride(0), out.stride(0),
            HIDDEN=hidden, BLOCK=triton_next_pow2(hidden), HAS_DELTA=delta is not None,
            num_warps=8 if hidden >= 4096 else 4)
    return out


def rope_kv_write(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                  positions: torch.Tensor, slots: torch.Tensor, k_cache: torch.Tensor,
                  v_cache: torch.Tensor, num_heads: int, num_kv_heads: int):
    """qkv [T, (Hq + 2 Hkv) D] (q and k rotated in place); cos/sin [P, D] (rotate_half
    layout: both halves equal); positions, slots [T] int64; caches [blocks, block_size,
    Hkv, D] contiguous. Returns q [T, Hq, D], k, v [T, Hkv, D] (views of qkv)."""
    d = k_cache.shape[-1]
    _check_rows("rope_kv_write", qkv, cos, sin)
    if qkv.shape[1] != (num_heads + 2 * num_kv_heads) * d or d % 2 or d & (d - 1):
        raise ValueError(f"qkv width {qkv.shape[1]} != ({num_heads} + 2 * {num_kv_heads}) * "
                         f"{d}, or head_dim not a power of two")
    if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        raise ValueError("k_cache and v_cache must be contiguous")
    if not _use_triton(qkv):
        return reference_rope_kv_write(qkv, cos, sin, positions, slots, k_cache, v_cache,
                                       num_heads, num_kv_heads)
    from . import _jit_fused as jit

    t = qkv.shape[0]
    heads = num_heads + 2 * num_kv_heads
    if t:
        head_block = min(ROPE_HEAD_BLOCK, triton_next_pow2(heads))
        launcher(jit._rope_kv_write_kernel)((t, -(-heads // head_block)),
            qkv, cos, sin, positions, slots, k_cache, v_cache, qkv.stride(0), cos.stride(0),
            num_kv_heads * d, d, HQ=num_heads, HKV=num_kv_heads, HALF=d // 2,
            HEAD_BLOCK=head_block, num_warps=4)
    return qkv.view(t, heads, d).split([num_heads, num_kv_heads, num_kv_heads], dim=1)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """gate_up [T, 2I] -> silu(gate_up[:, :I]) * gate_up[:, I:] [T, I]."""
    _check_rows("silu_mul", gate_up)
    if not _use_triton(gate_up):
        return reference_silu_mul(gate_up)
    from . import _jit_fused as jit

    t, inter = gate_up.shape[0], gate_up.shape[1] // 2
    out = torch.empty(t, inter, dtype=gate_up.dtype, device=gate_up.device)
    if t:
        block = min(SILU_BLOCK, triton_next_pow2(inter))
        launcher(jit._silu_mul_kernel)((t, -(-inter // block)),
            gate_up, out, gate_up.stride(0), out.stride(0), INTER=inter, BLOCK=block,
            num_warps=4)
    return out
