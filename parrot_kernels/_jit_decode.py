"""Triton kernels for paged and shared-prefix decode attention (partials + split merge).

Imported lazily by ``decode.py`` on the first launch: ``@triton.jit`` decides at decoration
time whether to build a compiled or an interpreted (``TRITON_INTERPRET=1``) kernel.

Both kernels write *partials*: for split slot s, row b, query head h, the normalised output
over that split's keys, ``ws_out[s, b, h, :]`` (fp32), and its natural-log LSE
``ws_lse[s, b, h]`` (-inf and zeros when the split is empty). ``_merge_splits_kernel`` folds
the slots of a row into the final output. Inside the loops scores are kept in base 2
(``scale * log2(e)`` folded into the scale) so the exponentials are ``exp2``.
"""
import triton
import triton.language as tl

LN2 = tl.constexpr(0.6931471805599453)


@triton.jit
def _online_softmax_step(q, k, v, valid_n, m_i, l_i, acc, scale_log2, USE_DOT: tl.constexpr):
    """One KV chunk. q [M, D], k/v [N, D], valid_n [N]; state m_i/l_i [M], acc [M, D] fp32."""
    if USE_DOT:
        s = tl.dot(q, tl.trans(k))  # [M, N] fp32
    else:
        s = tl.sum(q.to(tl.float32)[:, None, :] * k.to(tl.float32)[None, :, :], axis=2)
    s = tl.where(valid_n[None, :], s * scale_log2, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))  # finite: every chunk has >= 1 valid key
    alpha = tl.math.exp2(m_i - m_new)
    p = tl.math.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    if USE_DOT:
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    else:
        acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v.to(tl.float32)[None, :, :], axis=1)
    return m_new, l_i, acc


@triton.jit
def _finish(m_i, l_i, acc):
    """Normalised output [M, D] and natural-log LSE [M]; an empty state gives zeros and -inf."""
    has = l_i > 0
    l_safe = tl.where(has, l_i, 1.0)
    lse = tl.where(has, (m_i + tl.math.log2(l_safe)) * LN2, float("-inf"))
    return acc / l_safe[:, None], lse


