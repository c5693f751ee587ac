"""Triton kernel for paged prefill attention: every chunk of a step in one launch.

Imported lazily by ``prefill.py`` on the first launch (``TRITON_INTERPRET`` is read at
decoration time, as for the decode kernels).

One program owns BLOCK_M query rows of one chunk (a tile) and one query head. The chunk's
keys are read straight from the paged cache through its block table — its cached context
and its own new tokens alike, since the new K/V are written into the cache before attention
— so a chunk that forks or continues a context needs no gathered copy of it. Rows see keys
up to their own position (causal, aligned to the chunk's end). Scores are kept in base 2
(``scale * log2(e)`` folded into the scale).

With SPLIT the keys of a tile are cut into ranges of split_len (program_id(2) is the range):
few tiles over a long context (a short Fill after a long prompt: 1 tile x 32 heads on 132
SMs) would otherwise leave most of the GPU idle while each program walks thousands of keys
one block at a time. Each program then writes its range's normalised partial output and its
natural-log LSE to a workspace, and ``_merge_prefill_splits_kernel`` folds them.
"""
import triton
import triton.language as tl

from ._jit_decode import _finish   # a split's state -> normalised partial and natural-log LSE


@triton.jit
def _tile(tile, tile_chunk_ptr, tile_m_ptr, chunk_row_ptr, chunk_len_ptr):
    """Tile -> (its chunk, its first row in the chunk, the chunk's first row of q, its rows)."""
    chunk = tl.load(tile_chunk_ptr + tile)
    return (chunk, tl.load(tile_m_ptr + tile), tl.load(chunk_row_ptr + chunk),
            tl.load(chunk_len_ptr + chunk))


