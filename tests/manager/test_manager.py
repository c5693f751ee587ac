from __future__ import annotations

import asyncio

import pytest

from parrot.errors import CallFailedError, ConflictError, GetTimeoutError, NotFoundError
from parrot.types import CallState, Criterion
from parrot.serve_config import EngineSpec
from tests.manager.conftest import out, submit
from tests.manager.fakes import RecordingEngine


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


async def test_a_variable_bound_to_two_placeholders_readies_its_call_once_set(manager, engine):
    session = manager.create_session()
    var = manager.create_variable(session, "doc", None)
    call = submit(manager, session, "{{input:a}} and {{input:b}} {{output:y}}",
                  a=var.var_id, b=var.var_id)
    manager.set_variable(session, var.var_id, "hello")
    value = await asyncio.wait_for(manager.get(session, out(call, "y"), Criterion.LATENCY), 5)
    assert value.startswith("gen(") and call.state is CallState.DONE


# Long enough (74 tokens) to be worth a context of its own (executor.MIN_CONTEXT_TOKENS).
SYSTEM = "You are a helpful assistant that answers questions about parrots briefly. " * 4


async def test_shared_system_prompt_is_filled_once(manager, engine):
    session = manager.create_session()
    calls = [submit(manager, session, SYSTEM + "{{input:q}} {{output:a}}", q=f"q{i}")
             for i in range(3)]
    for call in calls:
        await manager.get(session, out(call, "a"), Criterion.LATENCY)
    fills = [c for c in engine.log if c[0] == "fill"]
    # One cached context for the system prompt; each call forks it into its private context
    # and fills only its own question there (a unique value is not worth a context).
    roots = [f for f in fills if f[2] is None]
    assert len(roots) == 1 and roots[0][1].startswith("p-")
    assert engine.contexts[roots[0][1]] == SYSTEM
    private = [f for f in fills if f[1].startswith("c-")]
    assert len(private) == 3 and {f[2] for f in private} == {roots[0][1]}
    frees = [c for c in engine.log if c[0] == "free"]
    assert len(frees) == 3 and all(f[1].startswith("c-") for f in frees)
    assert list(engine.contexts) == [roots[0][1]]  # the prefix stays cached


async def test_recurring_input_prefix_gets_its_own_context(manager, engine):
    session = manager.create_session()
    document = "A long shared document about parrots and their many colourful feathers. " * 4
    first = submit(manager, session, "Doc: {{input:d}} Q1 {{output:a}}", d=document)
    await manager.get(session, out(first, "a"), Criterion.LATENCY)
    second = submit(manager, session, "Doc: {{input:d}} Q2 {{output:a}}", d=document)
    third = submit(manager, session, "Doc: {{input:d}} Q3 {{output:a}}", d=document)
    for call in (second, third):
        await manager.get(session, out(call, "a"), Criterion.LATENCY)
    cached = [cid for cid, text in engine.contexts.items() if cid.startswith("p-")]
    # The first call saw the document once; the second and third share a context for it.
    assert [engine.contexts[c] for c in cached] == ["Doc: " + document]
    forks = [f for f in engine.log if f[0] == "fill" and f[2] == cached[0]]
    assert len(forks) == 2


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


async def test_cached_prefixes_are_evicted_lru_when_the_engine_needs_memory(manager):
    small = RecordingEngine(name="small")
    small.capacity_blocks = 12  # 12 blocks of 16 tokens = 192 tokens of KV
    await manager.add_engine(EngineSpec(name="small", in_process=True), small)
    session = manager.create_session()
    prompts = [f"{chr(65 + i)}" * 300 + " {{input:q}} {{output:a}}" for i in range(3)]
    for prompt in prompts:  # each leading prompt is 76 tokens and stays cached afterwards
        call = submit(manager, session, prompt, q="x")
        await manager.get(session, out(call, "a"), Criterion.LATENCY)
    cached = [text for cid, text in small.contexts.items() if cid.startswith("p-")]
    # Each call is estimated at 77 prompt + 64 output tokens (+ 32 of block rounding); with one
    # 76-token prefix cached (96 tokens of blocks) that exceeds 192, so each new call evicts the
    # previous call's prefix.
    assert cached == ["C" * 300 + " "]
    assert any(op == "free" and cid.startswith("p-") for op, cid, _ in small.log)


