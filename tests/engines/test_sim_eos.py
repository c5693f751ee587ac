"""The simulated model stops on its own where the prompt's [[eos@N]] marker says: a length
the scheduler never sees (it sees max_tokens only)."""

from __future__ import annotations

import pytest

from parrot.engines.protocol import FillRequest, GenerateRequest
from parrot.engines.sim_eos import eos_marker, find_eos
from parrot.engines.simulated import SimulatedEngine, SimulatedEngineConfig
from parrot.sampling import SamplingParams
from parrot.sim.clock import run_virtual


def engine() -> SimulatedEngine:
    return SimulatedEngine("sim", SimulatedEngineConfig.from_mapping({"zero_latency": True}))


def gen(ctx: str, max_tokens: int, parent: str | None = None, *,
        ignore_eos: bool = False) -> GenerateRequest:
    return GenerateRequest(ctx, parent, SamplingParams(max_tokens=max_tokens,
                                                       ignore_eos=ignore_eos))


def test_markers_round_trip_and_the_last_one_counts():
    assert find_eos(f"hello {eos_marker(17)} world") == 17
    assert find_eos(f"{eos_marker(5)} and {eos_marker(9)}") == 9
    assert find_eos("no marker [[eos@]] here") is None
    with pytest.raises(ValueError):
        eos_marker(0)


def test_a_generate_stops_at_the_marker_under_a_loose_cap():
    async def main() -> None:
        sim = engine()
        await sim.fill(FillRequest("a", text=f"Question? {eos_marker(12)}"))
        result = await sim.generate_all(gen("a", 400))
        assert len(result.token_ids) == 12 and result.finish_reason == "stop"
        # used once: the next generate in the same context runs to its cap
        again = await sim.generate_all(gen("a", 30))
        assert len(again.token_ids) == 30 and again.finish_reason == "length"
        await sim.close()
    run_virtual(main())


def test_the_cap_and_ignore_eos_win_over_the_marker():
    async def main() -> None:
        sim = engine()
        await sim.fill(FillRequest("a", text=eos_marker(50)))
        assert len((await sim.generate_all(gen("a", 20))).token_ids) == 20
        await sim.fill(FillRequest("b", text=eos_marker(5)))
        assert len((await sim.generate_all(gen("b", 20, ignore_eos=True))).token_ids) == 20
        await sim.close()
    run_virtual(main())


def test_forks_inherit_the_marker_of_the_context_they_fork():
    """The marker may sit in a prefix context the call forks (its own input filled there)."""
    async def main() -> None:
        sim = engine()
        await sim.fill(FillRequest("prefix", text=f"a long shared input {eos_marker(7)}"))
        await sim.fill(FillRequest("call", "prefix", text=" Answer:"))
        assert len((await sim.generate_all(gen("call", 100))).token_ids) == 7
        assert len((await sim.generate_all(gen("fork", 100, "prefix"))).token_ids) == 7
        await sim.close()
    run_virtual(main())
