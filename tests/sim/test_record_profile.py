"""scripts/record_profile.py: the prefill rate is fitted the way the simulator charges it."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@pytest.fixture(scope="module")
def record_profile():
    import sys
    sys.path.insert(0, str(SCRIPTS))      # the script imports its sibling repo_imports
    try:
        spec = importlib.util.spec_from_file_location("record_profile",
                                                      SCRIPTS / "record_profile.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SCRIPTS))
    return module


def test_prefill_line_goes_through_the_origin(record_profile):
    fit = record_profile.per_token_through_origin
    assert math.isclose(fit([128, 512, 2048], [2.56, 10.24, 40.96]), 0.02)
    # Short fills cost a weight read the simulator never charges as a fixed cost: the line
    # through the origin stays near the long fills' rate (a free intercept would report
    # 0.02 ms per token and under-price every fill), so a 2,048-token fill is within 5%.
    lens = [128, 512, 1024, 2048]
    ms = [4.0 + 0.02 * n for n in lens]
    per_token = fit(lens, ms)
    assert per_token > 0.02
    assert abs(per_token * 2048 - ms[-1]) / ms[-1] < 0.05


class _ScriptedEngine:
    """A Fill's duration by length: the first Fill of a length is cold (first-use costs),
    later ones warm, each repeat a little slower than the best."""

    def __init__(self) -> None:
        self.fills: list[int] = []
        self.last_s = 0.0

    async def fill(self, request) -> None:
        n = len(request.token_ids)
        seen = self.fills.count(n)
        self.fills.append(n)
        self.last_s = 0.050 if seen == 0 else 0.010 + 1e-5 * n + 0.001 * (seen - 1)

    async def free_context(self, context_id: str) -> None:
        pass


def test_prefill_points_are_warm_and_the_best_repeat(record_profile):
    import asyncio

    engine = _ScriptedEngine()

    async def timer(coro) -> float:
        await coro
        return engine.last_s

    per_token, points = asyncio.run(
        record_profile.measure_prefill(engine, [128, 1024], repeats=3, timer=timer))
    # one untimed Fill per length, then the repeats
    assert engine.fills == [128, 1024] + [128, 1024] * 3
    # each point is its length's best warm repeat, never the cold first Fill
    assert points == [(128, (0.010 + 1e-5 * 128) * 1000), (1024, (0.010 + 1e-5 * 1024) * 1000)]
    xs, ys = [128, 1024], [0.010 + 1e-5 * 128, 0.010 + 1e-5 * 1024]
    assert math.isclose(per_token, record_profile.per_token_through_origin(xs, ys) * 1000)