@triton.jit
def _row_partial(
    pid, q_ptr, k_ptr, v_ptr, tables_ptr, lens_ptr, indptr_ptr, ptables_ptr, plens_ptr,
    ws_out_ptr, ws_lse_ptr, out_ptr,
    scale_log2, B, G, split_len, slot_offset,
    stride_qb, stride_qh, stride_kb, stride_ks, stride_kh, stride_tb, stride_pb,
    stride_ob, stride_oh,
    KVH: tl.constexpr, GQA: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_G: tl.constexpr,
    HAS_PREFIX: tl.constexpr, DIRECT_OUT: tl.constexpr, USE_DOT: tl.constexpr,
):
    """One (row, kv head, split): the GQA heads of one row over a range of its own keys.

    With HAS_PREFIX the row's keys are its group's prefix (prefix table) ++ its own table.
    Program order puts rows fastest so programs reading the same pages run together (L2).
    """
    row = pid % B
    kvh = (pid // B) % KVH
    split = pid // (B * KVH)
    seq_len = tl.load(lens_ptr + row)
    if HAS_PREFIX:
        offs_g = tl.arange(0, BLOCK_G)
        ends = tl.load(indptr_ptr + 1 + offs_g, mask=offs_g < G, other=2147483647)
        grp = tl.sum((ends <= row).to(tl.int32), axis=0)
        plen = tl.load(plens_ptr + grp)
    else:
        grp = 0
        plen = 0
    lo = split * split_len
    hi = tl.minimum(lo + split_len, plen + seq_len)

    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, HEAD_DIM)
    head = kvh * GQA + offs_h
    h_mask = offs_h < GQA
    q = tl.load(q_ptr + row * stride_qb + head[:, None] * stride_qh + offs_d[None, :],
                mask=h_mask[:, None], other=0.0)
    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, HEAD_DIM], tl.float32)
    for start in range(lo, hi, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        valid_n = offs_n < hi
        if HAS_PREFIX:  # plen is a multiple of PAGE, so the slot is offs_n % PAGE either way
            in_prefix = offs_n < plen
            p_page = tl.load(ptables_ptr + grp * stride_pb + offs_n // PAGE,
                             mask=valid_n & in_prefix, other=0)
            s_page = tl.load(tables_ptr + row * stride_tb + (offs_n - plen) // PAGE,
                             mask=valid_n & (offs_n >= plen), other=0)
            page = tl.where(in_prefix, p_page, s_page)
        else:
            page = tl.load(tables_ptr + row * stride_tb + offs_n // PAGE, mask=valid_n, other=0)
        kv_off = page.to(tl.int64) * stride_kb + (offs_n % PAGE) * stride_ks + kvh * stride_kh
        kv_off = kv_off[:, None] + offs_d[None, :]
        k = tl.load(k_ptr + kv_off, mask=valid_n[:, None], other=0.0)
        v = tl.load(v_ptr + kv_off, mask=valid_n[:, None], other=0.0)
        m_i, l_i, acc = _online_softmax_step(q, k, v, valid_n, m_i, l_i, acc, scale_log2, USE_DOT)
    o, lse = _finish(m_i, l_i, acc)
    if DIRECT_OUT:
        o_ptrs = out_ptr + row * stride_ob + head[:, None] * stride_oh + offs_d[None, :]
        tl.store(o_ptrs, o.to(out_ptr.dtype.element_ty), mask=h_mask[:, None])
    else:
        idx = ((slot_offset + split) * B + row) * (KVH * GQA) + head
        tl.store(ws_lse_ptr + idx, lse, mask=h_mask)
        tl.store(ws_out_ptr + idx[:, None] * HEAD_DIM + offs_d[None, :], o, mask=h_mask[:, None])


@triton.jit
def _prefix_tile_partial(
    pid, q_ptr, k_ptr, v_ptr, indptr_ptr, ptables_ptr, plens_ptr, ws_out_ptr, ws_lse_ptr,
    scale_log2, B, G, n_tiles, split_len,
    stride_qb, stride_qh, stride_kb, stride_ks, stride_kh, stride_pb,
    KVH: tl.constexpr, GQA: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_G: tl.constexpr,
):
    """One (row tile, kv head, prefix split): up to BLOCK_M // GQA rows of one group, times
    the GQA heads sharing this kv head, stacked as the M dimension of two tl.dot's over a
    range of the group's prefix keys. The prefix is read once per tile instead of per row.
    """
    ROWS: tl.constexpr = BLOCK_M // GQA
    tile = pid % n_tiles
    kvh = (pid // n_tiles) % KVH
    split = pid // (n_tiles * KVH)
    # Tile -> (group, rows): group g owns ceil(n_g / ROWS) consecutive tiles.
    offs_g = tl.arange(0, BLOCK_G)
    g_mask = offs_g < G
    g_lo = tl.load(indptr_ptr + offs_g, mask=g_mask, other=0)
    g_hi = tl.load(indptr_ptr + 1 + offs_g, mask=g_mask, other=0)
    g_tiles = (g_hi - g_lo + ROWS - 1) // ROWS
    g_tiles_end = tl.cumsum(g_tiles, axis=0)
    grp = tl.sum((g_tiles_end <= tile).to(tl.int32), axis=0)  # == G for an unused tile
    is_grp = offs_g == grp
    first_tile = tl.sum(tl.where(is_grp, g_tiles_end - g_tiles, 0), axis=0)
    row_lo = tl.sum(tl.where(is_grp, g_lo, 0), axis=0) + (tile - first_tile) * ROWS
    row_hi = tl.minimum(row_lo + ROWS, tl.sum(tl.where(is_grp, g_hi, 0), axis=0))
    plen = tl.load(plens_ptr + grp, mask=grp < G, other=0)
    lo = split * split_len
    hi = tl.minimum(lo + split_len, plen)

    offs_m = tl.arange(0, BLOCK_M)
    row = row_lo + offs_m // GQA
    head = kvh * GQA + offs_m % GQA
    m_mask = (offs_m < ROWS * GQA) & (row < row_hi)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + row[:, None] * stride_qb + head[:, None] * stride_qh + offs_d[None, :],
                mask=m_mask[:, None], other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    for start in range(lo, hi, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        valid_n = offs_n < hi
        page = tl.load(ptables_ptr + grp * stride_pb + offs_n // PAGE, mask=valid_n, other=0)
        kv_off = page.to(tl.int64) * stride_kb + (offs_n % PAGE) * stride_ks + kvh * stride_kh
        kv_off = kv_off[:, None] + offs_d[None, :]
        k = tl.load(k_ptr + kv_off, mask=valid_n[:, None], other=0.0)
        v = tl.load(v_ptr + kv_off, mask=valid_n[:, None], other=0.0)
        m_i, l_i, acc = _online_softmax_step(q, k, v, valid_n, m_i, l_i, acc, scale_log2, True)
    o, lse = _finish(m_i, l_i, acc)
    idx = (split * B + row) * (KVH * GQA) + head
    tl.store(ws_lse_ptr + idx, lse, mask=m_mask)
    tl.store(ws_out_ptr + idx[:, None] * HEAD_DIM + offs_d[None, :], o, mask=m_mask[:, None])


# Integer arguments that only index programs or rows are not specialised (Triton would compile
# a variant for each of ==1 / %16 == 0 / other): fewer variants to compile at engine start-up.
@triton.jit(do_not_specialize=["B", "G", "n_tile_programs", "n_tiles", "row_slot_offset",
                               "stride_tb", "stride_pb"])
def _decode_partial_kernel(
    q_ptr, k_ptr, v_ptr, tables_ptr, lens_ptr, indptr_ptr, ptables_ptr, plens_ptr,
    ws_out_ptr, ws_lse_ptr, out_ptr,
    scale_log2, B, G, n_tile_programs, n_tiles, prefix_split_len, row_split_len, row_slot_offset,
    stride_qb, stride_qh, stride_kb, stride_ks, stride_kh, stride_tb, stride_pb,
    stride_ob, stride_oh,
    KVH: tl.constexpr, GQA: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    TILE_BLOCK_N: tl.constexpr, BLOCK_G: tl.constexpr, PREFIX_TILES: tl.constexpr,
    ROW_PROGRAMS: tl.constexpr, ROW_HAS_PREFIX: tl.constexpr,
    DIRECT_OUT: tl.constexpr, USE_DOT: tl.constexpr,
):
    """Partials. With PREFIX_TILES the first n_tile_programs programs are prefix tiles (they
    are the longer ones, so they start first); with ROW_PROGRAMS the rest are per-row programs.
    Both in one launch overlap the two parts, at the register count of the larger."""
    pid = tl.program_id(0)
    row_pid = pid
    if PREFIX_TILES:
        row_pid = pid - n_tile_programs
        if pid < n_tile_programs:
            _prefix_tile_partial(
                pid, q_ptr, k_ptr, v_ptr, indptr_ptr, ptables_ptr, plens_ptr, ws_out_ptr,
                ws_lse_ptr, scale_log2, B, G, n_tiles, prefix_split_len,
                stride_qb, stride_qh, stride_kb, stride_ks, stride_kh, stride_pb,
                KVH, GQA, HEAD_DIM, PAGE, BLOCK_M, TILE_BLOCK_N, BLOCK_G)
    if ROW_PROGRAMS:
        if row_pid >= 0:
            _row_partial(
                row_pid, q_ptr, k_ptr, v_ptr, tables_ptr, lens_ptr, indptr_ptr,
                ptables_ptr, plens_ptr, ws_out_ptr, ws_lse_ptr, out_ptr,
                scale_log2, B, G, row_split_len, row_slot_offset,
                stride_qb, stride_qh, stride_kb, stride_ks, stride_kh, stride_tb, stride_pb,
                stride_ob, stride_oh,
                KVH, GQA, HEAD_DIM, PAGE, BLOCK_H, BLOCK_N, BLOCK_G,
                ROW_HAS_PREFIX, DIRECT_OUT, USE_DOT)


@triton.jit(do_not_specialize=["B", "num_slots"])
def _merge_splits_kernel(
    ws_out_ptr, ws_lse_ptr, out_ptr, B, num_slots, stride_ob, stride_oh,
    HQ: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_S: tl.constexpr,
):
    """One (row, query head): LSE-weighted sum of its num_slots partials -> out (q dtype)."""
    pid = tl.program_id(0)
    row = pid // HQ
    head = pid % HQ
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, HEAD_DIM)
    s_mask = offs_s < num_slots
    idx = (offs_s * B + row) * HQ + head
    lse = tl.load(ws_lse_ptr + idx, mask=s_mask, other=float("-inf"))
    m = tl.max(lse, axis=0)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    w = tl.exp(lse - m_safe)  # 0 for empty slots
    denom = tl.sum(w, axis=0)
    o = tl.load(ws_out_ptr + idx[:, None] * HEAD_DIM + offs_d[None, :], mask=s_mask[:, None],
                other=0.0)
    o = tl.sum(tl.where(w[:, None] > 0, o * w[:, None], 0.0), axis=0)
    o = o / tl.where(denom > 0, denom, 1.0)
    tl.store(out_ptr + row * stride_ob + head * stride_oh + offs_d, o.to(out_ptr.dtype.element_ty))


@triton.jit
def _merge_two_kernel(
    out_a_ptr, lse_a_ptr, out_b_ptr, lse_b_ptr, out_ptr, lse_ptr, H,
    stride_an, stride_ah, stride_bn, stride_bh, stride_on, stride_oh,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """One (n, h) of merge_attention_states; lse inputs/outputs contiguous [N, H] fp32."""
    pid = tl.program_id(0)
    n = pid // H
    h = pid % H
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < HEAD_DIM
    lse_a = tl.load(lse_a_ptr + pid)
    lse_b = tl.load(lse_b_ptr + pid)
    m = tl.maximum(lse_a, lse_b)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    w_a = tl.exp(lse_a - m_safe)
    w_b = tl.exp(lse_b - m_safe)
    denom = w_a + w_b
    denom_safe = tl.where(denom > 0, denom, 1.0)
    o_a = tl.load(out_a_ptr + n * stride_an + h * stride_ah + offs_d, mask=d_mask, other=0.0)
    o_b = tl.load(out_b_ptr + n * stride_bn + h * stride_bh + offs_d, mask=d_mask, other=0.0)
    o = tl.where(w_a > 0, o_a.to(tl.float32) * (w_a / denom_safe), 0.0)
    o += tl.where(w_b > 0, o_b.to(tl.float32) * (w_b / denom_safe), 0.0)
    tl.store(out_ptr + n * stride_on + h * stride_oh + offs_d, o.to(out_ptr.dtype.element_ty),
             mask=d_mask)
    tl.store(lse_ptr + pid, tl.where(denom > 0, m_safe + tl.log(denom_safe), float("-inf")))
