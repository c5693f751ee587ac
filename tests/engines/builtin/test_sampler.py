"""Temperature, top-k and top-p filtering and per-request generators."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from parrot.engines.builtin.sampler import filter_logits, make_generator, sample  # noqa: E402
from parrot.sampling import SamplingParams  # noqa: E402


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
    first = sample(logits, [greedy, hot], [None, make_generator(3, torch.device("cpu"))])
    again = sample(logits, [greedy, hot], [None, make_generator(3, torch.device("cpu"))])
    assert first[0] == 1 and first == again


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
        gens = [None, make_generator(seed, torch.device("cpu")), None]
        out = sample(logits, params, gens, grammars=grammars)
        assert out[0] == max((3, 40, 99), key=lambda t: logits[0, t].item())
        assert out[1] == 64 and out[2] == 7
