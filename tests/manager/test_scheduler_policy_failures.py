"""A policy the manager cannot trust: bad placements change nothing, a policy that keeps
failing fails its calls at once, one that recovers is forgiven, and a placement's criterion is
what the engine's accounting counts."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import pytest

from parrot.serve_config import EngineSpec
from parrot.manager.manager import Manager
from parrot.manager.scheduler import MAX_POLICY_FAILURES, POLICY_RETRY_DELAY_S
from parrot.errors import CallFailedError, SchedulingFailedError, error_from_wire
from parrot.policies.base import CallView, EngineView, Placement, Policy
from parrot.types import CallState, Criterion
from tests.manager.conftest import out, submit
from tests.manager.fakes import RecordingEngine

Decide = Callable[[Sequence[CallView], Sequence[EngineView]], list[Placement]]


class ScriptedPolicy(Policy):
    """Answers round i with rounds[i] (the last one repeats); an exception is raised."""

    name = "scripted"

    def __init__(self, *rounds: Decide | Exception) -> None:
        super().__init__()
        self.rounds = list(rounds)
        self.num_rounds = 0

    def schedule(self, *, calls: Sequence[CallView],
                 engines: Sequence[EngineView]) -> list[Placement]:
        answer = self.rounds[min(self.num_rounds, len(self.rounds) - 1)]
        self.num_rounds += 1
        if isinstance(answer, Exception):
            raise answer
        return answer(calls, engines)


def first_on(engine_id: str, criterion: Criterion | None = None) -> Decide:
    return lambda calls, _: [Placement(calls[0].call_id, engine_id, criterion)]


BAD_ROUNDS: dict[str, Decide] = {
    "unknown engine": lambda calls, _: [Placement(calls[0].call_id, "e0"),
                                        Placement(calls[1].call_id, "nowhere")],
    "placed twice": lambda calls, _: [Placement(calls[0].call_id, "e0"),
                                      Placement(calls[0].call_id, "e1")],
    "not offered": lambda calls, _: [Placement(calls[0].call_id, "e0"),
                                     Placement("r-never-submitted", "e0")],
    "engine down": lambda calls, _: [Placement(calls[0].call_id, "e0"),
                                     Placement(calls[1].call_id, "down")],
    "not a criterion": lambda calls, _: [Placement(calls[0].call_id, "e0",
                                                   "latency")],  # type: ignore[arg-type]
    "not a list": lambda calls, _: None,  # type: ignore[return-value,arg-type]
}


async def manager_with(policy: Policy) -> tuple[Manager, dict[str, RecordingEngine]]:
    manager = Manager(policy)
    engines = {name: RecordingEngine(name=name) for name in ("e0", "e1", "down")}
    for name, engine in engines.items():
        await manager.add_engine(EngineSpec(name=name, in_process=True), engine)
    manager.engines.get("down").is_healthy = False
    return manager, engines


@pytest.mark.parametrize("bad", sorted(BAD_ROUNDS))
async def test_an_invalid_placement_changes_nothing(bad):
    manager, _ = await manager_with(ScriptedPolicy(BAD_ROUNDS[bad]))
    session = manager.create_session()
    calls = [submit(manager, session, "Q {{input:q}} {{output:a}}", q=f"q{i}")
             for i in range(2)]
    try:
        assert manager.step() == 0
        # Even the valid first placement was not carried out: every call is still queued.
        assert manager.scheduler.num_ready == 2
        assert [c.state for c in calls] == [CallState.READY, CallState.READY]
        assert all(not e.running for e in manager.engines)
        assert manager.scheduler.num_policy_failures == 1
    finally:
        await manager.close()


async def test_a_policy_that_keeps_raising_fails_its_calls_at_once():
    policy = ScriptedPolicy(RuntimeError("policy bug"))
    manager, _ = await manager_with(policy)
    session = manager.create_session()
    call = submit(manager, session, "Q {{input:q}} {{output:a}}", q="x")
    downstream = submit(manager, session, "R {{input:a}} {{output:b}}", a=out(call, "a"))
    await manager.start()
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        with pytest.raises(SchedulingFailedError, match="policy bug") as raised:
            await manager.get(session, out(call, "a"), Criterion.LATENCY, timeout=10)
        # Failed after MAX_POLICY_FAILURES rounds retried POLICY_RETRY_DELAY_S apart, not at
        # the get's 10 s timeout.
        assert loop.time() - started < MAX_POLICY_FAILURES * POLICY_RETRY_DELAY_S + 2
        assert policy.num_rounds == MAX_POLICY_FAILURES
        assert isinstance(raised.value, CallFailedError) and raised.value.status == 424
        # The same type on the client's side of an HTTP hop.
        assert type(error_from_wire(raised.value.to_wire(), 424)) is SchedulingFailedError
        assert call.state is CallState.FAILED and manager.scheduler.num_ready == 0
        with pytest.raises(CallFailedError, match="policy bug"):  # downstream, too
            await manager.get(session, out(downstream, "b"), Criterion.LATENCY, timeout=1)
        assert downstream.state is CallState.FAILED
    finally:
        await manager.close()


async def test_a_policy_that_keeps_placing_invalidly_fails_its_calls():
    manager, engines = await manager_with(ScriptedPolicy(first_on("nowhere")))
    session = manager.create_session()
    call = submit(manager, session, "Q {{input:q}} {{output:a}}", q="x")
    await manager.start()
    try:
        with pytest.raises(SchedulingFailedError, match="unknown engine 'nowhere'"):
            await manager.get(session, out(call, "a"), Criterion.LATENCY, timeout=10)
        assert all(not e.log for e in engines.values())
    finally:
        await manager.close()


async def test_a_policy_that_recovers_resets_the_count():
    almost = [RuntimeError("transient")] * (MAX_POLICY_FAILURES - 1)
    # Fails one round short of the limit, recovers (placing nothing, then the call), then
    # fails short of the limit again: nothing must fail, since the count restarted.
    policy = ScriptedPolicy(*almost, lambda calls, _: [], *almost, first_on("e0"))
    manager, _ = await manager_with(policy)
    session = manager.create_session()
    call = submit(manager, session, "Q {{input:q}} {{output:a}}", q="x")
    try:
        counts = []
        for _ in range(2 * MAX_POLICY_FAILURES - 1):
            assert manager.step() == 0
            counts.append(manager.scheduler.num_policy_failures)
        assert counts == [*range(1, MAX_POLICY_FAILURES), 0, *range(1, MAX_POLICY_FAILURES)]
        assert call.state is CallState.READY
        assert manager.step() == 1
        await manager.start()
        await manager.get(session, out(call, "a"), Criterion.LATENCY, timeout=30)
        assert call.state is CallState.DONE and call.engine_id == "e0"
        assert policy.num_rounds == 2 * MAX_POLICY_FAILURES
        assert manager.scheduler.num_policy_failures == 0
    finally:
        await manager.close()


async def test_the_placement_criterion_is_what_the_engine_counts():
    manager, _ = await manager_with(ScriptedPolicy(first_on("slow", Criterion.THROUGHPUT)))
    engine = RecordingEngine(delay=10.0)  # still running while we look
    await manager.add_engine(EngineSpec(name="slow", in_process=True), engine)
    session = manager.create_session()
    call = submit(manager, session, "Q {{input:q}} {{output:a}}", q="x")
    try:
        assert call.criterion is None  # nothing asked for it yet: no deduced criterion
        assert manager.step() == 1
        view = manager.engines.get("slow").view()
        assert (view.num_throughput_calls, view.num_latency_calls) == (1, 0)
    finally:
        await manager.close()
