"""merge_attention_states: the LSE convention, empty parts, and the reference."""
import math

import torch

from parrot_kernels import merge_attention_states, reference_merge_attention_states

from .factories import rel_err


def test_merge_equals_attention_over_the_union():
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(3, 4, 64, generator=gen, dtype=torch.float64)  # [N, H, D]
    k = torch.randn(3, 4, 10, 64, generator=gen, dtype=torch.float64)
    v = torch.randn(3, 4, 10, 64, generator=gen, dtype=torch.float64)
    scores = torch.einsum("nhd,nhjd->nhj", q, k) * 0.125

    def part(sl):
        lse = torch.logsumexp(scores[..., sl], -1)
        return torch.einsum("nhj,nhjd->nhd", torch.exp(scores[..., sl] - lse[..., None]),
                            v[:, :, sl]), lse

    (oa, la), (ob, lb), (o, lse) = part(slice(0, 4)), part(slice(4, 10)), part(slice(0, 10))
    out, out_lse = merge_attention_states(oa.float(), la.float(), ob.float(), lb.float())
    assert rel_err(out, o) < 1e-5
    assert torch.allclose(out_lse.double(), lse, atol=1e-5)


def test_merge_empty_parts_give_no_nan():
    oa = torch.randn(2, 3, 32)
    ob = torch.full((2, 3, 32), float("nan"))  # an empty part's output may be garbage
    la = torch.randn(2, 3)
    lb = torch.full((2, 3), -math.inf)
    la[1] = -math.inf  # row 1: both parts empty
    out, lse = merge_attention_states(oa, la, ob, lb)
    assert torch.equal(out[0], oa[0]) or rel_err(out[0], oa[0]) < 1e-6
    assert torch.equal(lse[0], la[0])
    assert torch.all(out[1] == 0) and torch.all(lse[1] == -math.inf)
    ref_out, ref_lse = reference_merge_attention_states(oa, la, ob, lb)
    assert torch.equal(ref_out.isnan(), out.isnan()) and not out.isnan().any()
    assert torch.allclose(ref_out, out, atol=1e-6) and torch.equal(ref_lse.isinf(), lse.isinf())


def test_merge_half_outputs_keep_dtype():
    oa, ob = torch.randn(4, 2, 16).half(), torch.randn(4, 2, 16).half()
    la, lb = torch.randn(4, 2), torch.randn(4, 2)
    out, lse = merge_attention_states(oa, la, ob, lb)
    ref_out, ref_lse = reference_merge_attention_states(oa, la, ob, lb)
    assert out.dtype == torch.float16 and rel_err(out, ref_out) < 2e-3
    assert torch.allclose(lse, ref_lse, atol=1e-5)
