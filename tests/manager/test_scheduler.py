"""The scheduling round: the order ready calls are offered in, and what the views carry."""

from __future__ import annotations

import asyncio

from parrot.serve_config import EngineSpec
from parrot.manager.manager import Manager
from parrot.manager.scheduler import ready_order
from parrot.engines.protocol import LATENCY_PRIORITY, THROUGHPUT_PRIORITY
from parrot.policies.base import CallView, EngineView, Placement, Policy
from parrot.policies.latency_centric import LatencyCentricParams, LatencyCentricPolicy
from parrot.types import Criterion
from tests.manager.conftest import out, submit
from tests.manager.fakes import RecordingEngine

# Long enough (>= 64 tokens) to be a cacheable prefix boundary.
SYSTEM = "You are a helpful assistant that answers questions about parrots briefly. " * 5


class RecordingPolicy(Policy):
    """Places nothing; remembers the call views of every round."""

    name = "recording"

    def __init__(self) -> None:
        super().__init__()
        self.rounds: list[list[CallView]] = []

    def schedule(self, *, calls, engines: list[EngineView]) -> list[Placement]:
        self.rounds.append(list(calls))
        return []


async def test_ready_calls_are_offered_first_come_first_served():
    policy = RecordingPolicy()
    manager = Manager(policy)
    await manager.add_engine(EngineSpec(name="e0", in_process=True), RecordingEngine())
    sessions = [manager.create_session() for _ in range(3)]
    calls = [submit(manager, s, "Q {{input:q}} {{output:a}}", q=f"q{i}")
             for i, s in enumerate(sessions)]
    # Queued in reverse submission order: the round still offers them by submission.
    for call in calls:
        manager.scheduler.discard(call)
    for call in reversed(calls):
        manager.scheduler.enqueue(call)
    manager.step()
    assert [v.call_id for v in policy.rounds[-1]] == [c.call_id for c in calls]
    assert ready_order(reversed(calls)) == calls


async def test_first_submitted_call_runs_first_when_only_one_fits():
    # One engine that admits one call at a time: the call submitted first must get it, even
    # if it became ready last (reversing the order would run "late" first).
    manager = Manager(LatencyCentricPolicy(LatencyCentricParams(token_capacity=1)))
    engine = RecordingEngine(delay=0.01)
    session = manager.create_session()
    gate = manager.create_variable(session, "gate", None)
    first = submit(manager, session, "First {{input:g}} {{output:a}}", g=gate.var_id)
    late = submit(manager, session, "Late {{input:q}} {{output:a}}", q="x")
    manager.set_variable(session, gate.var_id, "open")   # first becomes ready after late
    await manager.start()
    await manager.add_engine(EngineSpec(name="e0", in_process=True), engine)
    try:
        await manager.get(session, out(late, "a"), Criterion.LATENCY)
        generated = [ctx for op, ctx, _ in engine.log if op == "generate"]
        assert generated[0].startswith(f"c-{first.call_id}")
    finally:
        await manager.close()


async def test_views_carry_output_tokens_prefix_tokens_and_queued_sharing():
    policy = RecordingPolicy()
    manager = Manager(policy)
    await manager.add_engine(EngineSpec(name="e0", in_process=True), RecordingEngine())
    session = manager.create_session()
    a = submit(manager, session, SYSTEM + "{{input:q}} {{output:a}}", q="one")
    b = submit(manager, session, SYSTEM + "{{input:q}} {{output:a}}", q="two")
    solo = submit(manager, session, "Other text entirely, long enough to be a prefix: "
                  "{{input:q}} {{output:a}}", q="three")
    manager.step()
    views = {v.call_id: v for v in policy.rounds[-1]}
    system_hash = a.prefix_hashes[0]
    assert views[a.call_id].shared_prefix == system_hash == views[b.call_id].shared_prefix
    assert views[solo.call_id].shared_prefix is None
    max_tokens = a.outputs["a"].sampling.max_tokens
    assert views[a.call_id].num_output_tokens == max_tokens
    assert views[a.call_id].prefix_tokens(system_hash) == -(-len(SYSTEM) // 4)
    assert views[a.call_id].num_prompt_tokens == a.num_tokens - max_tokens
    await asyncio.sleep(0)


async def test_criteria_given_at_submit_are_deduced_before_the_first_round():
    policy = RecordingPolicy()
    manager = Manager(policy)
    await manager.add_engine(EngineSpec(name="e0", in_process=True), RecordingEngine())
    session = manager.create_session()
    maps = [submit(manager, session, "Map {{input:q}} {{output:a}}", q=f"chunk {i}")
            for i in range(2)]
    reduce = submit(manager, session, "Reduce {{input:x}} {{input:y}} {{output:s}}",
                    x=out(maps[0], "a"), y=out(maps[1], "a"),
                    s={"in_out": "output", "criteria": "latency"})
    chat = submit(manager, session, "Chat {{input:q}} {{output:a}}", q="hi",
                  a={"in_out": "output", "criteria": "throughput"})
    manager.step()
    # No get has arrived: the maps are a task group (THROUGHPUT) feeding a latency-critical
    # reduce already, and the other call has the criterion its submit named.
    views = {v.call_id: v for v in policy.rounds[-1]}
    assert set(views) == {maps[0].call_id, maps[1].call_id, chat.call_id}
    assert [views[m.call_id].criterion for m in maps] == [Criterion.THROUGHPUT] * 2
    assert views[maps[0].call_id].task_group == views[maps[1].call_id].task_group is not None
    assert views[chat.call_id].criterion is Criterion.THROUGHPUT
    assert reduce.call_id not in views
    # Their demands tell the two apart: the maps' is the reduce's LATENCY (someone waits on
    # them), the other call's THROUGHPUT (background work, AppCentricParams.
    # hold_background_work).
    assert [views[m.call_id].demand for m in maps] == [Criterion.LATENCY] * 2
    assert views[chat.call_id].demand is Criterion.THROUGHPUT


class CriterionPolicy(Policy):
    """Places every call on the first engine under the criterion given."""

    name = "criterion"

    def __init__(self, criterion: Criterion | None) -> None:
        super().__init__()
        self.criterion = criterion

    def schedule(self, *, calls, engines: list[EngineView]) -> list[Placement]:
        return [Placement(c.call_id, engines[0].engine_id, self.criterion) for c in calls]


async def test_the_engine_priority_of_a_call_is_its_placements_criterion():
    for criterion, priority in ((Criterion.THROUGHPUT, THROUGHPUT_PRIORITY),
                                (Criterion.LATENCY, LATENCY_PRIORITY),
                                (None, LATENCY_PRIORITY)):
        manager = Manager(CriterionPolicy(criterion))
        engine = RecordingEngine()
        await manager.start()
        await manager.add_engine(EngineSpec(name="e0", in_process=True), engine)
        try:
            session = manager.create_session()
            # A throughput get: a policy naming no criterion (None) still runs it at the
            # one priority every request of such a policy has.
            call = submit(manager, session, SYSTEM + "{{input:q}} {{output:a}}", q="one",
                          a={"in_out": "output", "criteria": "throughput"})
            await manager.get(session, out(call, "a"), Criterion.THROUGHPUT)
            private = [ctx for op, ctx, _ in engine.log if op == "generate"]
            prefix = [ctx for op, ctx, _ in engine.log if op == "fill" and ctx.startswith("p-")]
            assert [engine.priorities[c] for c in private + prefix] == \
                [priority] * (len(private) + len(prefix))
            assert prefix, "the shared system prompt is filled as a prefix context"
        finally:
            await manager.close()