async def test_task_group_forms_once_its_consumer_is_asked_for(manager, engine):
    engine.delay = 0.5  # the maps are still running when the `get` arrives
    session = manager.create_session()
    maps = [submit(manager, session, "Map {{input:c}} {{output:p}}", c=f"chunk{i}")
            for i in range(3)]
    reduce_ = submit(manager, session, "Reduce {{input:a}} {{input:b}} {{input:c}} {{output:r}}",
                     a=out(maps[0], "p"), b=out(maps[1], "p"), c=out(maps[2], "p"))
    manager.step()  # the first round, before the client's `get` arrives
    # Nothing demanded yet: no objective and no group (the policy's default applies).
    assert {m.task_group for m in maps} == {None}
    assert {m.criterion for m in maps} | {reduce_.criterion} == {None}
    getting = asyncio.ensure_future(manager.get(session, out(reduce_, "r"), Criterion.LATENCY))
    await asyncio.sleep(0)
    manager.deduce_changed()
    assert reduce_.criterion is Criterion.LATENCY
    assert {m.task_group for m in maps} == {f"tg-{reduce_.call_id}"}
    assert {m.criterion for m in maps} == {Criterion.THROUGHPUT}
    await getting


async def test_call_on_a_dead_engine_is_redispatched_and_the_engine_readmitted(manager, engine):
    backup = RecordingEngine(name="backup")
    await manager.add_engine(EngineSpec(name="backup", in_process=True), backup)
    engine.alive = False  # e0 fails every operation and its healthz
    runs: list[dict[str, float]] = []   # the call's timings at the end of each run
    manager.call_observers.append(lambda c: runs.append(dict(c.timings)))
    session = manager.create_session()
    call = submit(manager, session, "Hello {{input:x}} {{output:y}}", x="there")
    value = await manager.get(session, out(call, "y"), Criterion.LATENCY)
    assert value.startswith("gen(") and call.state.value == "done"
    assert call.attempts == 1 and call.engine_id == "backup"
    # queued again when its first engine failed: its queue time starts there, after the
    # failed run, not at its first readiness
    assert len(runs) == 2
    assert runs[1]["ready"] >= runs[0]["finished"] > runs[0]["dispatched"] >= runs[0]["ready"]
    assert not manager.engines.get("e0").is_healthy
    assert [op for op, *_ in backup.log if op == "generate"] == ["generate"]
    engine.alive = True  # it answers again: re-admitted by the watcher within an interval
    await asyncio.sleep(manager.config.engine_heartbeat_interval_s + 0.5)
    assert manager.engines.get("e0").is_healthy


async def test_a_transient_failure_on_a_live_engine_does_not_mark_it_down(manager, engine):
    engine.fail_next = 1  # one request fails, but the engine answers its health probe
    session = manager.create_session()
    call = submit(manager, session, "Hello {{input:x}} {{output:y}}", x="there")
    assert (await manager.get(session, out(call, "y"), Criterion.LATENCY)).startswith("gen(")
    assert call.attempts == 1 and call.engine_id == "e0"
    assert manager.engines.get("e0").is_healthy


def _short_grace_manager():
    from parrot.serve_config import ManagerConfig
    from parrot.manager.manager import Manager
    from parrot.policies.least_queue import LeastQueuePolicy

    return Manager(LeastQueuePolicy(), ManagerConfig(no_engine_grace_s=0.3,
                                                      engine_heartbeat_interval_s=0.05))


