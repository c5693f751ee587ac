"""Python wrappers: paged and shared-prefix decode attention, and the LSE merge.

Shapes: q [B, Hq, D]; k_cache/v_cache [num_blocks, block_size, Hkv, D] (same strides);
block tables int32 [rows, max_blocks]; lengths int32 [rows]; output [B, Hq, D] in q's dtype.
Query head h reads kv head h // (Hq // Hkv).

CUDA-graph capture: a launch reads only host-known shapes (B, G, table widths, head counts)
and never the device-side lengths, so it has no host sync and allocates only ``out`` and the
fp32 split workspace when they are not given. Pass ``out=`` and ``workspace=`` (a 1-D fp32
tensor with at least ``*_workspace_numel(...)`` elements for the same shapes) to capture.
"""
from __future__ import annotations

import os

import torch

from .launch import launcher
from .plan import (KernelTuning, Plan, paged_plan, shared_plan, triton_next_pow2,
                   workspace_numel)
from .reference import (reference_merge_attention_states, reference_paged_decode_attention,
                        reference_shared_prefix_decode_attention)

LOG2E = 1.4426950408889634


def _check(q, k_cache, v_cache, tables, out, rows: str = "B") -> None:
    """The attention wrappers' arguments (decode and prefill: `rows` names q's first dim)."""
    if q.dim() != 3 or k_cache.dim() != 4 or k_cache.shape != v_cache.shape:
        raise ValueError(f"want q [{rows}, Hq, D], caches [blocks, block_size, Hkv, D]; got q "
                         f"{tuple(q.shape)}, k {tuple(k_cache.shape)}, v {tuple(v_cache.shape)}")
    d, kvh = q.shape[2], k_cache.shape[2]
    if k_cache.shape[3] != d or q.shape[1] % kvh or d < 16 or d & (d - 1):
        raise ValueError(f"head_dim {d} (cache {k_cache.shape[3]}) must match and be a power of "
                         f"two >= 16; Hq={q.shape[1]} must be a multiple of Hkv={kvh}")
    if not (q.dtype == k_cache.dtype == v_cache.dtype) or q.dtype not in (
            torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"q/k/v dtypes must be one of fp16/bf16/fp32 and equal, got "
                         f"{q.dtype}/{k_cache.dtype}/{v_cache.dtype}")
    if k_cache.stride() != v_cache.stride() or k_cache.stride(3) != 1 or q.stride(2) != 1:
        raise ValueError("k_cache and v_cache need equal strides and a contiguous last dim; "
                         "q needs a contiguous last dim")
    for t in tables:
        if t.dtype != torch.int32 or (t.shape[-1] > 1 and t.stride(-1) != 1):
            raise ValueError(f"block tables and lengths must be int32 with a contiguous last dim,"
                             f" got {t.dtype} strides {t.stride()}")
    if out is not None and (out.shape != q.shape or out.dtype != q.dtype or out.stride(2) != 1):
        raise ValueError(f"out must be {tuple(q.shape)} {q.dtype} with a contiguous last dim")


def _use_triton(q: torch.Tensor) -> bool:
    return q.is_cuda or os.environ.get("TRITON_INTERPRET") == "1"


