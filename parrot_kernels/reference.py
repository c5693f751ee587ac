"""PyTorch reference implementations of the decode-attention kernels.

Plain, slow and exact: one loop iteration per request, computed in ``dtype`` (float64 by
default). The tests hold the Triton kernels to these; they also serve as the CPU fallback
of the public wrappers when Triton cannot run (no CUDA and no ``TRITON_INTERPRET=1``).

LSE convention (shared by every function of this package): ``lse = log(sum_j exp(scale *
q.k_j))`` in natural log, float32 in the kernels; an empty key set has ``lse = -inf`` and an
all-zero output.
"""
from __future__ import annotations

import torch


def _gather_tokens(cache: torch.Tensor, table: torch.Tensor, length: int) -> torch.Tensor:
    """cache [num_blocks, block_size, kvh, d], table [>= ceil(length/bs)] -> [length, kvh, d]."""
    block_size = cache.shape[1]
    num_pages = -(-length // block_size)
    pages = table[:num_pages].long().to(cache.device)
    return cache[pages].reshape(num_pages * block_size, *cache.shape[2:])[:length]


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """q [hq, d], k/v [n, kvh, d] -> out [hq, d], lse [hq] (empty n: zeros, -inf)."""
    hq, kvh = q.shape[0], k.shape[1]
    k = k.repeat_interleave(hq // kvh, dim=1)  # [n, hq, d]
    v = v.repeat_interleave(hq // kvh, dim=1)
    if k.shape[0] == 0:
        return torch.zeros_like(q), torch.full((hq,), float("-inf"), dtype=q.dtype, device=q.device)
    scores = torch.einsum("hd,nhd->hn", q, k) * scale
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.einsum("hn,nhd->hd", torch.exp(scores - lse[:, None]), v)
    return out, lse


def reference_paged_decode_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
    block_tables: torch.Tensor, seq_lens: torch.Tensor, scale: float,
    *, dtype: torch.dtype = torch.float64, return_lse: bool = False,
):
    """Row b of q [B, hq, d] attends its own seq_lens[b] tokens; returns [B, hq, d] in dtype."""
    outs, lses = [], []
    for b in range(q.shape[0]):
        n = int(seq_lens[b])
        k = _gather_tokens(k_cache, block_tables[b], n).to(dtype)
        v = _gather_tokens(v_cache, block_tables[b], n).to(dtype)
        out, lse = _attend(q[b].to(dtype), k, v, scale)
        outs.append(out)
        lses.append(lse)
    out, lse = torch.stack(outs), torch.stack(lses)
    return (out, lse) if return_lse else out


def reference_shared_prefix_decode_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
    group_indptr: torch.Tensor, prefix_block_tables: torch.Tensor, prefix_lens: torch.Tensor,
    suffix_block_tables: torch.Tensor, suffix_lens: torch.Tensor, scale: float,
    *, dtype: torch.dtype = torch.float64, return_lse: bool = False,
):
    """Rows group_indptr[g]:group_indptr[g+1] attend group g's prefix ++ their own suffix."""
    indptr = [int(x) for x in group_indptr]
    if indptr[0] != 0 or indptr[-1] != q.shape[0]:
        raise ValueError(f"group_indptr must run from 0 to B={q.shape[0]}, got {indptr}")
    outs, lses = [], []
    for g in range(len(indptr) - 1):
        p = int(prefix_lens[g])
        kp = _gather_tokens(k_cache, prefix_block_tables[g], p)
        vp = _gather_tokens(v_cache, prefix_block_tables[g], p)
        for b in range(indptr[g], indptr[g + 1]):
            s = int(suffix_lens[b])
            k = torch.cat([kp, _gather_tokens(k_cache, suffix_block_tables[b], s)]).to(dtype)
            v = torch.cat([vp, _gather_tokens(v_cache, suffix_block_tables[b], s)]).to(dtype)
            out, lse = _attend(q[b].to(dtype), k, v, scale)
            outs.append(out)
            lses.append(lse)
    out, lse = torch.stack(outs), torch.stack(lses)
    return (out, lse) if return_lse else out


def reference_merge_attention_states(
    out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention over A ++ B from the parts: out [..., d], lse [...] (natural log, -inf = empty)."""
    lse_a, lse_b = lse_a.float(), lse_b.float()
    m = torch.maximum(lse_a, lse_b)
    m_safe = torch.where(torch.isinf(m) & (m < 0), torch.zeros_like(m), m)
    w_a, w_b = torch.exp(lse_a - m_safe), torch.exp(lse_b - m_safe)
    denom = w_a + w_b
    has = denom > 0
    denom_safe = torch.where(has, denom, torch.ones_like(denom))
    # where(): an empty part may hold garbage (even NaN) in its output; it must not leak.
    part_a = torch.where((w_a > 0)[..., None], out_a.float() * (w_a / denom_safe)[..., None], 0.0)
    part_b = torch.where((w_b > 0)[..., None], out_b.float() * (w_b / denom_safe)[..., None], 0.0)
    out = part_a + part_b
    lse = torch.where(has, m_safe + torch.log(denom_safe), torch.full_like(m, float("-inf")))
    return out.to(out_a.dtype), lse


def reference_paged_prefill_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
    chunks, block_tables: torch.Tensor, scale: float, dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """Chunk (row_start, n, pos_start): row i of q[row_start + i] attends keys
    0 .. pos_start + i of its context (pages block_tables[c]) -> [T, Hq, D] in ``dtype``;
    rows in no chunk are zero."""
    out = torch.zeros(q.shape, dtype=dtype, device=q.device)
    hq, kvh = q.shape[1], k_cache.shape[2]
    for c, (row, n, pos) in enumerate(chunks):
        length = pos + n
        k = _gather_tokens(k_cache, block_tables[c], length).to(dtype)
        v = _gather_tokens(v_cache, block_tables[c], length).to(dtype)
        k = k.repeat_interleave(hq // kvh, dim=1)                      # [L, hq, d]
        v = v.repeat_interleave(hq // kvh, dim=1)
        qs = q[row:row + n].to(dtype)                                   # [n, hq, d]
        scores = torch.einsum("ihd,jhd->hij", qs, k) * scale           # [hq, n, L]
        visible = (torch.arange(length, device=q.device)[None, :]
                   <= pos + torch.arange(n, device=q.device)[:, None])
        scores = scores.masked_fill(~visible[None], float("-inf"))
        out[row:row + n] = torch.einsum("hij,jhd->ihd", torch.softmax(scores, dim=-1), v)
    return out