async def test_with_every_engine_dead_calls_fail_after_the_grace_period() -> None:
    # Reproduction: with the only engine dead, in-flight and new calls never failed (gets
    # timed out after 30 s) and submits were still accepted.
    from parrot.errors import EngineUnavailableError

    manager = _short_grace_manager()
    await manager.start()
    dead = RecordingEngine(delay=0.05)
    await manager.add_engine(EngineSpec(name="e0", in_process=True), dead)
    try:
        session = manager.create_session()
        first = submit(manager, session, "A {{input:x}} {{output:y}}", x="1")
        second = submit(manager, session, "B {{input:y}} {{output:z}}", y=out(first, "y"))
        await asyncio.sleep(0.01)
        dead.alive = False
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(CallFailedError, match="no engine can take the call"):
            await manager.get(session, out(first, "y"), Criterion.LATENCY, timeout=5)
        with pytest.raises(CallFailedError, match="no engine"):
            await manager.get(session, out(second, "z"), Criterion.LATENCY, timeout=5)
        assert 0.25 < loop.time() - started < 1.5
        with pytest.raises(EngineUnavailableError, match="no engine can take the call"):
            submit(manager, session, "C {{input:x}} {{output:y}}", x="2")
        # a new engine joining ends the outage, as does the old one coming back
        await manager.add_engine(EngineSpec(name="e1", in_process=True), RecordingEngine())
        call = submit(manager, session, "C2 {{input:x}} {{output:y}}", x="2")
        assert (await manager.get(session, out(call, "y"), Criterion.LATENCY)).startswith("gen(")
        dead.alive = True
        await asyncio.sleep(0.2)
        call = submit(manager, session, "D {{input:x}} {{output:y}}", x="3")
        assert (await manager.get(session, out(call, "y"), Criterion.LATENCY)).startswith("gen(")
    finally:
        await manager.close()


async def test_an_engine_back_within_the_grace_period_takes_the_waiting_calls() -> None:
    manager = _short_grace_manager()
    await manager.start()
    flaky = RecordingEngine()
    await manager.add_engine(EngineSpec(name="e0", in_process=True), flaky)
    try:
        flaky.alive = False
        session = manager.create_session()
        call = submit(manager, session, "A {{input:x}} {{output:y}}", x="1")
        await asyncio.sleep(0.1)
        assert not manager.engines.get("e0").is_healthy
        flaky.alive = True
        value = await manager.get(session, out(call, "y"), Criterion.LATENCY, timeout=5)
        assert value.startswith("gen(") and call.attempts == 1
    finally:
        await manager.close()


async def test_max_tokens_over_every_engine_window_is_refused_at_submit(manager):
    from parrot.errors import InvalidRequestError

    await manager.add_engine(EngineSpec(name="e0", in_process=True), RecordingEngine(window=2048))
    await manager.add_engine(EngineSpec(name="e1", in_process=True), RecordingEngine(window=4096))
    session = manager.create_session()
    with pytest.raises(InvalidRequestError, match=r"max_tokens=1000000 exceeds .*4096 tokens"):
        submit(manager, session, "A {{input:x}} {{output:y}}",
               x="1", y={"in_out": "output", "sampling": {"max_tokens": 1_000_000}})
    assert not session.calls  # nothing was created
    call = submit(manager, session, "A {{input:x}} {{output:y}}",
                  x="1", y={"in_out": "output", "sampling": {"max_tokens": 4096}})
    assert call.outputs["y"].sampling.max_tokens == 4096


async def test_an_engine_back_with_another_window_moves_the_max_tokens_bound(manager):
    from parrot.errors import InvalidRequestError

    first = RecordingEngine(window=2048)
    await manager.add_engine(EngineSpec(name="e0", in_process=True), first)
    session = manager.create_session()

    def ask(max_tokens: int) -> None:
        submit(manager, session, "A {{input:x}} {{output:y}}",
               x="1", y={"in_out": "output", "sampling": {"max_tokens": max_tokens}})

    with pytest.raises(InvalidRequestError, match=r"max_tokens=4096 exceeds .*2048 tokens"):
        ask(4096)
    first.alive = False
    manager.health.mark_down(manager.engines.get("e0"), "killed")
    await manager.add_engine(EngineSpec(name="e0", in_process=True), RecordingEngine(window=8192))
    ask(4096)   # the restarted process's window
    with pytest.raises(InvalidRequestError, match=r"max_tokens=9000 exceeds .*8192 tokens"):
        ask(9000)