def _launch(plan: Plan, tuning: KernelTuning, q, k_cache, v_cache, tables, lens, indptr,
            ptables, plens, scale: float, out, workspace):
    from . import _jit_decode as jit  # lazy: TRITON_INTERPRET must be read after conftest

    batch, hq, d = q.shape
    kvh, page = k_cache.shape[2], k_cache.shape[1]
    gqa = hq // kvh
    groups = indptr.shape[0] - 1
    use_dot = tuning.use_dot
    block_h = max(16, triton_next_pow2(gqa)) if use_dot else triton_next_pow2(gqa)
    block_m = plan.block_m
    if out is None:
        out = torch.empty_like(q)
    slots = plan.num_slots
    if slots:
        need = workspace_numel(plan, q)
        if workspace is None:
            workspace = torch.empty(need, dtype=torch.float32, device=q.device)
        elif workspace.dtype != torch.float32 or workspace.numel() < need:
            raise ValueError(f"workspace must be fp32 with >= {need} elements")
        ws_out = workspace[: slots * batch * hq * d]
        ws_lse = workspace[slots * batch * hq * d: need]
    else:
        ws_out = ws_lse = q  # never touched; not `out`: the interpreter writes args back
    n_tile_programs = plan.n_tiles * kvh * plan.prefix_splits
    n_row_programs = batch * kvh * plan.row_splits

    def partials(grid: int, n_tp: int, tiles: bool, rows: bool, num_warps: int) -> None:
        launcher(jit._decode_partial_kernel)((grid,),
            q, k_cache, v_cache, tables, lens, indptr, ptables, plens, ws_out, ws_lse, out,
            scale * LOG2E, batch, groups, n_tp, max(plan.n_tiles, 1), plan.prefix_split_len,
            plan.row_split_len, plan.prefix_splits if plan.n_tiles else 0,
            q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
            tables.stride(0), ptables.stride(0), out.stride(0), out.stride(1),
            KVH=kvh, GQA=gqa, HEAD_DIM=d, PAGE=page, BLOCK_H=block_h, BLOCK_M=block_m,
            BLOCK_N=plan.block_n, TILE_BLOCK_N=plan.tile_block_n,
            BLOCK_G=triton_next_pow2(groups + 1), PREFIX_TILES=tiles, ROW_PROGRAMS=rows,
            ROW_HAS_PREFIX=plan.row_has_prefix, DIRECT_OUT=plan.direct_out, USE_DOT=use_dot,
            num_warps=num_warps, num_stages=plan.num_stages)

    if n_tile_programs and not tuning.fuse:
        partials(n_tile_programs, n_tile_programs, True, False,
                 tuning.tile_num_warps or tuning.num_warps)
        partials(n_row_programs, 0, False, True, tuning.num_warps)
    else:
        partials(n_tile_programs + n_row_programs, n_tile_programs, n_tile_programs > 0, True,
                 tuning.num_warps)
    if slots:
        launcher(jit._merge_splits_kernel)((batch * hq,),
            ws_out, ws_lse, out, batch, slots, out.stride(0), out.stride(1),
            HQ=hq, HEAD_DIM=d, BLOCK_S=triton_next_pow2(slots), num_warps=1)
    return out


def paged_decode_attention(q, k_cache, v_cache, block_tables, seq_lens, scale: float, *,
                           out: torch.Tensor | None = None, workspace: torch.Tensor | None = None,
                           tuning: KernelTuning | None = None) -> torch.Tensor:
    """Row b attends the first seq_lens[b] tokens of the pages block_tables[b] (vLLM-style).

    Split-KV when B * Hkv programs would not fill the GPU; a single split writes ``out``
    directly, otherwise a second launch merges the splits (needs ``workspace``).
    """
    _check(q, k_cache, v_cache, (block_tables, seq_lens), out)
    if not _use_triton(q):
        ref = reference_paged_decode_attention(q, k_cache, v_cache, block_tables, seq_lens, scale,
                                               dtype=torch.float32)
        return ref.to(q.dtype) if out is None else out.copy_(ref)
    if q.shape[0] == 0:
        return torch.empty_like(q) if out is None else out
    tuning = tuning or KernelTuning()
    plan = paged_plan(q, k_cache, block_tables, tuning)
    return _launch(plan, tuning, q, k_cache, v_cache, block_tables, seq_lens, seq_lens[:1],
                   block_tables, seq_lens, scale, out, workspace)


STRATEGIES = ("auto", "cascade", "per_row")


