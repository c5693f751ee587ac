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
