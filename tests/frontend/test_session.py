from __future__ import annotations

import asyncio
import dataclasses

import pytest

import parrot
from parrot.errors import (CallFailedError, InvalidRequestError, NotFoundError,
                           TemplateSyntaxError, TooManyRequestsError)
from tests.manager.fakes import manager_with_recording_engine


@parrot.semantic_function(max_tokens=8)
def summarize(doc, summary):
    """Summarize: {{input:doc}} Summary: {{output:summary}}"""


@parrot.semantic_function(max_tokens=8)
def combine(a, b, out):
    """Combine {{input:a}} and {{input:b}} into {{output:out}}"""


@pytest.fixture
async def manager():
    async with manager_with_recording_engine() as mgr:
        yield mgr


async def test_async_session_chain_and_transport_messages(manager):
    async with parrot.Session(manager=manager) as session:
        s1 = summarize("first document")
        s2 = summarize(doc=s1)
        value = await s2.aget(parrot.LATENCY)
        assert value.startswith("gen(")
        graph = await session.graph()
    calls = [n for n in graph.nodes if n.kind == "call"]
    assert [c.state for c in calls] == ["done", "done"]
    # create session, one submit_batch with both calls (it waits for s2, awaited at once:
    # no get follows), the graph, delete.
    assert session.transport.num_messages == 4


async def test_a_deferred_open_travels_with_the_first_batch(manager):
    async with parrot.Session(manager=manager, defer_open=True) as session:
        assert session.credentials is None          # nothing sent yet
        s1 = summarize("first document")
        s2 = summarize(doc=s1)
        value = await s2.aget(parrot.LATENCY)
        assert value.startswith("gen(")
        sid = session.session_id
        s3 = summarize(doc=s2)                      # a later batch names the open session
        await s3.aget()
        graph = await session.graph()
    assert [n.state for n in graph.nodes if n.kind == "call"] == ["done"] * 3
    # the first submit_batch (which opened the session and brought s2's value), the second
    # batch (s3's), the graph, delete: the eager session's POST /v1/sessions is not sent.
    assert session.transport.num_messages == 4
    assert sid not in {s.session_id for s in manager.sessions}   # deleted on exit


async def test_a_deferred_session_opens_on_its_own_for_what_a_batch_cannot_carry(manager):
    async with parrot.Session(manager=manager, defer_open=True) as session:
        x = session.variable("x", "hello")          # needs the session before any batch
        y = summarize(doc=x)
        assert (await y.aget()).startswith("gen(")
    # open, create the variable, the batch (naming the session; it brings y), delete
    assert session.transport.num_messages == 4
    async with parrot.Session(manager=manager, defer_open=True) as idle:
        pass
    assert idle.transport.num_messages == 0         # never opened, nothing to delete


async def test_a_deferred_open_that_fails_fails_the_batch_and_what_waits_for_it(manager):
    manager.config = dataclasses.replace(manager.config, max_sessions=1)
    async with parrot.Session(manager=manager):     # the one session the service allows
        async with parrot.Session(manager=manager, defer_open=True) as session:
            s1 = summarize("doc")
            stats = asyncio.ensure_future(session.stats())   # begun while the batch opens
            with pytest.raises(TooManyRequestsError):
                await s1.aget()
            with pytest.raises(TooManyRequestsError):
                await stats                          # waited for the same open
        assert session.credentials is None
        assert session.transport.num_messages == 1   # the batch; no open, no delete


async def test_multi_output_function_returns_tuple(manager):
    pair = parrot.semantic_function(prompt="Q: {{input:q}} A1: {{output:a}} A2: {{output:b}}",
                                    max_tokens=4)
    async with parrot.Session(manager=manager):
        a, b = pair(q="why")
        assert (await a.aget()) != (await b.aget())


async def test_client_variable_and_failure_reaches_waiter(manager):
    extract = parrot.semantic_function(
        prompt="{{input:x}} -> {{output:y}}", transforms={"y": [{"type": "json_path",
                                                                  "path": "a"}]})
    async with parrot.Session(manager=manager) as session:
        x = session.variable("x")
        y = extract(x=x)
        await x.aset("hello")
        with pytest.raises(CallFailedError, match="no JSON object"):
            await y.aget()


def test_sync_session_over_in_process_manager_is_rejected_without_loop():
    with pytest.raises(RuntimeError, match="inside a parrot.Session"):
        summarize("x")


def test_definition_errors_are_typed():
    with pytest.raises(TemplateSyntaxError):
        parrot.semantic_function(prompt="{{input:x} {{output:y}}")
    with pytest.raises(InvalidRequestError):
        parrot.semantic_function(prompt="{{input:x}} {{output:y}}", outputs={"zz": {}})
    with pytest.raises(InvalidRequestError):
        parrot.semantic_function(prompt="{{input:x}} {{output:y}}", temperature=-1)
    with pytest.raises(TypeError, match="missing input"):
        combine.bind(("a",), {})


