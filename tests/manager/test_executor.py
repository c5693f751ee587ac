"""The executor against a simulated engine on the virtual clock: the context wedge."""

from __future__ import annotations

import asyncio

from parrot.serve_config import EngineSpec
from parrot.manager.manager import Manager
from parrot.manager.requests import SubmitRequest
from parrot.engines.simulated import SimulatedEngine, SimulatedEngineConfig
from parrot.policies.least_queue import LeastQueuePolicy
from parrot.sim.clock import run_virtual
from parrot.types import Criterion

NUM_BOUNDARIES = 5_000


def tiny_boundaries_request(session_id: str) -> SubmitRequest:
    """One input used 5,000 times (an input may appear several times): a boundary each."""
    return SubmitRequest.from_json({
        "session_id": session_id, "prompt": "{{input:x}}" * NUM_BOUNDARIES + "{{output:o}}",
        "placeholders": [{"name": "x", "in_out": "input", "value": "a"},
                         {"name": "o", "in_out": "output", "sampling": {"max_tokens": 8}}]})


def test_thousands_of_one_character_boundaries_submitted_twice_do_not_wedge_the_engine():
    """A reproduction: every boundary of the second submission became a cached context
    (3,499 of them,
    0 free blocks) and the call waited forever; deleting the session did not recover it."""
    async def main() -> None:
        manager = Manager(LeastQueuePolicy())
        await manager.start()
        engine = SimulatedEngine("sim", SimulatedEngineConfig.from_mapping(
            {"profile": "a100_llama13b"}))
        await manager.add_engine(EngineSpec(name="sim", in_process=True), engine)
        session = manager.create_session()
        for _ in range(2):
            call = manager.submit(session, tiny_boundaries_request(session.session_id))
            value = await manager.get(session, call.outputs["o"].var_id, Criterion.LATENCY,
                                      timeout=600)
            assert len(value) == 8 * 4
        stats = await engine.stats()
        cached = len(manager.engines.get("sim").contexts.prefix_hashes)
        # Every boundary is shared by the same two calls: one context, not thousands (nor one
        # per 64 tokens).
        assert cached == stats.num_contexts == 1
        assert stats.num_blocks_free > stats.num_blocks_total - 200
        manager.delete_session(session)
        await asyncio.sleep(1.0)  # the release runs as a background task of the manager
        stats = await engine.stats()
        assert (stats.num_contexts, stats.num_blocks_free) == (0, stats.num_blocks_total)
        assert not manager.engines.get("sim").contexts.prefix_hashes
        await manager.close()
        await engine.close()
    run_virtual(main())


async def test_a_recurring_prompt_of_tiny_boundaries_costs_a_few_engine_round_trips(manager,
                                                                                    engine):
    """A reproduction: 1,300 one-character boundaries submitted twice took 86 s on SmolLM2, one Fill
    round trip (and model step) per boundary. Now a context spans at least 64 tokens."""
    session = manager.create_session()
    for _ in range(2):
        call = manager.submit(session, SubmitRequest.from_json({
            "session_id": session.session_id, "prompt": "{{input:x}}" * 1300 + "{{output:o}}",
            "placeholders": [{"name": "x", "in_out": "input", "value": "a"}]}))
        await manager.get(session, call.outputs["o"].var_id, Criterion.LATENCY)
    fills = [entry for entry in engine.log if entry[0] == "fill"]
    # First call: nothing recurs yet, one Fill of its private context. Second: 1,300 characters
    # (325 tokens) recur, every boundary shared by the same two calls: one context for all of
    # it (not five 64-token ones filled one after another), which the call's Generate forks.
    assert len(fills) == 1 + 1
