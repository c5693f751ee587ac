"""parrot.wire_types: the wire API's one vocabulary.

Every message survives its JSON form; every bad field is a typed error that names it; and the
frontend and the manager cannot drift apart: the manager's own dicts (graph nodes, engine
descriptions) carry exactly the fields the types name, a reply with a field the client does
not know fails to parse, and every route answers a real client with the typed reply.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

import parrot
import parrot.wire_types as wt
from parrot.errors import InvalidRequestError, NotFoundError, UnauthorizedError
from parrot.sampling import SamplingParams
from parrot.transforms import parse_transforms
from parrot.types import Criterion
from tests.manager.fakes import manager_with_recording_engine
from tests.server.front_door import bearer, call, config, new_session, running

OUTPUT = wt.PlaceholderSpec("y", "output", sampling=wt.SamplingOverride.of({"max_tokens": 3}),
                            transforms=parse_transforms(["strip", {"type": "regex",
                                                                   "pattern": "A: (.*)"}], "t"))
ENGINE = wt.EngineDescription("e0", "simulated", "sim", True, 6144, 32768, running_calls=1,
                              tokens_in_use=10, calls_done=2, cached_prefixes=0, prefix_hits=0,
                              prefix_misses=1, serving=wt.EngineServing(
                                  256, 2048, 65536, (1, 2, 4), "2048 tokens per step"))
SUBMIT_REPLY = wt.SubmitReply("r-1", (wt.PlaceholderBinding("x", "v-1"),
                                      wt.PlaceholderBinding("y", "v-2")))

# One instance of every message (a test below fails when a message has none here).
EXAMPLES: list[wt.WireMessage] = [
    wt.ErrorReply(wt.ErrorDetail("NotFoundError", "no such variable")),
    wt.Health("degraded", 2, 1),
    wt.SessionCreated("s-1", "token"),
    wt.SessionDeleted("s-1"),
    wt.SessionStats("s-1", "default", {"done": 2, "running": 1}, 3, 0),
    wt.SubmitRequest("s-1", "A {{input:x}} {{output:y}}", (
        wt.PlaceholderSpec("x", "input", value="hi", transforms=parse_transforms(
            [{"type": "json_path", "path": "a.0"}], "t")), OUTPUT),
        SamplingParams(max_tokens=7, stop=("\n",), seed=3), wait=True, stream=("y",),
        chat=wt.ChatSpec("Be brief.")),
    wt.SubmitRequest("s-1", "{{output:y}}", chat=wt.ChatSpec()),
    wt.SubmitBatchRequest("s-1", (
        wt.BatchCall("{{output:a}}"),
        wt.BatchCall("{{input:a}} {{output:b}}", (
            wt.PlaceholderSpec("a", "input", ref=wt.BatchRef(0, "a")),)))),
    SUBMIT_REPLY,
    dataclasses.replace(SUBMIT_REPLY, values={"y": "text"}),
    wt.BatchReply((SUBMIT_REPLY, wt.ErrorReply(wt.ErrorDetail("TemplateSyntaxError", "bad")))),
    wt.CreateVariableRequest("s-1", "topic", "birds"),
    wt.CreateVariableRequest("s-1"),
    wt.SetVariableRequest("s-1", "birds"),
    wt.VariableId("v-1"),
    wt.GetRequest("s-1", "v-1", Criterion.THROUGHPUT, 2.5),
    wt.Value("text"),
    wt.TextChunk("te"),
    wt.EngineList((ENGINE, ENGINE.public())),
    wt.RegisterEngineRequest("e1", "http://127.0.0.1:9", latency_capacity=100, secret="s" * 16),
    wt.Registered("e1"),
    wt.Stats(1, 1000, 0, 4, 5, (ENGINE,)),
    wt.Graph(True, False, (
        wt.CallNode("r-1", "call", "{{output:y}}", "done", "latency", None, "e0", ("h1",),
                    {"submitted": 0.5}, {"ready": 0.1}, None, {}, {"y": "v-1"}),
        wt.VariableNode("v-1", "variable", "y", True, "latency", None)),
        (wt.GraphLink("r-1", "v-1"),)),
]


def message_types() -> list[type[wt.WireMessage]]:
    return [t for t in vars(wt).values() if isinstance(t, type)
            and issubclass(t, wt.WireMessage) and t is not wt.WireMessage]


def test_every_message_has_an_example():
    nested = {wt.ErrorDetail, wt.PlaceholderSpec, wt.PlaceholderBinding, wt.BatchRef,
              wt.BatchCall, wt.ChatSpec, wt.SamplingOverride, wt.EngineDescription,
              wt.EngineServing, wt.CallNode, wt.VariableNode, wt.GraphLink}
    assert set(message_types()) - nested == {type(m) for m in EXAMPLES}


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: type(m).__name__)
def test_round_trip_through_json(message):
    wire = json.loads(json.dumps(message.to_wire()))
    assert type(message).from_wire(wire) == message


def test_wire_form_is_the_documented_one():
    request = EXAMPLES[5]
    wire = request.to_wire()
    assert wire["chat"] == {"system": "Be brief."} and wt.ChatSpec().to_wire() is True
    assert wire["placeholders"][0] == {"name": "x", "in_out": "input", "value": "hi",
                                       "transforms": [{"type": "json_path", "path": "a.0"}]}
    assert wire["placeholders"][1]["sampling"] == {"max_tokens": 3}  # only what it overrides
    assert "values" not in SUBMIT_REPLY.to_wire()  # left out unless "wait" filled it
    assert ENGINE.public().to_wire() == {"name": "e0", "kind": "simulated", "model": "sim",
                                         "healthy": True, "latency_capacity": 6144,
                                         "throughput_capacity": 32768, "serving": {
                                             "max_num_seqs": 256, "max_batch_tokens": 2048,
                                             "kv_cache_tokens": 65536,
                                             "graph_batch_sizes": [1, 2, 4],
                                             "step_token_budget": "2048 tokens per step"}}
    batch = EXAMPLES[7].to_wire()
    assert batch["calls"][1]["placeholders"][0]["ref"] == {"call": 0, "output": "a"}


def test_a_per_output_override_keeps_the_calls_other_fields():
    request = wt.SubmitRequest("s", "{{output:y}} {{output:z}}", (OUTPUT,),
                               SamplingParams(max_tokens=50, temperature=0.5))
    assert request.output_sampling("y") == SamplingParams(max_tokens=3, temperature=0.5)
    assert request.output_sampling("z") == request.sampling


SUBMIT = {"session_id": "s", "prompt": "{{input:x}} {{output:y}}",
          "placeholders": [{"name": "x", "in_out": "input", "value": "v"}]}


@pytest.mark.parametrize("cls, body, named", [
    (wt.SubmitRequest, {**SUBMIT, "prompt": 3}, "submit.prompt must be a string, got 3"),
    (wt.SubmitRequest, {**SUBMIT, "wait": "yes"}, "submit.wait must be a boolean"),
    (wt.SubmitRequest, {**SUBMIT, "extra": 1}, "unknown field(s) ['extra']"),
    (wt.SubmitRequest, {"session_id": "s"}, "submit.prompt is required"),
    (wt.SubmitRequest, {**SUBMIT, "session_id": ""}, "'session_id' must be a non-empty"),
    (wt.SubmitRequest, {**SUBMIT, "placeholders": [{"name": "x", "in_out": "in"}]},
     "submit.placeholders[0].in_out must be one of ['input', 'output'], got 'in'"),
    (wt.SubmitRequest, {**SUBMIT, "placeholders": [{"name": "x", "in_out": "input"}]},
     "submit.placeholders[0]: placeholder 'x': an input needs exactly one"),
    (wt.SubmitRequest, {**SUBMIT, "placeholders": [{"name": "y", "in_out": "output",
                                                    "sampling": {"top_p": 2}}]},
     "invalid sampling.top_p=2"),
    (wt.SubmitRequest, {**SUBMIT, "placeholders": [{"name": "y", "in_out": "output",
                                                    "transforms": ["nope"]}]},
     "submit.placeholders[0].transforms[0]"),
    (wt.SubmitRequest, {**SUBMIT, "placeholders": [{"name": "x", "in_out": "input",
                                                    "ref": {"call": 0, "output": "a"}}]},
     "'ref' is for submit_batch only"),
    (wt.SubmitRequest, {**SUBMIT, "sampling": {"max_tokens": True}}, "sampling.max_tokens"),
    (wt.SubmitRequest, {**SUBMIT, "stream": ["x"]}, "'stream' names ['x'], not outputs"),
    (wt.SubmitRequest, {**SUBMIT, "chat": {"system": 1}}, "chat.system must be a string"),
    (wt.BatchCall, {k: v for k, v in SUBMIT.items() if k != "session_id"} | {"wait": ["x"]},
     "'wait' names ['x'], not outputs"),
    (wt.GetRequest, {"session_id": "s", "semantic_var_id": "v", "criteria": "fast"},
     "unknown criteria 'fast'"),
    (wt.GetRequest, {"session_id": "s", "semantic_var_id": "v", "timeout": -1},
     "'timeout' must be a positive number"),
    (wt.GetRequest, {"session_id": "s", "semantic_var_id": 5}, "get.semantic_var_id must be"),
    (wt.CreateVariableRequest, {"session_id": "s", "name": 1}, "variables.name must be a"),
    (wt.SetVariableRequest, {"session_id": "s"}, "set_variable.value is required"),
    (wt.SubmitBatchRequest, {"session_id": "s", "calls": []}, "'calls' must be a list of 1"),
    (wt.SubmitBatchRequest, {"session_id": "s", "calls": {}}, "submit_batch.calls must be a"),
    (wt.RegisterEngineRequest, {"name": "e", "url": "u", "latency_capacity": 1.5},
     "register.latency_capacity must be an integer"),
    (wt.RegisterEngineRequest, {"name": "e", "url": "u", "secret": ""}, "'secret' must be"),
    (wt.SubmitReply, {"request_id": "r", "placeholders": [{"name": "x"}]},
     "SubmitReply.placeholders[0].semantic_var_id is required"),
])
def test_each_bad_field_is_a_typed_error_naming_it(cls, body, named):
    with pytest.raises(InvalidRequestError) as info:
        cls.from_wire(body)
    assert named in str(info.value)


def test_a_bad_message_fails_where_it_is_built_too():
    with pytest.raises(InvalidRequestError, match="an output cannot have a 'value'"):
        wt.PlaceholderSpec("y", "output", value="v")
    with pytest.raises(InvalidRequestError, match="given more than once"):
        wt.SubmitRequest("s", "{{output:y}}", (OUTPUT, OUTPUT))
    with pytest.raises(InvalidRequestError, match="index of an earlier call"):
        wt.SubmitBatchRequest("s", (wt.BatchCall("{{input:a}}", (
            wt.PlaceholderSpec("a", "input", ref=wt.BatchRef(0, "a")),)),))


def test_a_batch_rejects_bad_calls_one_by_one():
    batch = wt.SubmitBatchRequest.from_wire({"session_id": "s", "calls": [
        {"prompt": "{{output:a}}"}, {"prompt": 1}, {"prompt": "{{input:a}}", "placeholders": [
            {"name": "a", "in_out": "input", "ref": {"call": 2, "output": "a"}}]}]})
    assert isinstance(batch.calls[0], wt.BatchCall)
    rejected = batch.calls[1:]
    assert all(isinstance(c, wt.RejectedCall) for c in rejected)
    assert "calls[1].prompt must be a string" in str(rejected[0].error)  # type: ignore[union-attr]
    assert "calls[2]: 'ref' must be" in str(rejected[1].error)  # type: ignore[union-attr]
    with pytest.raises(TypeError):  # what the manager parsed is never sent on
        batch.to_wire()


def test_an_error_reply_is_the_typed_error_again():
    reply = wt.ErrorReply.of(NotFoundError("no such variable"))
    error = wt.ErrorReply.from_wire(json.loads(json.dumps(reply.to_wire()))).to_exception(404)
    assert type(error) is NotFoundError and str(error) == "no such variable"


# --- the frontend and the manager agree ----------------------------------------------------------

@pytest.fixture
async def manager():
    async with manager_with_recording_engine() as mgr:
        yield mgr


def _fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


async def test_the_graph_and_engine_descriptions_carry_exactly_the_typed_fields(manager):
    """The graph reply is built typed (a node the manager adds is a CallNode or VariableNode)
    and survives the wire; engine descriptions are dicts: a key the manager adds (or drops)
    without the type must fail here, not vanish from the API."""
    session = manager.create_session()
    manager.submit(session, wt.SubmitRequest(session.session_id, "{{input:x}} {{output:y}}", (
        wt.PlaceholderSpec("x", "input", value="v"),)))
    graph = manager.graph(session)
    assert isinstance(graph, wt.Graph)
    assert [type(n) for n in graph.nodes] == [wt.VariableNode, wt.VariableNode, wt.CallNode]
    assert wt.Graph.from_wire(graph.to_wire()) == graph
    for state in manager.engines:
        assert set(state.describe()) == _fields(wt.EngineDescription)


def test_a_reply_field_the_client_does_not_know_fails_to_parse():
    wire = {"session_id": "s", "token": "t", "expires": 3}
    with pytest.raises(InvalidRequestError, match=r"unknown field\(s\) \['expires'\]"):
        wt.SessionCreated.from_wire(wire)


async def test_every_route_answers_the_frontend_with_its_typed_reply():
    """A real server, the frontend's HttpTransport, a typed request and reply per route; the
    raw JSON of each reply has exactly the reply type's fields (none left out by to_wire)."""
    from parrot.frontend.transport import HttpTransport

    admin = "admin-secret-of-16-chars"
    async with running(config({"admin_token": admin})) as (server, http):
        transport = HttpTransport(server.url)
        try:
            created = await transport.request("POST", "/v1/sessions", wt.SessionCreated)
            sid, token = created.session_id, created.token
            var = await transport.request("POST", "/v1/variables", wt.VariableId,
                                          wt.CreateVariableRequest(sid, "x"), token)
            batch = await transport.request("POST", "/v1/submit_batch", wt.BatchReply,
                                            wt.SubmitBatchRequest(sid, (wt.BatchCall(
                                                "{{input:x}} {{output:y}}", (wt.PlaceholderSpec(
                                                    "x", "input", var.semantic_var_id),)),)),
                                            token)
            assert isinstance(batch.results[0], wt.SubmitReply)
            out = batch.results[0].var_ids()["y"]
            await transport.request("POST", f"/v1/variables/{var.semantic_var_id}",
                                    wt.VariableId, wt.SetVariableRequest(sid, "hi"), token)
            value = await transport.request("POST", "/v1/get", wt.Value,
                                            wt.GetRequest(sid, out), token)
            assert len(value.value) == 64 * 4
            waited = await transport.request("POST", "/v1/submit", wt.SubmitReply,
                                             wt.SubmitRequest(sid, "{{output:z}}", wait=True),
                                             token)
            assert waited.values is not None and set(waited.values) == {"z"}
            graph = await transport.request("GET", f"/v1/sessions/{sid}/graph", wt.Graph, None,
                                            token)
            assert [n.state for n in graph.nodes if isinstance(n, wt.CallNode)] == ["done"] * 2
            stats = await transport.request("GET", f"/v1/sessions/{sid}/stats",
                                            wt.SessionStats, None, token)
            assert stats.calls == {"done": 2} and stats.variables == 3
            engines = await transport.request("GET", "/v1/engines", wt.EngineList)
            assert engines.engines[0].running_calls is None  # the admin's only
            full = await transport.request("GET", "/v1/engines", wt.EngineList, token=admin)
            assert full.engines[0].calls_done == 2
            await transport.request("GET", "/v1/stats", wt.Stats, token=admin)
            await transport.request("GET", "/healthz", wt.Health)
            with pytest.raises(UnauthorizedError):
                await transport.request("POST", "/v1/engines", wt.Registered,
                                        wt.RegisterEngineRequest("e1", "http://e"))
            await transport.request("DELETE", f"/v1/sessions/{sid}", wt.SessionDeleted,
                                    token=token)
        finally:
            await transport.close()
        # The raw replies: every field of the type is on the wire, nothing else.
        status, raw, _ = await call(http, "GET", "/v1/engines", headers=bearer(admin))
        assert set(raw["engines"][0]) == _fields(wt.EngineDescription)
        sid, auth = await new_session(http)
        status, raw, _ = await call(http, "GET", f"/v1/sessions/{sid}/stats", headers=auth)
        assert set(raw) == _fields(wt.SessionStats)