async def test_the_same_name_readmits_a_down_engine_with_its_new_client(manager, engine):
    engine.alive = False
    manager.health.mark_down(manager.engines.get("e0"), "killed")
    restarted = RecordingEngine(name="restarted")
    state = await manager.add_engine(EngineSpec(name="e0", in_process=True), restarted)
    assert state.engine is restarted and state.is_healthy
    session = manager.create_session()
    call = submit(manager, session, "A {{input:x}} {{output:y}}", x="1")
    await manager.get(session, out(call, "y"), Criterion.LATENCY)
    assert [op for op, *_ in restarted.log if op == "generate"] == ["generate"]
    with pytest.raises(ConflictError):  # a live engine keeps its name
        await manager.add_engine(EngineSpec(name="e0", in_process=True), RecordingEngine())


async def test_idle_sessions_expire_but_busy_ones_stay(engine):
    from parrot.serve_config import ManagerConfig
    from parrot.manager.manager import Manager
    from parrot.errors import UnauthorizedError
    from parrot.policies.least_queue import LeastQueuePolicy

    manager = Manager(LeastQueuePolicy(), ManagerConfig(session_idle_timeout_s=0.05))
    await manager.start()
    await manager.add_engine(EngineSpec(name="e0", in_process=True), RecordingEngine())
    try:
        idle = manager.create_session()
        busy = manager.create_session()
        var = manager.create_variable(busy, "later", None)
        waiter = asyncio.create_task(manager.get(busy, var.var_id, Criterion.LATENCY))
        await asyncio.sleep(0.2)
        with pytest.raises(UnauthorizedError):  # its token is no session's any more
            manager.authenticate(idle.session_id, idle.token)
        assert manager.authenticate(busy.session_id, busy.token) is busy  # a get is waiting
        manager.set_variable(busy, var.var_id, "now")
        assert await waiter == "now"
        await asyncio.sleep(0.2)
        with pytest.raises(UnauthorizedError):
            manager.authenticate(busy.session_id, busy.token)
    finally:
        await manager.close()


async def test_a_call_cancelled_while_its_engine_is_probed_ends_failed(manager, engine):
    """The engine-unavailable path awaits a liveness probe; a cancel arriving then (session
    deleted, manager stopping) must still end the call, not leave it RUNNING forever."""
    probing = asyncio.Event()

    async def slow_probe(state, error):
        probing.set()
        await asyncio.sleep(3600)

    manager.health.confirm_down = slow_probe  # type: ignore[method-assign]
    engine.fail_next = 1
    session = manager.create_session()
    call = submit(manager, session, "A {{input:x}} {{output:y}}", x="1")
    await asyncio.wait_for(probing.wait(), 5)
    assert call.state is CallState.RUNNING
    session.tasks[call.call_id].cancel()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert call.state is CallState.FAILED and "cancelled" in call.error


async def test_a_call_has_a_waiting_consumer_only_where_its_outputs_alone_hold_it_back(
        manager, engine):
    """Call.has_waiting_consumer: a consumer becomes ready when this call finishes (a chain's
    next step), whichever was submitted first; a reduce that also waits on another map does
    not count until that map is done."""
    session = manager.create_session()
    later = manager.create_variable(session, "later", None)
    first = submit(manager, session, "Map A: {{input:x}} {{output:a}}", x=later.var_id)
    second = submit(manager, session, "Map B: {{input:x}} {{output:b}}", x="text")
    reduce = submit(manager, session, "Reduce: {{input:a}} {{input:b}} {{output:r}}",
                    a=out(first, "a"), b=out(second, "b"))
    assert not first.has_waiting_consumer and not second.has_waiting_consumer
    await manager.get(session, out(second, "b"), Criterion.LATENCY)
    assert first.has_waiting_consumer            # the reduce now waits on it alone
    assert not second.has_waiting_consumer and not reduce.has_waiting_consumer
    # a consumer submitted before its producer counts too
    var = manager.create_variable(session, "y", None)
    consumer = submit(manager, session, "Use: {{input:y}} {{output:u}}", y=var.var_id)
    producer = submit(manager, session, "Make: {{input:x}} {{output:y}}", x="text",
                      y={"in_out": "output", "semantic_var_id": var.var_id})
    assert producer.has_waiting_consumer and not consumer.has_waiting_consumer
    manager.set_variable(session, later.var_id, "now")
    await manager.get(session, out(reduce, "r"), Criterion.LATENCY)
    await manager.get(session, out(consumer, "u"), Criterion.LATENCY)
    assert not first.has_waiting_consumer and not producer.has_waiting_consumer  # done