async def test_baseline_mode_brings_every_intermediate_value_to_the_client(manager):
    async with parrot.Session(manager=manager, mode="baseline") as session:
        s1 = summarize("first document")
        s2 = summarize(doc=s1)
        value = await s2.aget(parrot.LATENCY)
        graph = await session.graph()
    assert value.startswith("gen(")
    # create, completion 1 (its reply carries s1, which the client renders into call 2),
    # completion 2, graph, delete.
    assert session.transport.num_messages == 5
    calls = [n for n in graph.nodes if n.kind == "call"]
    # The service saw two unrelated completions: the second prompt holds the rendered value.
    assert all("{{input:" not in c.prompt for c in calls)
    assert len(graph.links) == 2


async def test_rejected_call_in_a_batch_fails_only_its_outputs(manager):
    async with parrot.Session(manager=manager) as other:
        foreign = other.variable("secret", "value of another session")
        await foreign.aid()
        async with parrot.Session(manager=manager):
            good = summarize("doc")
            rejected = summarize(doc=foreign)  # another session's variable: invisible here
            after = summarize(doc=good)
            with pytest.raises(NotFoundError):
                await rejected.aget()
            assert (await after.aget()).startswith("gen(")


def test_sync_session_over_http(tmp_path):
    import asyncio

    from parrot.serve_config import ServeConfig
    from parrot.server.service import ParrotServer

    loop = asyncio.new_event_loop()
    server = ParrotServer(ServeConfig.from_mapping({"engines": [
        {"name": "s", "kind": "simulated", "in_process": True,
         "params": {"zero_latency": True}}]}))
    url = loop.run_until_complete(server.start(port=0))
    import threading

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        with parrot.Session(url) as session:
            sent = _paths(session)
            s1 = summarize("a document")
            s2 = summarize(doc=s1)
            assert len(s2.get()) == 8 * 4
            assert sent == ["/v1/submit_batch"]   # a blocking get right after: one message
            var = session.variable("later")
            out = summarize(doc=var)
            var.set("now")
            assert len(out.get(parrot.THROUGHPUT)) == 32
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_network_delay_is_split_between_request_and_reply():
    from parrot.frontend.transport import Transport
    from parrot.sim.clock import run_virtual
    from parrot.wire_types import GetRequest, Value

    class SlowService(Transport):
        async def _request(self, method, path, body, token):
            arrived.append(asyncio.get_running_loop().time())
            await asyncio.sleep(1.0)  # the service works for a second
            return {"value": "v"}

    arrived: list[float] = []

    async def main() -> float:
        transport = SlowService(delay=lambda: 0.5)
        reply = await transport.request("POST", "/v1/get", Value,
                                        GetRequest("s-1", "v-1"), token="t")
        assert reply == Value("v")
        return asyncio.get_running_loop().time()

    assert run_virtual(main()) == 1.5
    assert arrived == [0.25]


def _recorded(session, what):
    """`what(path, body)` of each message `session` sends from here on."""
    sent = []
    request = session.transport.request

    async def recording(method, path, reply, body=None, *args, **kwargs):
        sent.append(what(path, body))
        return await request(method, path, reply, body, *args, **kwargs)

    session.transport.request = recording
    return sent


async def test_a_get_begun_before_the_submission_travels_with_it(manager):
    async with parrot.Session(manager=manager) as session:
        sent = _recorded(session, lambda path, body: body)
        first = summarize("first document")
        second = summarize("second document")
        both = combine(first, second)
        assert (await both.aget(parrot.THROUGHPUT)).startswith("gen(")
        later = summarize("third document")       # submitted before any get of its output
        await asyncio.sleep(0.01)
        await later.aget()
    batches = [b for b in sent if type(b).__name__ == "SubmitBatchRequest"]
    criteria = [[p.criteria for p in call.placeholders if p.is_output]
                for batch in batches for call in batch.calls]
    # the get of `both` began before the batch was sent; nobody had asked for the others yet
    assert criteria == [[None], [None], [parrot.THROUGHPUT], [None]]


# --- never more round trips than a request-level client -----------------------------------

def _paths(session):
    """The paths of the messages `session` sends from here on."""
    return _recorded(session, lambda path, body: path)


@pytest.mark.parametrize("mode", ["parrot", "baseline"])
async def test_a_call_awaited_at_once_is_one_round_trip_as_for_a_request_level_client(
        manager, mode):
    async with parrot.Session(manager=manager, mode=mode) as session:
        sent = _paths(session)
        assert (await summarize("one document").aget()).startswith("gen(")
        assert len(sent) == 1
        two = combine(summarize("a"), summarize("b"))      # a chain: still one message
        again = await two.aget(parrot.THROUGHPUT)
        assert again.startswith("gen(")
        assert len(sent) == (2 if mode == "parrot" else 4)     # baseline: one per call


async def test_a_batch_the_program_goes_on_from_does_not_wait(manager):
    async with parrot.Session(manager=manager) as session:
        sent = _paths(session)
        first = summarize("first document")
        second = summarize("second document")
        pending = asyncio.ensure_future(first.aget())     # `second` is not awaited yet
        await asyncio.sleep(0.01)
        assert (await pending).startswith("gen(") and (await second.aget()).startswith("gen(")
        # the batch came back with ids only: each value is a get of its own
        assert sent == ["/v1/submit_batch", "/v1/get", "/v1/get"]


