"""The speed probe (parrot/engines/speed_probe.py): the prefill line, the decode points, a
plan that fits the engine, and a profile that survives the engine's info over the wire."""

from __future__ import annotations

import asyncio
import math

import pytest

from parrot.engines.latency_model import SimulatedEngineConfig
from parrot.engines.protocol import EngineInfo
from parrot.engines.simulated import SimulatedEngine
from parrot.engines.speed_probe import (ProbePlan, ProbeResult, measure_prefill,
                                        per_token_through_origin, prefill_line, probe_speed)
from parrot.errors import InvalidRequestError
from parrot.speed_profile import SpeedProfile
from parrot.sim.clock import run_virtual


def test_prefill_line_has_the_fixed_cost_as_its_intercept():
    # short fills cost a weight read whatever their tokens: the simulator charges a
    # prefill-only step prefill_base_ms once, so the line keeps it as the intercept and the
    # slope is the long fills' rate
    lens = [128, 512, 1024, 2048]
    base, per_token = prefill_line(lens, [4.0 + 0.02 * n for n in lens])
    assert math.isclose(base, 4.0) and math.isclose(per_token, 0.02)
    # a negative intercept (noise) is not a cost: the line goes through the origin
    base, per_token = prefill_line([128, 512, 2048], [2.0, 10.24, 41.5])
    assert base == 0.0
    assert math.isclose(per_token, per_token_through_origin([128, 512, 2048],
                                                            [2.0, 10.24, 41.5]))
    assert math.isclose(per_token_through_origin([128, 512, 2048], [2.56, 10.24, 40.96]), 0.02)


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


def test_prefill_points_are_warm_and_the_best_repeat():
    engine = _ScriptedEngine()

    async def timer(coro) -> float:
        await coro
        return engine.last_s

    base, per_token, points = asyncio.run(measure_prefill(engine, [128, 1024], repeats=3,
                                                          timer=timer))
    # one untimed Fill per length, then the repeats
    assert engine.fills == [128, 1024] + [128, 1024] * 3
    # each point is its length's best warm repeat, never the cold first Fill
    assert points == [(128, (0.010 + 1e-5 * 128) * 1000), (1024, (0.010 + 1e-5 * 1024) * 1000)]
    # the line through those two points: 10 ms + 0.01 ms per token
    assert math.isclose(base, 10.0) and math.isclose(per_token, 1e-5 * 1000)


def _simulated(**latency) -> SimulatedEngine:
    params = {"num_blocks": 4096, "max_context_len": 8192, "max_num_batched_tokens": 4096,
              **latency}
    return SimulatedEngine("sim", SimulatedEngineConfig.from_mapping(params))


def test_the_probe_recovers_a_simulated_engines_profile():
    """On the virtual clock the simulated engine takes exactly its latency model's time, so
    the probe must read back that model: the prefill slope and intercept, and each decode
    point on the line base + slope x batch tokens."""
    engine = _simulated(prefill_per_token_ms=0.05, prefill_base_ms=3.0, decode_base_ms=10.0,
                        decode_per_token_ms=0.001)

    async def main() -> tuple[ProbeResult, int]:
        await engine.start()
        plan = ProbePlan.for_engine(await engine.info(), max_num_seqs=64)
        result = await probe_speed(engine, plan)
        contexts = (await engine.stats()).num_contexts
        await engine.close()
        return result, contexts

    result, contexts = run_virtual(main())
    assert contexts == 0                       # every context the probe made is freed
    assert math.isclose(result.prefill_ms_per_token, 0.05, rel_tol=1e-6)
    assert math.isclose(result.prefill_base_ms, 3.0, rel_tol=1e-6)
    # one point per batch size of the plan (1, 4, 16, 64 contexts of 512 tokens, 16 steps;
    # the contexts grow 16 tokens each time they are used)
    plan = ProbePlan.for_engine(run_virtual(engine.info()), max_num_seqs=64)
    assert len(result.decode_points) == len(plan.batch_sizes) == 4
    for batch, (tokens, _) in zip(plan.batch_sizes, result.decode_points):
        assert batch * (512 + 8) <= tokens <= batch * (plan.max_context_tokens + 8)
    for tokens, ms in result.decode_points:
        # the probe counts each sequence at its mean length over the steps (S/2 ahead of
        # its start): within half a token per sequence of the engine's own count
        assert abs(ms - (10.0 + 0.001 * tokens)) <= 0.001 * 64, (tokens, ms)
    profile = result.profile()
    assert profile.prefill_ms_per_token == result.prefill_ms_per_token
    # the empty batch's step, extrapolated from the first two points: the model's base
    assert math.isclose(profile.decode_ms(0), 10.0, abs_tol=0.01)


