"""Triton kernels of the fused decode layer: residual add + RMSNorm, RoPE + KV-cache write,
SiLU(gate) * up.

Imported lazily by ``fused.py`` on the first launch (``@triton.jit`` reads
``TRITON_INTERPRET`` at decoration). Each kernel reproduces the rounding of the unfused
PyTorch ops it replaces (HF LLaMA's): intermediates that PyTorch stores in the model dtype are
cast to it here too, so on bf16 the fused path computes the same values, not just close ones.
No kernel takes a row count: the grid carries it, so a kernel compiles once per model shape
whatever the batch (Triton specialises integer arguments on their value mod 16).
"""
import triton
import triton.language as tl


@triton.jit
def _add_rms_norm_kernel(x_ptr, delta_ptr, w_ptr, out_ptr, eps, stride_x, stride_d, stride_o,
                         HIDDEN: tl.constexpr, BLOCK: tl.constexpr, HAS_DELTA: tl.constexpr):
    """One row: x += delta (stored, in x's dtype); out = w * (x * rsqrt(mean(x^2) + eps))."""
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < HIDDEN
    x = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0)
    if HAS_DELTA:
        d = tl.load(delta_ptr + row * stride_d + offs, mask=mask, other=0.0)
        x = (x.to(tl.float32) + d.to(tl.float32)).to(x_ptr.dtype.element_ty)
        tl.store(x_ptr + row * stride_x + offs, x, mask=mask)
    xf = x.to(tl.float32)
    var = tl.sum(xf * xf, axis=0) / HIDDEN
    normed = (xf * tl.math.rsqrt(var + eps)).to(out_ptr.dtype.element_ty)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + row * stride_o + offs,
             (w.to(tl.float32) * normed.to(tl.float32)).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rope_kv_write_kernel(qkv_ptr, cos_ptr, sin_ptr, pos_ptr, slot_ptr, k_cache_ptr,
                          v_cache_ptr, stride_t, stride_cos, stride_slot, stride_head,
                          HQ: tl.constexpr, HKV: tl.constexpr, HALF: tl.constexpr,
                          HEAD_BLOCK: tl.constexpr):
    """HEAD_BLOCK heads of one token of the fused projection [T, (HQ + 2 HKV) * D]: q and k
    heads are rotated in place (rotate_half layout); k and v heads are also stored at the
    token's slot of the paged caches (slot = block * block_size + offset; caches
    [slots, HKV, D] flat). A block of heads per program, not one head: at prefill sizes
    (thousands of tokens x 96 heads) one-head programs left the kernel ~10x off its bytes."""
    t = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1) * HEAD_BLOCK + tl.arange(0, HEAD_BLOCK)        # [HB]
    offs = tl.arange(0, HALF)                                              # [HALF]
    valid = head < HQ + 2 * HKV
    rotated = head < HQ + HKV
    is_k = rotated & (head >= HQ)
    is_v = valid & (head >= HQ + HKV)
    base = qkv_ptr + t * stride_t + head[:, None] * (2 * HALF) + offs[None, :]
    x1 = tl.load(base, mask=valid[:, None], other=0.0)
    x2 = tl.load(base + HALF, mask=valid[:, None], other=0.0)
    dtype = qkv_ptr.dtype.element_ty
    slot = tl.load(slot_ptr + t).to(tl.int64)
    pos = tl.load(pos_ptr + t).to(tl.int64)
    c = tl.load(cos_ptr + pos * stride_cos + offs).to(tl.float32)[None, :]
    s = tl.load(sin_ptr + pos * stride_cos + offs).to(tl.float32)[None, :]
    a1, a2 = x1.to(tl.float32), x2.to(tl.float32)
    # x * cos + rotate_half(x) * sin, each product rounded to the dtype like PyTorch's
    y1 = ((a1 * c).to(dtype).to(tl.float32) + (-a2 * s).to(dtype).to(tl.float32)).to(dtype)
    y2 = ((a2 * c).to(dtype).to(tl.float32) + (a1 * s).to(dtype).to(tl.float32)).to(dtype)
    rot = rotated[:, None]
    tl.store(base, y1, mask=rot)
    tl.store(base + HALF, y2, mask=rot)
    k_dst = (k_cache_ptr + slot * stride_slot + (head - HQ)[:, None] * stride_head
             + offs[None, :])
    tl.store(k_dst, y1, mask=is_k[:, None])
    tl.store(k_dst + HALF, y2, mask=is_k[:, None])
    v_dst = (v_cache_ptr + slot * stride_slot + (head - HQ - HKV)[:, None] * stride_head
             + offs[None, :])
    tl.store(v_dst, x1, mask=is_v[:, None])
    tl.store(v_dst + HALF, x2, mask=is_v[:, None])


@triton.jit
def _silu_mul_kernel(gu_ptr, out_ptr, stride_gu, stride_o, INTER: tl.constexpr,
                     BLOCK: tl.constexpr):
    """out[t, i] = silu(gate[t, i]) * up[t, i] with gate_up [T, 2 * INTER] = [gate | up]."""
    t = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < INTER
    g = tl.load(gu_ptr + t * stride_gu + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(gu_ptr + t * stride_gu + INTER + offs, mask=mask, other=0.0).to(tl.float32)
    dtype = out_ptr.dtype.element_ty
    act = (g / (1.0 + tl.exp(-g))).to(dtype).to(tl.float32)
    tl.store(out_ptr + t * stride_o + offs, (act * u).to(dtype), mask=mask)
