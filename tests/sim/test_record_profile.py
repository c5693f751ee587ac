"""scripts/record_profile.py: the prefill cost is fitted the way the simulator charges it."""

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


def test_prefill_line_has_the_fixed_cost_as_its_intercept(record_profile):
    fit = record_profile.prefill_line
    # short fills cost a weight read whatever their tokens: the simulator charges a
    # prefill-only step prefill_base_ms once, so the line keeps it as the intercept and the
    # slope is the long fills' rate
    lens = [128, 512, 1024, 2048]
    base, per_token = fit(lens, [4.0 + 0.02 * n for n in lens])
    assert math.isclose(base, 4.0) and math.isclose(per_token, 0.02)
    # a negative intercept (noise) is not a cost: the line goes through the origin
    base, per_token = fit([128, 512, 2048], [2.0, 10.24, 41.5])
    assert base == 0.0
    assert math.isclose(per_token, record_profile.per_token_through_origin(
        [128, 512, 2048], [2.0, 10.24, 41.5]))
    assert math.isclose(record_profile.per_token_through_origin(
        [128, 512, 2048], [2.56, 10.24, 40.96]), 0.02)


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

    base, per_token, points = asyncio.run(
        record_profile.measure_prefill(engine, [128, 1024], repeats=3, timer=timer))
    # one untimed Fill per length, then the repeats
    assert engine.fills == [128, 1024] + [128, 1024] * 3
    # each point is its length's best warm repeat, never the cold first Fill
    assert points == [(128, (0.010 + 1e-5 * 128) * 1000), (1024, (0.010 + 1e-5 * 1024) * 1000)]
    # the line through those two points: 10 ms + 0.01 ms per token
    assert math.isclose(base, 10.0) and math.isclose(per_token, 1e-5 * 1000)