async def test_a_session_is_authenticated_before_its_body_is_judged():
    async with running(config()) as (_, http):
        sid, auth = await new_session(http)
        bad = {"session_id": sid, "prompt": 3}
        status, reply, _ = await call(http, "POST", "/v1/submit", bad)
        assert (status, reply["error"]["type"]) == (401, "UnauthorizedError")
        status, reply, _ = await call(http, "POST", "/v1/submit", bad, auth)
        assert status == 400 and "submit.prompt must be a string" in reply["error"]["message"]


async def test_the_frontend_sends_what_the_manager_parses(manager):
    """Every message a Session sends, parsed by the manager's own route types."""
    from parrot.frontend.transport import InProcessTransport

    sent: list[tuple[str, wt.WireMessage]] = []

    class Spy(InProcessTransport):
        async def request(self, method, path, reply, body=None, token=None):  # type: ignore
            if body is not None:
                sent.append((path, body))
            return await super().request(method, path, reply, body, token)

    fn = parrot.semantic_function(prompt="{{input:a}} {{output:b}}", max_tokens=3,
                                  outputs={"b": {"temperature": 0.5}}, transforms={"b": ["strip"]})
    async with parrot.Session(transport=Spy(manager)) as session:
        topic = session.variable("topic", "owls")
        first = fn(topic)
        second = fn(first)
        await second.aget()         # awaited at once: the batch waits for it
        await first.aget()          # read later: a get of its own
    parsers = {"/v1/submit_batch": wt.SubmitBatchRequest, "/v1/variables": wt.CreateVariableRequest,
               "/v1/get": wt.GetRequest}
    assert [p for p, _ in sent] == ["/v1/variables", "/v1/submit_batch", "/v1/get"]
    for path, body in sent:
        assert parsers[path].from_wire(json.loads(json.dumps(body.to_wire()))) == body
    batch = sent[1][1]
    assert isinstance(batch, wt.SubmitBatchRequest)
    assert batch.calls[1].placeholders[0].ref == wt.BatchRef(0, "b")  # type: ignore[union-attr]
    assert [c.wait for c in batch.calls] == [(), ("b",)]  # type: ignore[union-attr]
