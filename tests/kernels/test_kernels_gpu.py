"""bf16 on CUDA: larger shapes, every GQA ratio, both strategies, CUDA-graph capture."""
import pytest
import torch

from parrot_kernels import (KernelTuning, paged_decode_attention,
                            reference_shared_prefix_decode_attention,
                            shared_prefix_decode_attention, shared_prefix_decode_workspace_numel)

from .factories import make_shared_batch, poisoned_like, rel_err

pytestmark = pytest.mark.gpu
BF16_TOL = 1.5e-2


def _batch(gqa, head_dim, block_size, seed, device="cuda"):
    gen = torch.Generator().manual_seed(seed)
    sizes = [1, 7, 16]
    suffix = torch.randint(0, 300, (sum(sizes),), generator=gen).tolist()
    suffix[0], suffix[3] = 1, 0
    return make_shared_batch(group_sizes=sizes, prefix_blocks=[3, 0, 1024 // block_size],
                             suffix_lens=suffix, num_kv_heads=32 // gqa, gqa=gqa,
                             head_dim=head_dim, block_size=block_size, dtype=torch.bfloat16,
                             device=device, seed=seed)


@pytest.mark.parametrize("gqa", [1, 3, 4, 8])
@pytest.mark.parametrize("head_dim,block_size", [(128, 16), (64, 32)])
def test_bf16_all_paths(gqa, head_dim, block_size):
    b = _batch(gqa if gqa != 3 else 4, head_dim, block_size, seed=gqa + head_dim)
    if gqa == 3:  # 24 query heads on 8 kv heads
        b.q = torch.randn(b.q.shape[0], 24, head_dim, device="cuda").bfloat16()
    ref = reference_shared_prefix_decode_attention(*b.shared_args())
    for strategy in ("cascade", "per_row", "auto"):
        out = poisoned_like(b.q)
        shared_prefix_decode_attention(*b.shared_args(), out=out, strategy=strategy)
        assert rel_err(out, ref) < BF16_TOL, strategy
    for tuning in (None, KernelTuning(split_tokens=256)):
        out = poisoned_like(b.q)
        paged_decode_attention(*b.paged_args(), out=out, tuning=tuning)
        assert rel_err(out, ref) < BF16_TOL


def test_cuda_graph_capture_and_replay():
    b = _batch(4, 128, 16, seed=9)
    args = b.shared_args()
    numel = shared_prefix_decode_workspace_numel(b.q, b.k_cache, b.group_indptr,
                                                 b.prefix_block_tables, b.suffix_block_tables)
    ws = torch.empty(numel, dtype=torch.float32, device="cuda")
    out = poisoned_like(b.q)
    shared_prefix_decode_attention(*args, out=out, workspace=ws)  # compile outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        shared_prefix_decode_attention(*args, out=out, workspace=ws)
    b.q.copy_(torch.randn_like(b.q))  # new queries and lengths, same buffers
    b.suffix_lens.copy_(torch.clamp(b.suffix_lens - 7, min=0))
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert rel_err(out, reference_shared_prefix_decode_attention(*args)) < BF16_TOL


def test_the_pause_monitor_counts_a_real_compilation():
    """host_pauses.py hooks into this Triton's compile path: a kernel compiled afresh (its
    in-memory cache dropped, so Triton compiles or loads it from its disk cache, as a step
    meeting a new specialisation does) is counted once, by name; a cached launch is not."""
    from parrot.engines.builtin.observe.host_pauses import pause_monitor
    from parrot_kernels import jit
    from parrot_kernels import merge_attention_states

    monitor = pause_monitor(triton=True)
    assert monitor.watches_triton
    jit.merge_two_kernel.device_caches.clear()
    out = torch.randn(5, 4, 16, device="cuda", dtype=torch.float16)
    lse = torch.randn(5, 4, device="cuda")
    before = monitor.totals()
    merge_attention_states(out, lse, out.clone(), lse.clone())
    torch.cuda.synchronize()
    compiled = monitor.totals() - before
    assert compiled.jit_compiles == 1 and compiled.jit_s > 0
    assert monitor.recent_compiles[-1] == "_merge_two_kernel"
    merge_attention_states(out, lse, out.clone(), lse.clone())
    assert (monitor.totals() - before).jit_compiles == 1
