from __future__ import annotations

import asyncio

import pytest

from parrot.errors import CallFailedError, ConflictError, GetTimeoutError, NotFoundError
from parrot.types import CallState, Criterion
from tests.core.conftest import out, submit


async def test_chain_values_flow_inside_the_service(manager, engine):
    session = manager.create_session()
    first = submit(manager, session, "Summarize: {{input:doc}} {{output:s}}", doc="hello")
    second = submit(manager, session, "Refine {{input:s}} now {{output:r}}", s=out(first, "s"))
    value = await manager.get(session, out(second, "r"), Criterion.LATENCY)
    s1 = session.variables[out(first, "s")].value
    assert s1.startswith("gen(")
    # The second call's prompt contains the first call's output, rendered in the service.
    private = [c for c in engine.log if c[0] == "generate"]
    assert len(private) == 2
    assert value.startswith("gen(")
    assert first.state is CallState.DONE and second.state is CallState.DONE
    assert engine.contexts == {c.context_id: engine.contexts[c.context_id]
                               for c in manager.engines.get("e0").contexts.prefix_hashes.values()}


async def test_shared_prefix_is_filled_once(manager, engine):
    session = manager.create_session()
    calls = [submit(manager, session, "SYSTEM PROMPT. {{input:q}} {{output:a}}", q=f"q{i}")
             for i in range(3)]
    for call in calls:
        await manager.get(session, out(call, "a"), Criterion.LATENCY)
    fills = [c for c in engine.log if c[0] == "fill"]
    # One context for the shared system prompt, one per question forked from it.
    roots = [f for f in fills if f[2] is None]
    assert len(roots) == 1
    assert len(fills) == 1 + 3 + 3  # system prompt, each question, the " " before the output
    question_fills = [f for f in fills if engine.contexts.get(f[1], "").endswith(("q0", "q1", "q2"))]
    assert len(question_fills) == 3
    assert {f[2] for f in question_fills} == {roots[0][1]}
    # Each call's private context forks its deepest prefix context and is freed at the end.
    frees = [c for c in engine.log if c[0] == "free"]
    assert len(frees) == 3 and all(f[1].startswith("c-") for f in frees)


async def test_failure_propagates_downstream(manager, engine):
    session = manager.create_session()
    engine.fail_next = 10  # more than the retries
    first = submit(manager, session, "A {{input:x}} {{output:a}}", x="1")
    second = submit(manager, session, "B {{input:a}} {{output:b}}", a=out(first, "a"))
    with pytest.raises(CallFailedError):
        await manager.get(session, out(second, "b"), Criterion.LATENCY)
    assert first.state is CallState.FAILED and second.state is CallState.FAILED


async def test_get_timeout_and_unknown_variable(manager, engine):
    session = manager.create_session()
    var = manager.create_variable(session, "later", None)
    with pytest.raises(GetTimeoutError):
        await manager.get(session, var.var_id, Criterion.LATENCY, timeout=0.01)
    with pytest.raises(NotFoundError):
        await manager.get(session, "v-nope", Criterion.LATENCY)


async def test_set_variable_releases_consumers(manager, engine):
    session = manager.create_session()
    var = manager.create_variable(session, "topic", None)
    call = submit(manager, session, "Write about {{input:t}}: {{output:o}}", t=var.var_id)
    await asyncio.sleep(0)
    assert call.state is CallState.PENDING
    manager.set_variable(session, var.var_id, "parrots")
    assert await manager.get(session, out(call, "o"), Criterion.LATENCY)
    with pytest.raises(ConflictError):
        manager.set_variable(session, var.var_id, "again")
    with pytest.raises(ConflictError):
        manager.set_variable(session, out(call, "o"), "forged")