def test_the_profile_never_gets_faster_with_more_tokens():
    noisy = ProbeResult(0.0, 0.1, ((64, 6.0), (256, 7.0)),
                        ((512, 8.0), (2048, 7.5), (8192, 12.0)))
    points = noisy.profile().decode_points
    assert points[1:] == ((512, 8.0), (2048, 8.0), (8192, 12.0))
    # the empty step: the least-squares line's intercept, within 0 and the first point
    assert points[0][0] == 0 and 7.0 < points[0][1] < 8.0
    line = ProbeResult(0.0, 0.1, ((64, 6.0), (256, 7.0)), ((1000, 9.0), (3000, 11.0)))
    assert line.profile().decode_points == ((0, 8.0), (1000, 9.0), (3000, 11.0))
    # one steep pair at the start (noise) does not take the empty step to 0
    steep = ProbeResult(0.0, 0.1, ((64, 6.0), (256, 7.0)),
                        ((100, 2.0), (200, 10.0), (400, 10.5), (800, 11.0)))
    assert 0.0 < steep.profile().decode_points[0][1] <= 2.0


def _info(kv_tokens: int, window: int) -> EngineInfo:
    return EngineInfo("e", "builtin", "m", window, 16, kv_tokens // 16)


@pytest.mark.parametrize("kv_tokens,window,seqs,quick", [
    (100_000, 4096, 64, False), (16_384, 2048, 64, False), (1024, 1024, 8, False),
    (1024, 1024, 64, True), (100_000, 4096, 2, False)])
def test_a_plan_fits_the_engine(kv_tokens, window, seqs, quick):
    plan = ProbePlan.for_engine(_info(kv_tokens, window), seqs, quick=quick)
    # the decode contexts all fit the KV cache at their longest, and each its window
    assert plan.batch_sizes[-1] * (plan.max_context_tokens + 16) <= kv_tokens
    assert plan.max_context_tokens < window
    assert max(plan.prefill_lens) < min(window, kv_tokens)
    assert plan.batch_sizes[-1] <= max(2, seqs)


def test_the_full_plan_spans_past_an_h200_latency_capacity():
    # half an H200 with LLaMA-7B (100k tokens of KV): batches up to 64 x 512 = 32,768
    # tokens, past the ~20k the paper's rule lands at, so `auto` interpolates
    plan = ProbePlan.for_engine(_info(100_000, 4096), 64)
    assert plan.batch_sizes == (1, 4, 16, 64) and plan.context_len == 512


def test_a_bad_plan_is_refused():
    good = dict(prefill_lens=(32, 96), batch_sizes=(1, 2), context_len=64, decode_steps=4,
                repeats=1)
    ProbePlan(**good)
    for bad in (dict(prefill_lens=(32,)), dict(batch_sizes=(4, 2)), dict(decode_steps=1),
                dict(repeats=0), dict(context_len=0)):
        with pytest.raises(ValueError):
            ProbePlan(**{**good, **bad})
    with pytest.raises(ValueError, match="too small to probe"):
        ProbePlan.for_engine(_info(256, 1024), 64)


def test_engine_info_carries_the_profile_over_json():
    profile = SpeedProfile(0.03, ((0, 7.5), (32768, 17.0)))
    info = EngineInfo("e", "builtin", "m", 4096, 16, 100, speed_profile=profile)
    back = EngineInfo.from_wire(info.to_wire())
    assert back.speed_profile == profile
    assert EngineInfo.from_wire(EngineInfo("e", "k", "m", 1, 16, 1).to_wire()).speed_profile \
        is None
    for bad in ({"prefill_per_token_ms": 0.1}, "fast",
                {"prefill_per_token_ms": 0.1, "decode_table": [[0, 1.0]]},
                {"prefill_per_token_ms": 0.1, "decode_table": [[0, float("nan")], [9, 1.0]]}):
        data = {**info.to_wire(), "speed_profile": bad}
        with pytest.raises(InvalidRequestError, match="speed_profile"):
            EngineInfo.from_wire(data)
