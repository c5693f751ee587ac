"""paged_decode_attention against the float64 reference (interpreter on CPU)."""
import pytest
import torch

from parrot_kernels import (KernelTuning, paged_decode_attention, paged_decode_workspace_numel,
                            reference_paged_decode_attention)

from .factories import make_shared_batch, poisoned_like, rel_err

TOL = {torch.float16: 4e-3, torch.float32: 1e-4, torch.bfloat16: 2e-2}

# (gqa, head_dim, block_size, dtype): every GQA ratio, head dim and block size at least once.
CONFIGS = [(1, 64, 16, torch.float16), (3, 128, 32, torch.float16),
           (4, 64, 32, torch.float32), (8, 128, 16, torch.float16)]


def _batch(gqa, head_dim, block_size, dtype, seed):
    # Ragged: 1 token, a partial page, exactly two pages, a long row, and an empty row.
    suffix = [1, 21, 2 * block_size, 3 * block_size + 5, 0]
    return make_shared_batch(group_sizes=[1] * 5, prefix_blocks=[0] * 5, suffix_lens=suffix,
                             num_kv_heads=2, gqa=gqa, head_dim=head_dim, block_size=block_size,
                             dtype=dtype, seed=seed)


@pytest.mark.parametrize("gqa,head_dim,block_size,dtype", CONFIGS)
@pytest.mark.parametrize("split_tokens", [None, 16])
def test_paged_matches_reference(gqa, head_dim, block_size, dtype, split_tokens):
    b = _batch(gqa, head_dim, block_size, dtype, seed=gqa * 7 + head_dim + (split_tokens or 0))
    args = b.paged_args()
    out = poisoned_like(b.q)
    paged_decode_attention(*args, out=out, tuning=KernelTuning(split_tokens=split_tokens))
    ref = reference_paged_decode_attention(*args)
    assert rel_err(out, ref) < TOL[dtype]
    assert torch.all(out[4] == 0), "a row with no keys attends nothing: zeros"


def test_paged_with_workspace_and_elementwise_path():
    b = _batch(4, 64, 16, torch.float16, seed=3)
    args = b.paged_args()
    tuning = KernelTuning(split_tokens=32, use_dot=False, block_n=16)
    ws = torch.full((paged_decode_workspace_numel(b.q, b.k_cache, args[3], tuning=tuning),),
                    float("nan"))
    assert ws.numel() > 0
    out = paged_decode_attention(*args, workspace=ws, tuning=tuning)
    assert rel_err(out, reference_paged_decode_attention(*args)) < TOL[torch.float16]


def test_paged_rejects_bad_inputs():
    b = _batch(1, 64, 16, torch.float16, seed=0)
    q, k, v, table, lens, scale = b.paged_args()
    with pytest.raises(ValueError, match="int32"):
        paged_decode_attention(q, k, v, table.long(), lens, scale)
    with pytest.raises(ValueError, match="dtypes"):
        paged_decode_attention(q.float(), k, v, table, lens, scale)
    with pytest.raises(ValueError, match="multiple"):
        paged_decode_attention(q[:, :1].expand(-1, 3, -1), k, v, table, lens, scale)
