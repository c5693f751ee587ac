"""paged_prefill_attention against the float64 reference (interpreter on CPU): fresh chunks,
chunks continuing a cached context and forks of shared pages, in one launch."""
import pytest
import torch

from parrot_kernels import (PrefillTuning, paged_prefill_attention, plan_prefill,
                            reference_paged_prefill_attention)
from parrot_kernels.prefill import LONG_CHUNKS, SHORT_CHUNKS, key_splits

from .factories import rel_err

TOL = {torch.float16: 4e-3, torch.float32: 1e-4, torch.bfloat16: 2e-2}
SMALL = PrefillTuning(block_m=16, block_n=16)   # several tiles and key blocks per chunk


def make_step(contexts, *, num_kv_heads, gqa, head_dim, block_size, dtype, decode_rows=2,
              seed=0, device="cpu"):
    """contexts[c] = (pos_start, n, shared_with): chunk c holds n new tokens at positions
    pos_start.. of a context; shared_with = an earlier chunk whose first pos_start // block_size
    pages it forks (its pages), or None. The flat q has `decode_rows` rows of other work first.
    Unused pages are NaN: a kernel that reads one fails."""
    gen = torch.Generator().manual_seed(seed)
    pages_needed = [-(-(pos + n) // block_size) for pos, n, _ in contexts]
    num_blocks = sum(pages_needed) + 4
    perm = torch.randperm(num_blocks, generator=gen).tolist()
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.full(shape, float("nan"), dtype=dtype)
    v_cache = torch.full(shape, float("nan"), dtype=dtype)
    tables, used = [], 0
    for (pos, _, shared), need in zip(contexts, pages_needed):
        forked = tables[shared][:pos // block_size] if shared is not None else []
        own = perm[used:used + need - len(forked)]
        used += len(own)
        tables.append(forked + own)
        for page in own:
            k_cache[page] = torch.randn(shape[1:], generator=gen).to(dtype)
            v_cache[page] = torch.randn(shape[1:], generator=gen).to(dtype)
    width = max(len(t) for t in tables) + 1
    garbage = perm[-1]
    table = torch.tensor([t + [garbage] * (width - len(t)) for t in tables], dtype=torch.int32)
    chunks, row = [], decode_rows
    for pos, n, _ in contexts:
        chunks.append((row, n, pos))
        row += n
    q = torch.randn(row, num_kv_heads * gqa, head_dim, generator=gen).to(dtype)
    return (q.to(device), k_cache.to(device), v_cache.to(device), chunks, table.to(device),
            head_dim ** -0.5)


# (gqa, head_dim, block_size, dtype)
CONFIGS = [(1, 64, 16, torch.float16), (4, 32, 16, torch.float32), (2, 128, 32, torch.float16)]
# a fresh prompt of a partial tile, a context continued mid-page, a fork of the first
# context's full pages with a tail longer than a tile, a single new token
CONTEXTS = [(0, 37, None), (50, 20, None), (32, 40, 0), (9, 1, None)]


@pytest.mark.parametrize("gqa,head_dim,block_size,dtype", CONFIGS)
def test_prefill_matches_reference(gqa, head_dim, block_size, dtype):
    q, k, v, chunks, table, scale = make_step(CONTEXTS, num_kv_heads=2, gqa=gqa,
                                              head_dim=head_dim, block_size=block_size,
                                              dtype=dtype, seed=gqa + head_dim)
    out = torch.full_like(q, float("nan"))
    paged_prefill_attention(q, k, v, plan_prefill(chunks, table, SMALL), scale, out=out)
    ref = reference_paged_prefill_attention(q, k, v, chunks, table, scale)
    rows = slice(chunks[0][0], None)
    assert rel_err(out[rows], ref[rows]) < TOL[dtype]
    assert torch.isnan(out[:chunks[0][0]]).all(), "rows in no chunk are left alone"


def test_default_tile_and_a_first_row_that_sees_only_itself():
    q, k, v, chunks, table, scale = make_step([(0, 70, None), (16, 5, 0)], num_kv_heads=1,
                                              gqa=2, head_dim=64, block_size=16,
                                              dtype=torch.float32, decode_rows=0, seed=5)
    out = paged_prefill_attention(q, k, v, plan_prefill(chunks, table), scale)
    ref = reference_paged_prefill_attention(q, k, v, chunks, table, scale)
    assert rel_err(out, ref) < TOL[torch.float32]
    # row 0 of a fresh prompt attends only key 0: its output is value 0 of its kv head
    kv0 = v[table[0, 0].long(), 0]                                       # [Hkv, D]
    assert torch.allclose(out[0], kv0.repeat_interleave(2, dim=0), atol=1e-5)


def test_plan_puts_the_longest_tiles_first_in_one_copy():
    table = torch.zeros(2, 8, dtype=torch.int32)
    plan = plan_prefill([(0, 40, 0), (40, 10, 100)], table, SMALL)
    # tiles (end position): chunk 0 rows 0-15 (16), 16-31 (32), 32-39 (40); chunk 1 (110)
    assert plan.tile_chunk.tolist() == [1, 0, 0, 0]
    assert plan.tile_m.tolist() == [0, 32, 16, 0]
    assert plan.chunk_rows.tolist() == [0, 40] and plan.chunk_pos.tolist() == [0, 100]
    assert plan.chunk_lens.tolist() == [40, 10] and plan.num_tiles == 4


def test_prefill_rejects_bad_inputs():
    q, k, v, chunks, table, scale = make_step([(0, 20, None)], num_kv_heads=2, gqa=1,
                                              head_dim=64, block_size=16,
                                              dtype=torch.float16)
    with pytest.raises(ValueError, match="block_tables"):
        plan_prefill(chunks + chunks, table)
    with pytest.raises(ValueError, match="int32"):
        plan_prefill(chunks, table.long())
    with pytest.raises(ValueError, match="chunk 0"):
        plan_prefill([(0, 0, 0)], table)
    with pytest.raises(ValueError, match="past q"):
        paged_prefill_attention(q[:10], k, v, plan_prefill(chunks, table), scale)
    with pytest.raises(ValueError, match="dtypes"):
        paged_prefill_attention(q.float(), k, v, plan_prefill(chunks, table), scale)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_prefill_on_gpu(dtype):
    q, k, v, chunks, table, scale = make_step(CONTEXTS + [(0, 300, None), (256, 130, 4)],
                                              num_kv_heads=4, gqa=2, head_dim=128,
                                              block_size=16, dtype=dtype, device="cuda")
    out = paged_prefill_attention(q, k, v, plan_prefill(chunks, table), scale)
    ref = reference_paged_prefill_attention(q, k, v, chunks, table, scale)
    rows = slice(chunks[0][0], None)
    assert rel_err(out[rows], ref[rows]) < TOL[dtype]


@pytest.mark.gpu
@pytest.mark.parametrize("splits", [None, 3])
def test_key_ranges_on_gpu(splits):
    """The compiled split kernel and its merge: ranges chosen by the rule (a short Fill over
    a long context, as a reviser's) and forced, with two layers reusing one plan."""
    q, k, v, chunks, table, scale = make_step([(0, 2000, None), (1984, 40, 0)],
                                              num_kv_heads=32, gqa=1, head_dim=128,
                                              block_size=16, dtype=torch.bfloat16,
                                              device="cuda")
    chunks = chunks[1:]                      # the Fill alone: one tile reads 2,024 keys
    plan = plan_prefill(chunks, table[1:], PrefillTuning(kv_splits=splits))
    assert plan.launch(32, 128, q.device)[0] > 1
    want = reference_paged_prefill_attention(q, k, v, chunks, table[1:], scale)
    rows = slice(chunks[0][0], None)
    for _ in range(2):
        out = paged_prefill_attention(q, k, v, plan, scale)
        assert rel_err(out[rows], want[rows]) < TOL[torch.bfloat16]


@pytest.mark.parametrize("num_chunks", [1, 2, 3, 5])
def test_plan_tensors_are_16_byte_aligned_whatever_the_chunk_count(num_chunks):
    """Triton specialises pointers on 16-byte alignment: unaligned metadata would compile a
    new kernel variant per alignment mix while serving. Values are the plan's chunks."""
    table = torch.arange(4 * num_chunks + 1, dtype=torch.int32)[1:].view(num_chunks, 4)
    assert table.data_ptr() % 16 == 4                          # an unaligned view of a table
    chunks = [(7 * c, 3 + c, 5 * c) for c in range(num_chunks)]
    plan = plan_prefill(chunks, table, PrefillTuning(block_m=2, block_n=16))
    tensors = (plan.chunk_rows, plan.chunk_pos, plan.chunk_lens, plan.tile_chunk, plan.tile_m,
               plan.block_tables)
    assert all(t.data_ptr() % 16 == 0 for t in tensors)
    assert plan.chunk_rows.tolist() == [r for r, _, _ in chunks]
    assert plan.chunk_pos.tolist() == [p for _, _, p in chunks]
    assert plan.chunk_lens.tolist() == [n for _, n, _ in chunks]
    assert plan.num_tiles == sum(-(-n // 2) for _, n, _ in chunks)
    assert torch.equal(plan.block_tables, table)


def test_the_plan_takes_the_long_chunk_tile_past_the_short_tiles_rows():
    table = torch.zeros(2, 1, dtype=torch.int32)
    short, long_ = SHORT_CHUNKS.block_m, SHORT_CHUNKS.block_m + 1
    assert plan_prefill([(0, short, 0), (short, short, 9)], table).tuning == SHORT_CHUNKS
    assert plan_prefill([(0, long_, 0), (long_, short, 0)], table).tuning == LONG_CHUNKS
    assert LONG_CHUNKS.block_m > SHORT_CHUNKS.block_m
    assert plan_prefill([(0, long_, 0), (long_, short, 0)], table, SMALL).tuning == SMALL


@pytest.mark.parametrize("splits", [2, 3, 7])
@pytest.mark.parametrize("gqa,head_dim,block_size,dtype", CONFIGS)
def test_keys_split_into_ranges_match_reference(gqa, head_dim, block_size, dtype, splits):
    """A long context read by few tiles is cut into key ranges merged by their LSE; ranges a
    row sees no key of (past its position, or past a short tile's end) weigh nothing."""
    # (100, 40): a tile whose rows straddle a range's start (3 ranges of 112 keys), so some
    # of its rows see none of that range's keys
    q, k, v, chunks, table, scale = make_step(CONTEXTS + [(100, 40, None), (300, 5, None)],
                                              num_kv_heads=2,
                                              gqa=gqa, head_dim=head_dim,
                                              block_size=block_size, dtype=dtype)
    plan = plan_prefill(chunks, table, PrefillTuning(block_m=16, block_n=16, kv_splits=splits))
    assert key_splits(plan, q.shape[1], 132)[0] == splits
    out = torch.full_like(q, 7.0)
    paged_prefill_attention(q, k, v, plan, scale, out=out)
    want = reference_paged_prefill_attention(q, k, v, chunks, table, scale)
    rows = torch.cat([torch.arange(r, r + n) for r, n, _ in chunks])
    assert rel_err(out[rows], want[rows]) < TOL[dtype]
    assert torch.equal(out[:2], torch.full_like(out[:2], 7.0))   # other rows left alone


def test_keys_are_split_only_when_few_tiles_read_a_long_context():
    table = torch.zeros((32, 300), dtype=torch.int32)
    # one 60-row Fill after a 3,300-token prompt: 1 tile x 32 heads on 132 SMs
    one = plan_prefill([(0, 60, 3300)], table[:1])
    assert one.max_keys == 3360
    splits, length = key_splits(one, 32, 132)
    assert (splits, length) == (11, 320) and (splits - 1) * length < 3360 <= splits * length
    # 32 such Fills: 32 tiles x 32 heads already fill the GPU
    many = plan_prefill([(60 * c, 60, 3300) for c in range(32)], table)
    assert key_splits(many, 32, 132) == (1, 0)
    # one 1,024-token chunk over 3,000: 8 tiles of 128 rows x 32 heads, more programs than
    # SMs: whole (measured on an H200: split in 3 it was slower, 216 -> 278 us)
    chain = plan_prefill([(0, 1024, 3000)], table[:1])
    assert chain.num_tiles * 32 == 256 and key_splits(chain, 32, 132) == (1, 0)
    # a short context is not worth a range of its own
    assert key_splits(plan_prefill([(0, 60, 100)], table[:1]), 32, 132) == (1, 0)
    assert key_splits(plan_prefill([(0, 60, 3300)], table[:1],
                                   PrefillTuning(kv_splits=1)), 32, 132) == (1, 0)


def test_a_plan_decides_its_key_ranges_and_workspace_once_for_every_layer():
    plan = plan_prefill([(0, 60, 3300)], torch.zeros((1, 300), dtype=torch.int32),
                        PrefillTuning(kv_splits=3))
    first = plan.launch(32, 128, torch.device("cpu"))
    splits, length, ws = first
    assert (splits, length) == key_splits(plan, 32, 4)
    assert ws is not None and ws.numel() == 3 * plan.num_tiles * 64 * 32 * 129
    assert plan.launch(32, 128, torch.device("cpu"))[2] is ws        # the next layer's
    whole = plan_prefill([(0, 60, 3300)], torch.zeros((1, 300), dtype=torch.int32),
                         PrefillTuning(kv_splits=1))
    assert whole.launch(32, 128, torch.device("cpu")) == (1, 0, None)
