"""The simulated engine's `generate_all`: the same answer, at the same (virtual) time and with
the same time to first token and TPOT as reading `generate` to its end, but its collector
woken at its end only (SimRequest.whole; also at its first token where the prefix cache
indexes the prompt then), not once a token."""

from __future__ import annotations

import asyncio

import pytest

from parrot.constraints import Choice
from parrot.engines import sim_requests
from parrot.engines.protocol import FillRequest, GenerateRequest, collect_generate
from parrot.engines.simulated import SimulatedEngine
from parrot.sampling import SamplingParams
from parrot.sim.clock import run_virtual
from tests.engines.test_simulated import ITER_MS
from tests.engines.test_simulated import make_engine as sim_engine


def make_engine(**params: object) -> SimulatedEngine:
    return sim_engine(prefill_per_token_ms=0.01, **params)


REQUESTS = {
    "ignore_eos": GenerateRequest("g", None, SamplingParams(max_tokens=40, ignore_eos=True)),
    "eos": GenerateRequest("g", None, SamplingParams(max_tokens=400, seed=3)),
    "prompt": GenerateRequest("g", "p", SamplingParams(max_tokens=25), text="go on " * 30),
    "constraint": GenerateRequest("g", None, SamplingParams(
        max_tokens=12, constraint=Choice(("yes", "no")))),
}


async def one(engine: SimulatedEngine, request: GenerateRequest, whole: bool):
    await engine.fill(FillRequest("p", None, text="a shared prompt " * 20))
    started = asyncio.get_running_loop().time()
    result = await (engine.generate_all(request) if whole
                    else collect_generate(engine.generate(request)))
    took = asyncio.get_running_loop().time() - started
    stats = await engine.stats()
    await engine.close()
    return result, took, stats.counter("tpot_generates"), stats.counter("tpot_us_sum")


@pytest.mark.parametrize("prefix_caching", [False, True])
@pytest.mark.parametrize("case", sorted(REQUESTS))
def test_generate_all_answers_as_reading_the_stream_does(case, prefix_caching):
    request = REQUESTS[case]
    streamed = run_virtual(one(make_engine(eos_mean_tokens=16, prefix_caching=prefix_caching),
                               request, whole=False))
    whole = run_virtual(one(make_engine(eos_mean_tokens=16, prefix_caching=prefix_caching),
                            request, whole=True))
    assert whole == streamed
    result, took, tpot_generates, _ = whole
    # (a constrained value comes in one chunk: no TPOT)
    assert took > 0 and tpot_generates == (0 if case == "constraint" else 1)
    if case == "ignore_eos":   # its first token one decode step in, its 40th at its end
        assert (len(result.token_ids), result.finish_reason) == (40, "length")
        assert result.first_token_s == pytest.approx(ITER_MS / 1000)
        assert took == pytest.approx(40 * ITER_MS / 1000)
    if case == "eos":
        assert result.finish_reason == "eos" and len(result.token_ids) < 400
    if case == "prompt":   # forked from "p" (its 80 tokens) with its own ~45
        assert result.prompt_len is not None and result.prompt_len > 100


@pytest.mark.parametrize("prefix_caching", [False, True])
def test_a_whole_generate_wakes_its_collector_at_its_end(monkeypatch, prefix_caching):
    signals: list[bool] = []
    original = sim_requests.SimRequest.signal

    def counted(self) -> None:
        signals.append(self.whole)
        original(self)

    monkeypatch.setattr(sim_requests.SimRequest, "signal", counted)
    request = GenerateRequest("g", None, SamplingParams(max_tokens=50, ignore_eos=True))

    async def main(whole: bool) -> None:
        engine = make_engine(prefix_caching=prefix_caching)
        if whole:
            await engine.generate_all(request)
        else:
            await collect_generate(engine.generate(request))
        await engine.close()

    run_virtual(main(whole=False))
    assert signals == [False] * 50
    signals.clear()
    run_virtual(main(whole=True))
    # with the prefix cache, the first token too: the prompt is indexed while it decodes
    assert signals == ([True, True] if prefix_caching else [True])


def test_a_whole_generate_of_one_token_is_timed_at_it():
    request = GenerateRequest("g", None, SamplingParams(max_tokens=1, ignore_eos=True))
    streamed = run_virtual(one(make_engine(), request, whole=False))
    whole = run_virtual(one(make_engine(), request, whole=True))
    assert whole == streamed and whole[0].first_token_s == pytest.approx(ITER_MS / 1000)
