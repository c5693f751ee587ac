"""shared_prefix_decode_attention against the float64 reference (interpreter on CPU)."""
import pytest
import torch

from parrot_kernels import (KernelTuning, reference_paged_decode_attention,
                            reference_shared_prefix_decode_attention,
                            shared_prefix_decode_attention, shared_prefix_decode_workspace_numel)

from .factories import make_shared_batch, poisoned_like, rel_err

TOL = {torch.float16: 4e-3, torch.float32: 1e-4, torch.bfloat16: 2e-2}
CONFIGS = [(1, 64, 16, torch.float16), (3, 128, 32, torch.float16),
           (4, 64, 32, torch.float32), (8, 128, 16, torch.float16)]
# Three groups: a lone row, a group with no prefix, a ragged group; suffixes of 0 and 1 tokens.
GROUPS = dict(group_sizes=[1, 2, 3], prefix_blocks=[2, 0, 3], suffix_lens=[0, 1, 19, 1, 0, 40])
# block_m=16 makes several row tiles per group (2 rows a tile at GQA 8), split_tokens=16
# several prefix and suffix splits: the multi-program paths run on small shapes (and the
# two-launch variant, CUDA-core rows; the default launches tiles and rows together).
SMALL_TILES = KernelTuning(split_tokens=16, block_m=16, block_n=16, fuse=False, use_dot=False)


def _run(batch, **kwargs):
    out = poisoned_like(batch.q)
    shared_prefix_decode_attention(*batch.shared_args(), out=out, **kwargs)
    return out


@pytest.mark.parametrize("gqa,head_dim,block_size,dtype", CONFIGS)
@pytest.mark.parametrize("strategy,tuning", [("cascade", None), ("cascade", SMALL_TILES),
                                             ("per_row", None)])
def test_shared_matches_reference(gqa, head_dim, block_size, dtype, strategy, tuning):
    b = make_shared_batch(**GROUPS, num_kv_heads=2 if gqa < 8 else 1, gqa=gqa,
                          head_dim=head_dim, block_size=block_size, dtype=dtype,
                          seed=gqa + head_dim + block_size + (tuning is None))
    out = _run(b, strategy=strategy, tuning=tuning)
    assert rel_err(out, reference_shared_prefix_decode_attention(*b.shared_args())) < TOL[dtype]


def test_reference_shared_equals_reference_paged_over_concatenated_tables():
    b = make_shared_batch(**GROUPS, num_kv_heads=2, gqa=2, head_dim=16, block_size=16,
                          dtype=torch.float32, seed=5)
    shared = reference_shared_prefix_decode_attention(*b.shared_args())
    assert torch.allclose(shared, reference_paged_decode_attention(*b.paged_args()))


def test_groups_of_one_and_auto_dispatch():
    b = make_shared_batch(group_sizes=[1] * 4, prefix_blocks=[1, 2, 0, 1],
                          suffix_lens=[3, 0, 16, 1], num_kv_heads=2, gqa=4, head_dim=64,
                          block_size=16, dtype=torch.float16, seed=11)
    ref = reference_shared_prefix_decode_attention(*b.shared_args())
    for strategy in ("auto", "cascade"):
        assert rel_err(_run(b, strategy=strategy), ref) < TOL[torch.float16]


def test_one_big_group_with_workspace():
    b = make_shared_batch(group_sizes=[6], prefix_blocks=[5], suffix_lens=[1, 2, 0, 9, 33, 1],
                          num_kv_heads=1, gqa=4, head_dim=64, block_size=32,
                          dtype=torch.float16, seed=2)
    tuning = KernelTuning(split_tokens=48, block_n=16)
    numel = shared_prefix_decode_workspace_numel(b.q, b.k_cache, b.group_indptr,
                                                 b.prefix_block_tables, b.suffix_block_tables,
                                                 strategy="cascade", tuning=tuning)
    ws = torch.full((numel + 7,), float("nan"))
    out = _run(b, strategy="cascade", tuning=tuning, workspace=ws)
    assert rel_err(out, reference_shared_prefix_decode_attention(*b.shared_args())) < 4e-3


def test_no_prefix_table_at_all():
    b = make_shared_batch(group_sizes=[2, 1], prefix_blocks=[0, 0], suffix_lens=[5, 17, 1],
                          num_kv_heads=2, gqa=3, head_dim=64, block_size=16,
                          dtype=torch.float16, seed=4)
    b.prefix_block_tables = b.prefix_block_tables[:, :0]
    out = _run(b)
    assert rel_err(out, reference_shared_prefix_decode_attention(*b.shared_args())) < 4e-3


def test_strategy_is_validated():
    b = make_shared_batch(group_sizes=[1], prefix_blocks=[1], suffix_lens=[1], num_kv_heads=1,
                          gqa=1, head_dim=16, block_size=16, dtype=torch.float32)
    with pytest.raises(ValueError, match="strategy"):
        shared_prefix_decode_attention(*b.shared_args(), strategy="fast")
