"""Output lengths estimated online per function: the scheduler costs calls with what a
function's earlier calls produced, never with a length it could not know."""

from __future__ import annotations

import math
import random

import pytest

from parrot.manager.output_lengths import LengthEstimateConfig, OutputLengthEstimator
from parrot.errors import ConfigError
from parrot.types import Criterion
from tests.manager.conftest import out, submit


def p90(lengths):
    ordered = sorted(lengths)
    return ordered[math.ceil(0.9 * len(ordered)) - 1]


def test_the_estimate_converges_on_a_functions_real_lengths():
    """Lengths of 50..150 under a loose cap of 1,000: the estimate leaves the cap after
    `min_samples` outputs and is then the 90th percentile of the last 128."""
    rng = random.Random(7)
    estimator = OutputLengthEstimator()
    lengths = [rng.randint(50, 150) for _ in range(500)]
    assert estimator.estimate("summarize", 1000) == 1000          # cold: the cap
    for n, length in enumerate(lengths, 1):
        estimator.observe("summarize", length, 1000)
        if n == 3:
            assert estimator.estimate("summarize", 1000) == 1000   # still too few
    assert estimator.estimate("summarize", 1000) == p90(lengths[-128:])
    assert 135 <= estimator.estimate("summarize", 1000) <= 150
    # ... clipped by a call's own cap
    assert estimator.estimate("summarize", 100) == 100


def test_a_function_switches_to_its_new_lengths_within_a_window():
    estimator = OutputLengthEstimator(LengthEstimateConfig(window=16))
    for _ in range(16):
        estimator.observe("f", 400, 1000)
    for _ in range(16):
        estimator.observe("f", 40, 1000)
    assert estimator.estimate("f", 1000) == 40


def test_outputs_that_ran_to_their_cap_keep_the_estimate_at_the_cap():
    """An output that stopped at max_tokens (or ignore_eos) says only that it is at least
    that long: a function whose calls run to their caps is costed at the cap."""
    estimator = OutputLengthEstimator()
    for _ in range(20):
        estimator.observe("exact", 50, 50)
    assert estimator.estimate("exact", 50) == 50
    assert estimator.estimate("exact", 80) == 80


def test_a_new_function_borrows_every_functions_estimate_until_it_has_its_own():
    estimator = OutputLengthEstimator()
    for _ in range(10):
        estimator.observe("chat", 120, 2048)
    assert estimator.estimate("new", 2048) == 120
    for _ in range(4):
        estimator.observe("new", 700, 2048)
    assert estimator.estimate("new", 2048) == 700


def test_functions_are_forgotten_least_recently_used_first():
    estimator = OutputLengthEstimator(LengthEstimateConfig(max_functions=2, min_samples=1))
    for key, length in (("a", 10), ("b", 20), ("a", 10), ("c", 30)):
        estimator.observe(key, length, 100)
    assert estimator.estimate("b", 100) != 20        # dropped: the all-functions estimate
    assert estimator.estimate("a", 100) == 10


@pytest.mark.parametrize("kwargs", [{"quantile": 0}, {"quantile": 1.5}, {"window": 0}])
def test_the_config_is_validated(kwargs):
    with pytest.raises(ConfigError):
        LengthEstimateConfig(**kwargs)


async def test_the_manager_costs_a_call_with_its_functions_earlier_lengths(manager, engine):
    """The recording engine answers with one token: after four calls of a function capped at
    64 tokens, the next is counted with 1 output token, not 64."""
    session = manager.create_session()
    prompt = "Answer briefly: {{input:q}} {{output:a}}"
    for i in range(4):
        call = submit(manager, session, prompt, q=f"q{i}")
        await manager.get(session, out(call, "a"), Criterion.LATENCY)
        assert call.num_output_estimate == 64
    fifth = submit(manager, session, prompt, q="q4")
    assert fifth.num_output_estimate == 1 and fifth.output_tokens_estimate == 1
    assert fifth.num_tokens == fifth.num_output_estimate + math.ceil(
        len("Answer briefly: q4 ") / 4)
    await manager.get(session, out(fifth, "a"), Criterion.LATENCY)