def shared_prefix_decode_attention(q, k_cache, v_cache, group_indptr, prefix_block_tables,
                                   prefix_lens, suffix_block_tables, suffix_lens, scale: float,
                                   *, out: torch.Tensor | None = None,
                                   workspace: torch.Tensor | None = None, strategy: str = "auto",
                                   tuning: KernelTuning | None = None) -> torch.Tensor:
    """Rows group_indptr[g]:group_indptr[g+1] attend group g's prefix (prefix_lens[g] tokens, a
    multiple of block_size, possibly 0) ++ their own suffix (suffix_lens[b] tokens, possibly 0).

    Preconditions (not checked on the device): group_indptr is non-decreasing from 0 to B.
    strategy "cascade": prefix tiles (all rows of a group x GQA heads against the prefix, one
    tl.dot tile per (tile, kv head, prefix split)) and per-row suffix programs in one launch,
    then a merge launch. "per_row": each row reads prefix ++ suffix itself (the paged kernel
    with a two-part table). "auto" picks per_row when sharing saves few tokens (see
    CASCADE_MIN_SAVED_BYTES) -- the dispatch heuristic that keeps it never slower than paged.
    """
    _check(q, k_cache, v_cache, (prefix_block_tables, suffix_block_tables, group_indptr,
                                 prefix_lens, suffix_lens), out)
    if strategy not in STRATEGIES:   # on every path, the reference fallback included
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    if not _use_triton(q):
        ref = reference_shared_prefix_decode_attention(
            q, k_cache, v_cache, group_indptr, prefix_block_tables, prefix_lens,
            suffix_block_tables, suffix_lens, scale, dtype=torch.float32)
        return ref.to(q.dtype) if out is None else out.copy_(ref)
    if q.shape[0] == 0:
        return torch.empty_like(q) if out is None else out
    tuning = tuning or KernelTuning()
    plan = shared_plan(q, k_cache, group_indptr, prefix_block_tables, suffix_block_tables,
                        strategy, tuning)
    if prefix_block_tables.shape[1] == 0:  # no prefix anywhere: the plain paged path
        prefix_block_tables = suffix_block_tables  # never read
    return _launch(plan, tuning, q, k_cache, v_cache, suffix_block_tables, suffix_lens,
                   group_indptr, prefix_block_tables, prefix_lens, scale, out, workspace)


def merge_attention_states(out_a, lse_a, out_b, lse_b, *, out: torch.Tensor | None = None,
                           lse: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention over key sets A ++ B from its parts.

    out_* [N, H, D] (any float dtype, contiguous last dim), lse_* [N, H] fp32 contiguous with
    lse = log(sum_j exp(scale * q.k_j)) in natural log; an empty part has lse = -inf and its
    output is ignored (may be garbage, even NaN). Both parts empty: zeros and -inf.
    Returns (out [N, H, D] in out_a's dtype, lse [N, H] fp32).
    """
    if not _use_triton(out_a):
        ref_out, ref_lse = reference_merge_attention_states(out_a, lse_a, out_b, lse_b)
        if out is not None:
            ref_out = out.copy_(ref_out)
        return ref_out, (ref_lse if lse is None else lse.copy_(ref_lse))
    from . import _jit_decode as jit

    n, h, d = out_a.shape
    if out_b.shape != out_a.shape or lse_a.shape != (n, h) or lse_b.shape != (n, h):
        raise ValueError(f"shapes: out {tuple(out_a.shape)}/{tuple(out_b.shape)}, "
                         f"lse {tuple(lse_a.shape)}/{tuple(lse_b.shape)}")
    for t in (lse_a, lse_b):
        if t.dtype != torch.float32 or not t.is_contiguous():
            raise ValueError("lse tensors must be contiguous float32")
    if out_a.stride(2) != 1 or out_b.stride(2) != 1:
        raise ValueError("out_a and out_b need a contiguous last dim")
    out = torch.empty_like(out_a) if out is None else out
    lse = torch.empty_like(lse_a) if lse is None else lse
    if n * h:
        launcher(jit._merge_two_kernel)((n * h,),
            out_a, lse_a, out_b, lse_b, out, lse, h, out_a.stride(0), out_a.stride(1),
            out_b.stride(0), out_b.stride(1), out.stride(0), out.stride(1),
            HEAD_DIM=d, BLOCK_D=triton_next_pow2(d), num_warps=1)
    return out, lse
