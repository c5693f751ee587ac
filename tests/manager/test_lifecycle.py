"""The call lifecycle: every legal move, every illegal one refused, timings per state."""

from __future__ import annotations

import itertools

import pytest

from parrot.manager.lifecycle import LEGAL_MOVES, IllegalTransitionError, is_legal, transition
from parrot.manager.nodes import Call
from parrot.template import parse_template
from parrot.types import CallState, Criterion
from tests.manager.conftest import out, submit

P, R, X, D, F = (CallState.PENDING, CallState.READY, CallState.RUNNING, CallState.DONE,
                 CallState.FAILED)
EXPECTED_LEGAL = {(P, R), (P, F), (R, X), (R, F), (X, D), (X, F), (X, R)}


def make_call(state: CallState = P, now: float = 0.0) -> Call:
    call = Call("r-test", "s-test", parse_template("{{output:o}}"), {}, {}, state=state)
    call.state_entered = {state: now}
    return call


def test_the_state_graph_is_exactly_the_documented_one():
    legal = {(a, b) for a, targets in LEGAL_MOVES.items() for b in targets}
    assert legal == EXPECTED_LEGAL
    assert set(LEGAL_MOVES) == set(CallState)
    assert all(not LEGAL_MOVES[s] for s in CallState if s.is_finished)


@pytest.mark.parametrize("current,target", sorted(EXPECTED_LEGAL))
def test_every_legal_move_changes_the_state_and_stamps_it(current, target):
    call = make_call(current, now=10.0)
    transition(call, target, now=12.5)
    assert call.state is target
    assert call.state_entered[target] == 12.5
    assert call.state_seconds[current] == pytest.approx(2.5)


ILLEGAL = sorted(set(itertools.product(CallState, CallState)) - EXPECTED_LEGAL)


@pytest.mark.parametrize("current,target", ILLEGAL)
def test_every_illegal_move_raises_and_leaves_the_call_unchanged(current, target):
    call = make_call(current, now=1.0)
    with pytest.raises(IllegalTransitionError) as info:
        transition(call, target, now=2.0)
    assert (info.value.call_id, info.value.current, info.value.target) == (
        "r-test", current, target)
    assert f"{current.value} -> {target.value}" in str(info.value)
    assert call.state is current and call.state_entered == {current: 1.0}
    assert not call.state_seconds
    assert not is_legal(current, target)


def test_a_retried_call_accumulates_its_time_in_each_state():
    call = make_call(P, now=0.0)
    for target, now in [(R, 1.0), (X, 3.0), (R, 4.0), (X, 8.0), (D, 9.0)]:
        transition(call, target, now=now)
    assert call.state_seconds == {P: 1.0, R: 2.0 + 4.0, X: 1.0 + 1.0}
    assert call.state_entered[R] == 4.0 and call.state_entered[D] == 9.0
    assert call.to_node().state_seconds == {"pending": 1.0, "ready": 6.0, "running": 2.0}


async def test_a_call_through_the_manager_records_its_path(manager, engine):
    session = manager.create_session()
    x = manager.create_variable(session, "x", None)
    call = submit(manager, session, "say {{input:x}} {{output:y}}", x=x.var_id)
    assert call.state is P and set(call.state_entered) == {P}
    manager.set_variable(session, x.var_id, "hello")
    await manager.get(session, out(call, "y"), Criterion.LATENCY, timeout=10)
    assert call.state is D
    assert set(call.state_entered) == {P, R, X, D}
    assert set(call.state_seconds) == {P, R, X}
    assert call.state_entered[P] <= call.state_entered[R] <= call.state_entered[X] \
        <= call.state_entered[D]


async def test_an_engine_failure_retries_through_ready_again(manager, engine):
    engine.fail_next = 1
    session = manager.create_session()
    call = submit(manager, session, "say {{output:y}}")
    await manager.get(session, out(call, "y"), Criterion.LATENCY, timeout=10)
    assert call.state is D and call.attempts == 1


async def test_deleting_the_session_fails_a_pending_call(manager, engine):
    session = manager.create_session()
    x = manager.create_variable(session, "x", None)
    consumer = submit(manager, session, "{{input:x}} {{output:y}}", x=x.var_id)
    manager.delete_session(session)
    assert consumer.state is F and set(consumer.state_seconds) == {P}