async def test_an_awaited_call_that_fails_raises_its_error(manager):
    extract = parrot.semantic_function(
        prompt="{{input:x}} -> {{output:y}}", transforms={"y": [{"type": "json_path",
                                                                  "path": "a"}]})
    async with parrot.Session(manager=manager) as session:
        sent = _paths(session)
        with pytest.raises(CallFailedError, match="no JSON object"):
            await extract(x="hello").aget()
        # the batch waited; the failure came back as the get's error
        assert sent == ["/v1/submit_batch", "/v1/get"]


# --- criteria at call time -------------------------------------------------------------------

async def _recorded_criteria(manager, program):
    """The criteria each output carried in its submission, per call, and the criterion each
    call was placed under, after `program(session)` ran."""
    placed = []
    policy = manager.scheduler.policy
    schedule = policy.schedule

    def recording_schedule(*, calls, engines):
        placed.extend((c.call_id, c.criterion) for c in calls)
        return schedule(calls=calls, engines=engines)

    policy.schedule = recording_schedule
    async with parrot.Session(manager=manager) as session:
        sent = _recorded(session, lambda path, body: body)
        await program(session)
    batches = [b for b in sent if type(b).__name__ == "SubmitBatchRequest"]
    criteria = [[p.criteria for p in call.placeholders if p.is_output]
                for batch in batches for call in batch.calls]
    return criteria, [criterion for _, criterion in placed]


async def test_criteria_given_at_call_time_reach_the_scheduler_before_placement(manager):
    async def program(session):
        maps = [summarize(f"part {i}", criteria=parrot.THROUGHPUT) for i in range(3)]
        chat = summarize("hello", criteria="latency")
        assert (await chat.aget()).startswith("gen(")
        await asyncio.gather(*(m.aget(parrot.THROUGHPUT) for m in maps))

    criteria, placed = await _recorded_criteria(manager, program)
    assert criteria == [[parrot.THROUGHPUT]] * 3 + [[parrot.LATENCY]]
    assert placed == [parrot.THROUGHPUT] * 3 + [parrot.LATENCY]


async def test_asyncio_gather_of_gets_right_after_the_calls_travels_with_them(manager):
    async def program(session):
        outs = [summarize(f"part {i}") for i in range(3)]
        values = await asyncio.gather(*(v.aget(parrot.THROUGHPUT) for v in outs))
        assert all(v.startswith("gen(") for v in values)

    criteria, placed = await _recorded_criteria(manager, program)
    assert criteria == [[parrot.THROUGHPUT]] * 3
    assert placed == [parrot.THROUGHPUT] * 3


async def test_parrot_gather_declares_its_criteria_before_it_is_awaited(manager):
    async def program(session):
        outs = [summarize(f"part {i}") for i in range(2)]
        pending = parrot.gather(outs, criteria=parrot.THROUGHPUT)   # declared here
        await asyncio.sleep(0.01)                                  # the batch leaves
        assert all(v.startswith("gen(") for v in await pending)

    criteria, placed = await _recorded_criteria(manager, program)
    assert criteria == [[parrot.THROUGHPUT]] * 2
    assert placed == [parrot.THROUGHPUT] * 2


async def test_an_input_named_criteria_stays_an_input(manager):
    judge = parrot.semantic_function(prompt="Judge by {{input:criteria}}: {{output:verdict}}",
                                     max_tokens=4)
    async with parrot.Session(manager=manager):
        verdict = judge(criteria="brevity")
        assert (await verdict.aget()).startswith("gen(")
        assert verdict.get_criterion is parrot.LATENCY


def test_an_unreachable_server_is_one_error_and_no_unclosed_session_warning(tmp_path):
    """Before: the failed open left the aiohttp session open ("Unclosed client session")."""
    import subprocess
    import sys
    from pathlib import Path

    program = (
        "import asyncio, parrot\nfrom parrot.errors import ParrotError\n"
        "async def main():\n"
        "    async with parrot.Session('http://127.0.0.1:9'):\n"
        "        pass\n"
        "try:\n"
        "    asyncio.run(main())\n"
        "except ParrotError as exc:\n"
        "    print(type(exc).__name__)\n"
        "try:\n"
        "    with parrot.Session('http://127.0.0.1:9'):\n"
        "        pass\n"
        "except ParrotError as exc:\n"
        "    print(type(exc).__name__)\n")
    done = subprocess.run([sys.executable, "-W", "default", "-c", program], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path,
                          env={"PYTHONPATH": str(Path(__file__).resolve().parents[2]),
                               "PATH": "/usr/bin:/bin"})
    assert done.stdout.split() == ["ManagerUnavailableError"] * 2, done.stderr
    assert "Unclosed" not in done.stderr and "ResourceWarning" not in done.stderr
