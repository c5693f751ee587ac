"""The speed profile's calibration (`latency_capacity: auto`) and its wire form."""

from __future__ import annotations

import math

import pytest

from parrot.manager.engine_profiles import speed_profile
from parrot.speed_profile import (DEFAULT_PROFILE, PAPER_LATENCY_STEP_RATIO, ProfileError,
                                  SpeedProfile, calibrated_latency_capacity)


def test_the_paper_rule_gives_the_papers_capacity_on_its_own_hardware():
    # the paper's A100 LLaMA-13B: a 40-ms step at 6,144 tokens, 22 ms empty
    assert calibrated_latency_capacity(DEFAULT_PROFILE) == 6144
    assert calibrated_latency_capacity(speed_profile({"profile": "h200_llama7b"})) == 20480


def test_the_capacity_is_where_a_step_is_the_papers_slowdown():
    # 10 ms empty + 0.001 ms a token: 40/22 x 10 ms at 8,182 tokens, rounded down to 1024
    line = SpeedProfile(0.05, ((0, 10.0), (65536, 10.0 + 65.536)))
    assert line.max_batch_tokens(PAPER_LATENCY_STEP_RATIO * 10.0) == 8181
    assert calibrated_latency_capacity(line) == 7168
    # a step that barely grows: far more tokens; one that grows fast: never below 1024
    assert calibrated_latency_capacity(SpeedProfile(0.0, ((0, 10.0), (65536, 11.0)))) > 65536
    assert calibrated_latency_capacity(SpeedProfile(0.0, ((0, 1.0), (100, 100.0)))) == 1024
    assert line.tokens_at_slowdown(2.0, round_to=1000) == 10000


def test_a_profile_reads_back_from_its_wire_form():
    profile = SpeedProfile(0.0288, ((0, 7.7), (4096, 8.9), (32768, 17.5)))
    data = profile.to_latency_profile()
    assert data == {"prefill_per_token_ms": 0.0288,
                    "decode_table": [[0, 7.7], [4096, 8.9], [32768, 17.5]]}
    assert SpeedProfile.from_latency_profile(data) == profile


@pytest.mark.parametrize("points", [((0, 1.0),), ((5, 1.0), (5, 2.0)), ((0, -1.0), (9, 1.0)),
                                    ((0, math.nan), (9, 1.0)), ((0, 1.0), (9, math.inf))])
def test_a_bad_profile_is_refused(points):
    with pytest.raises(ProfileError, match="decode_points"):
        SpeedProfile(0.1, points)