@triton.jit
def _attend(q, acc, m_i, l_i, start, end, q_pos, k_ptr, v_ptr, table, kv_head, stride_kb,
            stride_ks, stride_kh, scale_log2, offs_d, PAGE: tl.constexpr,
            BLOCK_N: tl.constexpr, MASKED: tl.constexpr, SPLIT: tl.constexpr):
    """One block of keys [start, start + BLOCK_N) folded into a tile's online softmax; MASKED:
    the block may reach past `end` or past a row's position (else every key is in range and
    visible to every row)."""
    offs_n = start + tl.arange(0, BLOCK_N)
    if MASKED:
        mask_n = offs_n < end
        page = tl.load(table + offs_n // PAGE, mask=mask_n, other=0).to(tl.int64)
    else:
        page = tl.load(table + offs_n // PAGE).to(tl.int64)
    kv = (page[:, None] * stride_kb + (offs_n % PAGE)[:, None] * stride_ks
          + kv_head * stride_kh + offs_d[None, :])
    if MASKED:
        k = tl.load(k_ptr + kv, mask=mask_n[:, None], other=0.0)
        v = tl.load(v_ptr + kv, mask=mask_n[:, None], other=0.0)
    else:
        k = tl.load(k_ptr + kv)
        v = tl.load(v_ptr + kv)
    s = tl.dot(q, tl.trans(k)) * scale_log2                           # [BLOCK_M, BLOCK_N]
    if MASKED:
        visible = (offs_n[None, :] <= q_pos[:, None]) & mask_n[None, :]
        s = tl.where(visible, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    # unsplit: finite from the first block on (key 0 is visible to every row); a split's
    # row may see none of its range's keys so far: its state stays empty, not NaN
    m_use = m_new
    if SPLIT:
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.math.exp2(m_i - m_use)
    p = tl.math.exp2(s - m_use[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return acc, m_new, l_i


# The table's row stride is the step's padded table width (1, 2, 4, ... blocks): not a
# specialisation, so the one variant the warm-up compiles serves every step.
# The split arguments likewise (each step's split length and tile count differ).
@triton.jit(do_not_specialize=["stride_tb", "split_len", "num_tiles"])
def _paged_prefill_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, tile_chunk_ptr, tile_m_ptr, chunk_row_ptr, chunk_pos_ptr,
    chunk_len_ptr, tables_ptr, scale_log2, ws_out_ptr, ws_lse_ptr, split_len, num_tiles,
    stride_qt, stride_qh, stride_kb, stride_ks, stride_kh, stride_ot, stride_oh, stride_tb,
    GQA: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, SPLIT: tl.constexpr,
):
    tile = tl.program_id(0)
    head = tl.program_id(1)
    chunk, m0, row0, n = _tile(tile, tile_chunk_ptr, tile_m_ptr, chunk_row_ptr, chunk_len_ptr)
    pos0 = tl.load(chunk_pos_ptr + chunk)
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

    lo = 0
    if SPLIT:
        lo = tl.program_id(2) * split_len
        end = tl.minimum(end, lo + split_len)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    table = tables_ptr + chunk.to(tl.int64) * stride_tb
    # Keys up to the tile's first row's position are visible to every row of the tile: the
    # whole blocks of them go without the causal and bounds masks (most of a long chunk's
    # blocks); only the blocks at the diagonal, and past it, are masked.
    full = lo + tl.maximum(tl.minimum(pos0 + m0 + 1, end) - lo, 0) // BLOCK_N * BLOCK_N
    for start in range(lo, full, BLOCK_N):
        acc, m_i, l_i = _attend(q, acc, m_i, l_i, start, end, q_pos, k_ptr, v_ptr, table,
                                kv_head, stride_kb, stride_ks, stride_kh, scale_log2, offs_d,
                                PAGE, BLOCK_N, False, SPLIT)
    for start in range(full, end, BLOCK_N):
        acc, m_i, l_i = _attend(q, acc, m_i, l_i, start, end, q_pos, k_ptr, v_ptr, table,
                                kv_head, stride_kb, stride_ks, stride_kh, scale_log2, offs_d,
                                PAGE, BLOCK_N, True, SPLIT)
    if SPLIT:
        partial, lse = _finish(m_i, l_i, acc)    # an empty range: zeros and -inf
        hq = tl.num_programs(1)
        idx = ((tl.program_id(2) * num_tiles + tile) * BLOCK_M + tl.arange(0, BLOCK_M)) * hq + head
        tl.store(ws_lse_ptr + idx, lse)
        tl.store(ws_out_ptr + idx[:, None] * HEAD_DIM + offs_d[None, :], partial)
    else:
        out = acc / l_i[:, None]
        tl.store(out_ptr + rows[:, None] * stride_ot + head * stride_oh + offs_d[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=mask_m[:, None])


@triton.jit(do_not_specialize=["num_splits", "num_tiles"])
def _merge_prefill_splits_kernel(
    ws_out_ptr, ws_lse_ptr, out_ptr, tile_chunk_ptr, tile_m_ptr, chunk_row_ptr, chunk_len_ptr,
    num_splits, num_tiles, stride_ot, stride_oh,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
):
    """One (tile, query head): the LSE-weighted sum of its rows' split partials -> out."""
    tile = tl.program_id(0)
    head = tl.program_id(1)
    hq = tl.num_programs(1)
    _, m0, row0, n = _tile(tile, tile_chunk_ptr, tile_m_ptr, chunk_row_ptr, chunk_len_ptr)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_sum = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for split in range(0, num_splits):
        idx = ((split * num_tiles + tile) * BLOCK_M + offs_m) * hq + head
        lse = tl.load(ws_lse_ptr + idx)
        m_new = tl.maximum(m, lse)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        w_old = tl.exp(m - m_safe)        # 0 while nothing was merged
        w = tl.exp(lse - m_safe)          # 0 for a range the row saw no key of
        o = tl.load(ws_out_ptr + idx[:, None] * HEAD_DIM + offs_d[None, :])
        acc = acc * w_old[:, None] + o * w[:, None]
        l_sum = l_sum * w_old + w
        m = m_new
    out = acc / tl.where(l_sum > 0, l_sum, 1.0)[:, None]
    rows = (row0 + m0 + offs_m).to(tl.int64)
    tl.store(out_ptr + rows[:, None] * stride_ot + head * stride_oh + offs_d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=(m0 + offs_m < n)[:, None])
