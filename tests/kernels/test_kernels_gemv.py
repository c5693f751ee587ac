"""The small-batch linear kernels against x @ W^T: the Triton interpreter on CPU (fp32, fp16),
compiled on CUDA (bf16 too). Tiles that do not divide N or K exercise the masks."""
import pytest
import torch

from parrot_kernels.gemv import (MAX_ELEMENTWISE_ROWS, MAX_GEMV_ROWS, DotTuning, GemvTuning,
                                 small_batch_linear, tuning_for)

DEV = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if DEV == "cuda" else [])
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def randn(*shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype=dtype, device=DEV)


ELEMENTWISE = [(GemvTuning, rows, shape) for rows in (1, 2, 3, 4)
               for shape in [(40, 64, (8, 32)), (33, 100, (8, 32)), (16, 512, (16, 128)),
                             (7, 96, (4, 64))]]
TENSOR_CORE = [(DotTuning, rows, shape) for rows in (2, 5, 16, 17, 64)
               for shape in [(64, 128, (16, 32)), (40, 100, (16, 32)), (96, 256, (32, 64)),
                             (33, 64, (32, 32))]]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind,rows,shape", ELEMENTWISE + TENSOR_CORE)
def test_matches_matmul(dtype, kind, rows, shape):
    n, k, (block_n, block_k) = shape
    x, w = randn(rows, k, dtype=dtype, seed=rows), randn(n, k, dtype=dtype, seed=n + k)
    y = small_batch_linear(x, w, tuning=kind(block_n=block_n, block_k=block_k))
    ref = x.double() @ w.double().T
    assert y.shape == (rows, n) and y.dtype == dtype
    err = ((y.double() - ref).norm() / ref.norm()).item()
    assert err < TOL[dtype], err


def test_default_kernel_by_rows():
    """One row takes the elementwise kernel's tile, more rows the tensor-core kernel's; both
    match x @ W^T through the default choice."""
    assert isinstance(tuning_for(4096, 4096), GemvTuning)
    assert isinstance(tuning_for(4096, 4096, rows=2), DotTuning)
    w = randn(48, 64, dtype=torch.float32, seed=3)
    for rows in (1, 3, MAX_GEMV_ROWS):
        x = randn(rows, 64, dtype=torch.float32, seed=rows)
        torch.testing.assert_close(small_batch_linear(x, w), x @ w.T, rtol=1e-5, atol=1e-5)


def test_writes_into_out_rows():
    x, w = randn(2, 64, dtype=torch.float32, seed=1), randn(24, 64, dtype=torch.float32, seed=2)
    out = torch.full((2, 24), float("nan"), device=DEV)
    got = small_batch_linear(x, w, out=out, tuning=GemvTuning(block_n=8, block_k=32))
    assert got.data_ptr() == out.data_ptr()
    torch.testing.assert_close(out, x @ w.T, rtol=1e-5, atol=1e-5)


def test_rejects_bad_shapes():
    w = torch.zeros(8, 16, device=DEV)
    with pytest.raises(ValueError, match="at most"):
        small_batch_linear(torch.zeros(MAX_GEMV_ROWS + 1, 16, device=DEV), w)
    with pytest.raises(ValueError, match=r"\[T, K\]"):
        small_batch_linear(torch.zeros(1, 15, device=DEV), w)
    with pytest.raises(ValueError, match="contiguous"):
        small_batch_linear(torch.zeros(16, 2, device=DEV).T[:1], w)
    with pytest.raises(ValueError, match="GemvTuning"):
        small_batch_linear(torch.zeros(MAX_ELEMENTWISE_ROWS + 1, 16, device=DEV), w,
                           tuning=GemvTuning())
    with pytest.raises(ValueError, match=">= 16"):
        small_batch_linear(torch.zeros(2, 16, device=DEV), w, tuning=DotTuning(block_n=8))
