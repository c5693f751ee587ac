"""prefill_torch over a cached context (a continued or forked context's new tokens)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from torch.nn.attention.bias import CausalBias  # noqa: E402

from parrot.engines.builtin.llama.attention import (  # noqa: E402
    PrefillChunk, lower_right_causal_mask, prefill_torch)


def reference(q, k_all, v_all, pos_start, scale):
    """Each new row attends every key up to its own position (repeat kv heads for GQA)."""
    n, length = q.shape[0], k_all.shape[0]
    group = q.shape[1] // k_all.shape[1]
    k = k_all.repeat_interleave(group, dim=1).transpose(0, 1)
    v = v_all.repeat_interleave(group, dim=1).transpose(0, 1)
    scores = torch.einsum("hnd,hld->hnl", q.transpose(0, 1).double(), k.double()) * scale
    allowed = torch.arange(length)[None, :] <= torch.arange(pos_start, pos_start + n)[:, None]
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.einsum("hnl,hld->hnd", scores.softmax(-1), v.double()).transpose(0, 1)


@pytest.mark.parametrize("num_heads,num_kv_heads", [(4, 4), (6, 2)])
def test_new_rows_attend_the_cached_context_causally(num_heads, num_kv_heads):
    torch.manual_seed(0)
    block, pos_start, n, d = 4, 9, 5, 8
    length = pos_start + n
    k_cache = torch.randn(6, block, num_kv_heads, d)
    v_cache = torch.randn(6, block, num_kv_heads, d)
    table = torch.tensor([3, 0, 5, 1])                     # blocks of the context, in order
    q = torch.randn(n, num_heads, d)
    k_new, v_new = torch.randn(n, num_kv_heads, d), torch.randn(n, num_kv_heads, d)
    # the step writes the new rows' K/V into the cache before attending
    flat_k, flat_v = k_cache.view(-1, num_kv_heads, d), v_cache.view(-1, num_kv_heads, d)
    slots = torch.tensor([table[p // block] * block + p % block for p in range(pos_start, length)])
    flat_k[slots], flat_v[slots] = k_new, v_new
    out = prefill_torch(q, k_new, v_new, k_cache, v_cache, PrefillChunk(0, n, pos_start, table),
                        d ** -0.5)
    k_all = k_cache[table].flatten(0, 1)[:length]
    v_all = v_cache[table].flatten(0, 1)[:length]
    torch.testing.assert_close(out.double(), reference(q, k_all, v_all, pos_start, d ** -0.5),
                               rtol=1e-5, atol=1e-5)


def test_no_boolean_mask_reaches_sdpa_on_cuda():
    """A boolean mask is a new shape per chunk for SDPA, which on CUDA sends it to cuDNN's
    per-shape plan build (~50 ms each): the cached-context path passes a causal bias there;
    on the CPU the same mask as booleans (row i sees keys up to position length - n + i)."""
    bias = lower_right_causal_mask(3, 5, torch.device("cuda"))
    assert isinstance(bias, CausalBias)
    mask = lower_right_causal_mask(3, 5, torch.device("cpu"))
    assert mask.dtype == torch.bool and mask.tolist() == [
        [True, True, True, False, False],
        [True, True, True, True, False],
        [True, True, True, True, True]]
    q, k, v = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    torch.testing.assert_close(F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                               F.scaled_dot_product_attention(q, k, v, attn_mask=bias))


def test_a_cpu_prefill_over_a_cached_context_imports_no_dynamo():
    """The causal bias's module imports torch._dynamo (~1 s): on the CPU, where the bias is
    only the same mask, the first request that continues a context must not pay it."""
    code = (
        "import sys, torch\n"
        "from parrot.engines.builtin.llama.attention import PrefillChunk, prefill_torch\n"
        "k_cache = v_cache = torch.randn(2, 4, 2, 8)\n"
        "q, kv = torch.randn(3, 2, 8), torch.randn(3, 2, 8)\n"
        "prefill_torch(q, kv, kv, k_cache, v_cache, PrefillChunk(0, 3, 2, torch.tensor([1, 0])),"
        " 0.3)\n"
        "print('torch._dynamo' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, cwd=Path(__file__).resolve().parents[3])
    assert result.stdout.strip() == "False"


def test_prefill_on_cuda_never_takes_the_cudnn_backend():
    """cuDNN builds a plan per new sequence length (65 ms on an H200): prefill runs without it
    on CUDA, and leaves the process's SDPA settings as they were."""
    from parrot.engines.builtin.llama.attention import prefill_sdpa_backends

    before = torch.backends.cuda.cudnn_sdp_enabled()
    with prefill_sdpa_backends(torch.device("cuda")):
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.backends.cuda.flash_sdp_enabled()
        assert torch.backends.cuda.mem_efficient_sdp_enabled()
    assert torch.backends.cuda.cudnn_sdp_enabled() == before
    with prefill_sdpa_backends(torch.device("cpu")):   # the CPU's choice is left alone
        assert torch.backends.cuda.cudnn_sdp_enabled() == before
