"""Triton kernel for paged prefill attention: every chunk of a step in one launch.

Imported lazily by ``prefill.py`` on the first launch (``TRITON_INTERPRET`` is read at
decoration time, as for the decode kernels).

One program owns BLOCK_M query rows of one chunk (a tile) and one query head. The chunk's
keys are read straight from the paged cache through its block table — its cached context
and its own new tokens alike, since the new K/V are written into the cache before attention
— so a chunk that forks or continues a context needs no gathered copy of it. Rows see keys
up to their own position (causal, aligned to the chunk's end). Scores are kept in base 2
(``scale * log2(e)`` folded into the scale).
"""
import triton
import triton.language as tl


# The table's row stride is the step's padded table width (1, 2, 4, ... blocks): not a
# specialisation, so the one variant the warm-up compiles serves every step.
@triton.jit(do_not_specialize=["stride_tb"])
def _paged_prefill_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, tile_chunk_ptr, tile_m_ptr, chunk_row_ptr, chunk_pos_ptr,
    chunk_len_ptr, tables_ptr, scale_log2,
    stride_qt, stride_qh, stride_kb, stride_ks, stride_kh, stride_ot, stride_oh, stride_tb,
    GQA: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    tile = tl.program_id(0)
    head = tl.program_id(1)
    chunk = tl.load(tile_chunk_ptr + tile)
    m0 = tl.load(tile_m_ptr + tile)
    row0 = tl.load(chunk_row_ptr + chunk)
    pos0 = tl.load(chunk_pos_ptr + chunk)
    n = tl.load(chunk_len_ptr + chunk)
    kv_head = head // GQA

    offs_m = m0 + tl.arange(0, BLOCK_M)
    mask_m = offs_m < n
    offs_d = tl.arange(0, HEAD_DIM)
    rows = (row0 + offs_m).to(tl.int64)
    q = tl.load(q_ptr + rows[:, None] * stride_qt + head * stride_qh + offs_d[None, :],
                mask=mask_m[:, None], other=0.0)
    q_pos = pos0 + offs_m
    # the tile's last row sees keys up to its position: nothing past it is read
    end = pos0 + tl.minimum(m0 + BLOCK_M, n)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    table = tables_ptr + chunk.to(tl.int64) * stride_tb
    for start in range(0, end, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        mask_n = offs_n < end
        page = tl.load(table + offs_n // PAGE, mask=mask_n, other=0).to(tl.int64)
        kv = (page[:, None] * stride_kb + (offs_n % PAGE)[:, None] * stride_ks
              + kv_head * stride_kh + offs_d[None, :])
        k = tl.load(k_ptr + kv, mask=mask_n[:, None], other=0.0)
        v = tl.load(v_ptr + kv, mask=mask_n[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale_log2                       # [BLOCK_M, BLOCK_N]
        visible = (offs_n[None, :] <= q_pos[:, None]) & mask_n[None, :]
        s = tl.where(visible, s, float("-inf"))
        # finite from the first block on: key 0 is visible to every row
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(out_ptr + rows[:, None] * stride_ot + head * stride_oh + offs_d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=mask_m[:, None])
