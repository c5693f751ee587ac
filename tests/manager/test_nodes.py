"""The DAG's nodes: a variable is set or failed once and wakes its waiters; a call's node-link
form carries its state and the time it spent in each state."""

from __future__ import annotations

import asyncio

import pytest

from parrot.manager.lifecycle import transition
from parrot.manager.nodes import Call, Variable
from parrot.errors import CallFailedError
from parrot.template import parse_template
from parrot.types import CallState


async def test_a_variable_is_set_once_and_wakes_its_waiters():
    var = Variable("v-1", "s-1", "x")
    waiter = asyncio.create_task(var.wait_finished())
    await asyncio.sleep(0)
    assert not var.is_ready and not var.is_finished and not waiter.done()
    var.set_value("")  # an empty string is a value
    await asyncio.wait_for(waiter, 1)
    assert var.is_ready and var.is_finished and var.value == ""
    with pytest.raises(AssertionError, match="set twice"):
        var.set_value("again")
    var.fail(CallFailedError("late"))  # a finished variable keeps its value
    assert (var.value, var.error) == ("", None)
    await asyncio.wait_for(var.wait_finished(), 1)  # finished: a new wait ends at once


async def test_a_failed_variable_is_finished_but_not_ready():
    var = Variable("v-2", "s-1", "y")
    error = CallFailedError("upstream failed")
    waiter = asyncio.create_task(var.wait_finished())
    await asyncio.sleep(0)
    var.fail(error)
    await asyncio.wait_for(waiter, 1)   # a failure wakes its waiters too
    assert var.is_finished and not var.is_ready
    var.fail(CallFailedError("second"))  # the first error stays
    assert var.error is error


async def test_a_calls_node_carries_its_state_and_time_per_state():
    call = Call("r-1", "s-1", parse_template("Q {{input:q}} {{output:a}}"), {}, {})
    start = call.state_entered[CallState.PENDING]
    transition(call, CallState.READY, now=start + 1.0)
    transition(call, CallState.RUNNING, now=start + 3.5)
    node = call.to_node()
    assert node.id == "r-1" and node.kind == "call" and node.state == "running"
    assert node.prompt == "Q {{input:q}} {{output:a}}"
    assert node.state_seconds == {"pending": 1.0, "ready": 2.5}
    assert node.engine is None and node.error is None
