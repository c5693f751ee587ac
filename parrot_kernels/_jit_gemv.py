"""Triton kernels of the small-batch linear layer (decode at batch 1-64): y = x @ W^T.

Imported lazily by ``gemv.py`` on the first launch (``@triton.jit`` reads ``TRITON_INTERPRET``
at decoration). In both kernels each program owns BLOCK_N output columns for every row of x
and streams its BLOCK_N rows of W once, in BLOCK_K slices: at these batch sizes the layer is
a pure weight read, so all that matters is keeping enough bytes of W in flight on every SM.
``_gemv_kernel`` (1-4 rows) accumulates the products elementwise in fp32 and reduces once at
the end (no shuffle per slice); ``_skinny_dot_kernel`` (2-64 rows) runs them on the tensor
cores.
"""
import triton
import triton.language as tl


@triton.jit
def _x_slice(row_ptr, ks, K, EVEN_K: tl.constexpr):
    """One row of x over the slice ks, as fp32 (zeros past K)."""
    if EVEN_K:
        x = tl.load(row_ptr + ks)
    else:
        x = tl.load(row_ptr + ks, mask=ks < K, other=0.0)
    return x.to(tl.float32)


@triton.jit
def _gemv_kernel(x_ptr, w_ptr, y_ptr, N, K, stride_x, stride_w, stride_y,
                 ROWS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 EVEN_K: tl.constexpr):
    pid = tl.program_id(0)
    cols = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    offs_k = tl.arange(0, BLOCK_K)
    w_rows = w_ptr + cols.to(tl.int64)[:, None] * stride_w
    acc0 = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    acc1 = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    acc2 = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    acc3 = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + offs_k
        if EVEN_K:
            w = tl.load(w_rows + ks[None, :], mask=col_mask[:, None], other=0.0)
        else:
            w = tl.load(w_rows + ks[None, :], mask=col_mask[:, None] & (ks < K)[None, :],
                        other=0.0)
        w = w.to(tl.float32)
        # one accumulator per row of x (ROWS is a constexpr: the unused ones compile away)
        acc0 += w * _x_slice(x_ptr, ks, K, EVEN_K)[None, :]
        if ROWS > 1:
            acc1 += w * _x_slice(x_ptr + stride_x, ks, K, EVEN_K)[None, :]
        if ROWS > 2:
            acc2 += w * _x_slice(x_ptr + 2 * stride_x, ks, K, EVEN_K)[None, :]
        if ROWS > 3:
            acc3 += w * _x_slice(x_ptr + 3 * stride_x, ks, K, EVEN_K)[None, :]
    out_ty = y_ptr.dtype.element_ty
    tl.store(y_ptr + cols, tl.sum(acc0, axis=1).to(out_ty), mask=col_mask)
    if ROWS > 1:
        tl.store(y_ptr + stride_y + cols, tl.sum(acc1, axis=1).to(out_ty), mask=col_mask)
    if ROWS > 2:
        tl.store(y_ptr + 2 * stride_y + cols, tl.sum(acc2, axis=1).to(out_ty), mask=col_mask)
    if ROWS > 3:
        tl.store(y_ptr + 3 * stride_y + cols, tl.sum(acc3, axis=1).to(out_ty), mask=col_mask)


# T (the row count) is not specialised on (==1, %16): one compiled kernel per padding serves
# every row count up to it, so the graph buckets compiled at start-up cover eager steps too.
@triton.jit(do_not_specialize=["T"])
def _skinny_dot_kernel(x_ptr, w_ptr, y_ptr, T, N, K, stride_x, stride_w, stride_y,
                       ROWS_PAD: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                       EVEN_N: tl.constexpr, EVEN_K: tl.constexpr, IEEE: tl.constexpr):
    """y = x @ W^T for up to ROWS_PAD rows of x on the tensor cores, W as the *left* operand:
    each program computes acc[BLOCK_N, ROWS_PAD] = W[cols, :] @ x^T, so the MMA's M dimension
    is the weight's rows (no MMA rows wasted on padding x up to 16) and the accumulator stays
    one small tile whatever the row count; the loop is a stream of W slices."""
    pid = tl.program_id(0)
    cols = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    rows = tl.arange(0, ROWS_PAD)
    row_mask = rows < T
    offs_k = tl.arange(0, BLOCK_K)
    w_ptrs = w_ptr + cols.to(tl.int64)[:, None] * stride_w + offs_k[None, :]
    xt_ptrs = x_ptr + rows[None, :] * stride_x + offs_k[:, None]        # x^T: [BLOCK_K, ROWS]
    acc = tl.zeros([BLOCK_N, ROWS_PAD], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        if EVEN_K:
            xt = tl.load(xt_ptrs, mask=row_mask[None, :], other=0.0)
            if EVEN_N:
                w = tl.load(w_ptrs, eviction_policy="evict_first")
            else:
                w = tl.load(w_ptrs, mask=col_mask[:, None], other=0.0,
                            eviction_policy="evict_first")
        else:
            k_mask = (k0 + offs_k) < K
            xt = tl.load(xt_ptrs, mask=row_mask[None, :] & k_mask[:, None], other=0.0)
            w = tl.load(w_ptrs, mask=col_mask[:, None] & k_mask[None, :], other=0.0,
                        eviction_policy="evict_first")
        if IEEE:   # fp32 inputs: full precision, not TF32 (as x @ W^T in fp32 is)
            acc = tl.dot(w, xt, acc, input_precision="ieee")
        else:
            acc = tl.dot(w, xt, acc)
        w_ptrs += BLOCK_K
        xt_ptrs += BLOCK_K
    y_ptrs = y_ptr + rows[None, :] * stride_y + cols[:, None]
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=col_mask[:, None] & row_mask[None, :])
