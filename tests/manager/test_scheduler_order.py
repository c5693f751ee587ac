"""The scheduler offers ready calls to the policy in submission order (first come, first served
per application), whatever order they became ready in."""

from __future__ import annotations

from collections.abc import Sequence

from parrot.serve_config import EngineSpec
from parrot.manager.manager import Manager
from parrot.policies.base import CallView, EngineView, Placement
from parrot.policies.least_queue import LeastQueuePolicy
from parrot.types import Criterion
from tests.manager.conftest import out, submit
from tests.manager.fakes import RecordingEngine


class OneAtATimePolicy(LeastQueuePolicy):
    """Records each round's offer and places only the first call offered."""

    name = "one_at_a_time"

    def __init__(self) -> None:
        self.offers: list[list[str]] = []

    def schedule(self, *, calls: Sequence[CallView],
                 engines: Sequence[EngineView]) -> list[Placement]:
        self.offers.append([c.call_id for c in calls])
        return super().schedule(calls=calls[:1], engines=engines)


async def test_ready_calls_are_offered_and_placed_oldest_first():
    policy = OneAtATimePolicy()
    manager = Manager(policy)
    await manager.start()
    try:
        await manager.add_engine(EngineSpec(name="e0", in_process=True), RecordingEngine())
        session = manager.create_session()
        gates = [manager.create_variable(session, f"x{i}", None) for i in range(3)]
        calls = [submit(manager, session, f"step {i} {{{{input:x}}}} {{{{output:y}}}}",
                        x=gate.var_id) for i, gate in enumerate(gates)]
        for gate in reversed(gates):  # ready newest first, in one scheduling round
            manager.set_variable(session, gate.var_id, "go")
        for call in calls:
            await manager.get(session, out(call, "y"), Criterion.LATENCY, timeout=10)
        ids = [c.call_id for c in calls]
        assert policy.offers[0] == ids
        assert list(dict.fromkeys(offer[0] for offer in policy.offers)) == ids  # placed order
    finally:
        await manager.close()
