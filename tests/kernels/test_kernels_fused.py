"""The fused layer ops (add + RMSNorm, RoPE + KV write, SiLU * up) against their PyTorch
references: the Triton interpreter on CPU (fp32, fp16), compiled kernels on CUDA (bf16)."""
import pytest
import torch

from parrot_kernels import (add_rms_norm, reference_add_rms_norm, reference_rope_kv_write,
                            reference_silu_mul, rope_kv_write, silu_mul)

DEV = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if DEV == "cuda" else [])
TOL = {torch.float32: 1e-6, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


class Rel(float):
    """A relative error that says, when an assertion on it fails, how the values differ."""

    def __new__(cls, a: torch.Tensor, b: torch.Tensor) -> "Rel":
        a, b = a.double(), b.double()
        assert not torch.isnan(a).any()
        err = super().__new__(cls, ((a - b).norm() / b.norm().clamp_min(1e-30)).item())
        err.detail = (f"max |diff| {(a - b).abs().max().item():.3g}, "
                      f"{(a != b).sum().item()}/{a.numel()} differ")
        return err

    def __repr__(self) -> str:
        return f"{float(self):.3g} ({self.detail})"


rel = Rel


def randn(*shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype=dtype, device=DEV)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,hidden", [(1, 64), (5, 96), (3, 4096)])
@pytest.mark.parametrize("with_delta", [True, False])
def test_add_rms_norm(dtype, rows, hidden, with_delta):
    x, w = randn(rows, hidden, dtype=dtype, seed=rows), randn(hidden, dtype=dtype, seed=7)
    delta = randn(rows, hidden, dtype=dtype, seed=hidden) if with_delta else None
    x_ref = x.clone()
    ref = reference_add_rms_norm(x_ref, delta, w, 1e-5)
    out = add_rms_norm(x, delta, w, 1e-5)
    assert rel(x, x_ref) <= TOL[dtype] / 8          # the residual sum, written in place
    assert rel(out, ref) <= TOL[dtype]


def test_add_rms_norm_updates_residual_in_place():
    x = randn(2, 64, dtype=torch.float32, seed=1)
    delta = randn(2, 64, dtype=torch.float32, seed=2)
    expected = x + delta
    add_rms_norm(x, delta, torch.ones(64, device=DEV), 1e-6)
    assert torch.allclose(x, expected)


def make_rope_inputs(t, hq, hkv, d, dtype, seed, num_blocks=6, block_size=4):
    qkv = randn(t, (hq + 2 * hkv) * d, dtype=dtype, seed=seed)
    angles = torch.rand(32, d // 2, generator=torch.Generator().manual_seed(seed)) * 6
    emb = torch.cat([angles, angles], dim=-1)
    cos, sin = emb.cos().to(dtype=dtype, device=DEV), emb.sin().to(dtype=dtype, device=DEV)
    perm = torch.randperm(num_blocks * block_size, generator=torch.Generator().manual_seed(seed))
    slots = perm[:t].to(DEV)
    positions = torch.randint(0, 32, (t,), generator=torch.Generator().manual_seed(seed + 1))
    cache = torch.full((2, num_blocks, block_size, hkv, d), float("nan"), dtype=dtype,
                       device=DEV)
    return qkv, cos, sin, positions.to(DEV), slots, cache


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("t,hq,hkv,d", [(1, 4, 2, 16), (7, 4, 4, 32), (3, 32, 8, 128),
                                        (2, 12, 4, 16)])  # 20 heads: a part-empty block
def test_rope_kv_write(dtype, t, hq, hkv, d):
    qkv, cos, sin, positions, slots, cache = make_rope_inputs(t, hq, hkv, d, dtype, seed=t + d)
    qkv_ref, cache_ref = qkv.clone(), cache.clone()
    q_ref, k_ref, v_ref = reference_rope_kv_write(qkv_ref, cos, sin, positions, slots,
                                                  cache_ref[0], cache_ref[1], hq, hkv)
    q, k, v = rope_kv_write(qkv, cos, sin, positions, slots, cache[0], cache[1], hq, hkv)
    assert q.shape == (t, hq, d) and k.shape == v.shape == (t, hkv, d)
    # Compiled (GPU), the rotation's sum of products may round once where PyTorch rounds each
    # product (H200, fp16/bf16: ~25% of q/k values 1 ulp apart, rel ~3e-4 / 2e-3); v is a copy.
    for got, want in ((q, q_ref), (k, k_ref)):
        assert rel(got, want) <= TOL[dtype] / 2
    assert torch.equal(v, v_ref)
    written = cache.view(2, -1, hkv, d)[:, slots]
    assert rel(written, cache_ref.view(2, -1, hkv, d)[:, slots]) <= TOL[dtype] / 2
    assert torch.equal(written[1], cache_ref.view(2, -1, hkv, d)[1, slots])
    untouched = torch.ones(cache.view(2, -1, hkv, d).shape[1], dtype=torch.bool)
    untouched[slots.cpu()] = False
    assert torch.isnan(cache.view(2, -1, hkv, d)[:, untouched.to(DEV)]).all()


def test_rope_rotates_like_the_model():
    """The kernel against the model's own apply_rope, not only its reference twin."""
    from parrot.engines.builtin.llama.rope import apply_rope

    qkv, cos, sin, positions, slots, cache = make_rope_inputs(5, 4, 2, 16, torch.float32, seed=3)
    heads = qkv.view(5, 8, 16)
    expected = apply_rope(heads[:, :6].clone(), cos[positions], sin[positions])
    q, k, _ = rope_kv_write(qkv.clone(), cos, sin, positions, slots, cache[0], cache[1], 4, 2)
    assert rel(torch.cat([q, k], dim=1), expected) < 1e-6


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("t,inter", [(1, 64), (4, 1000), (2, 11008)])
def test_silu_mul(dtype, t, inter):
    gu = randn(t, 2 * inter, dtype=dtype, seed=inter)
    assert rel(silu_mul(gu), reference_silu_mul(gu)) <= TOL[dtype] / 4


def test_rejects_bad_shapes():
    x = randn(4, 8, dtype=torch.float32, seed=0)
    with pytest.raises(ValueError):
        add_rms_norm(x.t(), None, torch.ones(4, device=DEV), 1e-6)
    qkv, cos, sin, positions, slots, cache = make_rope_inputs(2, 4, 2, 16, torch.float32, 0)
    with pytest.raises(ValueError, match="qkv width"):
        rope_kv_write(qkv, cos, sin, positions, slots, cache[0], cache[1], 3, 2)
