"""Temperature, top-k and top-p filtering and per-request generators."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from parrot.engines.builtin.sampler import (SampledRows, draw, filter_rows,  # noqa: E402
                                            make_generator, sample)
from parrot.sampling import SamplingParams  # noqa: E402


CPU = torch.device("cpu")


def filter_logits(logits, temperature: float, top_k: int, top_p: float):
    """One row [V] through the batched filter."""
    params = [SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)]
    return filter_rows(logits.unsqueeze(0),
                       SampledRows.upload([0], params, [0.0], logits.shape[-1], CPU))[0]


def test_top_k_and_top_p_cut_the_tail():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    assert filter_logits(logits, 1.0, 2, 1.0).tolist() == pytest.approx([0.625, 0.375, 0, 0])
    # top_p 0.8: 0.5 + 0.3 reaches it, the rest goes
    assert filter_logits(logits, 1.0, 0, 0.8).tolist() == pytest.approx([0.625, 0.375, 0, 0])
    assert filter_logits(logits, 1.0, 0, 0.1).tolist() == pytest.approx([1, 0, 0, 0])


def test_greedy_rows_and_seeded_rows():
    logits = torch.tensor([[0.0, 3.0, 1.0], [1.0, 1.0, 1.0]])
    greedy = SamplingParams()
    hot = SamplingParams(temperature=1.0, seed=3)
    first = sample(logits, [greedy, hot], [None, make_generator(3)])
    again = sample(logits, [greedy, hot], [None, make_generator(3)])
    assert first[0] == 1 and first == again


def one_row_filter(logits, temperature: float, top_k: int, top_p: float):
    """The per-row filter the batched one replaced (temperature, top-k, softmax, top-p)."""
    logits = logits / temperature
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        drop = (torch.cumsum(sorted_probs, dim=-1) - sorted_probs) >= top_p
        probs = torch.zeros_like(probs).scatter_(0, order, sorted_probs.masked_fill(drop, 0.0))
        probs = probs / probs.sum()
    return probs


def test_rows_are_filtered_together_as_each_alone():
    torch.manual_seed(1)
    vocab = 50
    logits = torch.randn(6, vocab) * 3
    cases = [(1.0, 0, 1.0), (0.5, 5, 1.0), (2.0, 0, 0.7), (0.7, 10, 0.9), (1.0, vocab, 1.0),
             (1.3, 1, 0.5)]
    params = [SamplingParams(temperature=t, top_k=k, top_p=p) for t, k, p in cases]
    batched = filter_rows(logits, SampledRows.upload(list(range(len(cases))), params,
                                                     [0.0] * len(cases), vocab, CPU))
    for row, (t, k, p) in enumerate(cases):
        assert torch.allclose(batched[row], one_row_filter(logits[row], t, k, p), atol=1e-6), row


def test_a_draw_follows_the_probabilities_and_never_picks_a_cut_token():
    probs = torch.tensor([[0.5, 0.0, 0.3, 0.2]])
    # inverse CDF: [0, .5) -> 0, [.5, .8) -> 2, [.8, 1) -> 3; token 1 (probability 0) never
    at = [0.0, 0.49, 0.5, 0.79, 0.8, 0.999999]
    assert draw(probs.expand(len(at), 4), torch.tensor(at)).tolist() == [0, 0, 2, 2, 3, 3]
    # a uniform that rounds to 1.0 takes the last token of any probability, never a cut one
    assert draw(torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]]),
                torch.tensor([1.0, 1.0])).tolist() == [1, 2]
    rng = torch.Generator().manual_seed(0)
    uniforms = torch.rand(40_000, generator=rng)
    counts = torch.bincount(draw(probs.expand(len(uniforms), 4), uniforms), minlength=4)
    assert counts[1] == 0
    assert (counts / len(uniforms)).tolist() == pytest.approx([0.5, 0.0, 0.3, 0.2], abs=0.01)


def test_a_seeded_request_samples_the_same_tokens_whoever_shares_its_batch():
    torch.manual_seed(2)
    vocab = 64
    mine = torch.randn(vocab)
    hot = SamplingParams(temperature=0.9, top_p=0.95, seed=7)
    alone = []
    gen = make_generator(7)
    for _ in range(20):
        alone.append(sample(mine.unsqueeze(0), [hot], [gen])[0])
    # the same request third in a batch of others, greedy and sampled, every step
    gen, others = make_generator(7), make_generator(99)
    shared = []
    for _ in range(20):
        batch = torch.stack([torch.randn(vocab), torch.randn(vocab), mine])
        params = [SamplingParams(), SamplingParams(temperature=1.0, top_k=5), hot]
        shared.append(sample(batch, params, [None, others, gen])[2])
    assert shared == alone and len(set(alone)) > 1


class _OnlyTokens:
    """A stand-in grammar state whose mask allows exactly `allowed` (the sampler sees only
    `cache.fill_masks`)."""

    def __init__(self, allowed: set[int], vocab: int) -> None:
        self.allowed, self.vocab, self.cache = allowed, vocab, self

    def fill_masks(self, grammars):
        import numpy as np

        words = (self.vocab + 31) // 32
        bits = np.zeros((len(grammars), words * 32), dtype=np.uint8)
        for i, g in enumerate(grammars):
            bits[i, sorted(g.allowed)] = 1
        packed = np.packbits(bits, axis=-1, bitorder="little").view(np.int32)
        return torch.from_numpy(packed.copy())


def test_constrained_rows_sample_only_allowed_tokens_and_free_rows_are_untouched():
    torch.manual_seed(0)
    vocab = 100
    logits = torch.randn(3, vocab)
    logits[:, 7] = 50.0                      # every row's favourite, allowed in none
    params = [SamplingParams(temperature=0), SamplingParams(temperature=1.0),
              SamplingParams(temperature=0)]
    grammars = [_OnlyTokens({3, 40, 99}, vocab), _OnlyTokens({64}, vocab), None]
    for seed in range(5):
        gens = [None, make_generator(seed), None]
        out = sample(logits, params, gens, grammars=grammars)
        assert out[0] == max((3, 40, 99), key=lambda t: logits[0, t].item())
        assert out[1] == 64 and out[2] == 7
