"""`var.astream()`: a Semantic Variable's value as it is generated, in-process and over HTTP
(server-sent events), and chat=True semantic functions."""

from __future__ import annotations

import pytest

import parrot
from parrot.chat import ChatTemplate
from parrot.serve_config import ServeConfig
from parrot.server.service import ParrotServer
from parrot.errors import CallFailedError, InvalidRequestError
from parrot.types import CallState
from parrot.wire_types import SubmitReply, SubmitRequest
from tests.echo_engine import echo_server

SLOW_SIM = {"name": "sim-0", "kind": "simulated", "in_process": True,
            "params": {"decode_base_ms": 10, "decode_per_seq_ms": 0, "decode_per_token_ms": 0,
                       "prefill_per_token_ms": 0}}


@parrot.semantic_function(max_tokens=6)
def write(topic, text):
    """Write about {{input:topic}}: {{output:text}}"""


@parrot.semantic_function(max_tokens=6, transforms={"text": ["strip"]})
def write_stripped(topic, text):
    """Write about {{input:topic}}: {{output:text}}"""


@pytest.fixture(params=["in-process engine", "engine process"])
async def server(request):
    engine = {**SLOW_SIM, "in_process": request.param == "in-process engine"}
    srv = ParrotServer(ServeConfig.from_mapping({"policy": {"name": "least_queue"},
                                                 "engines": [engine]}))
    await srv.start(port=0)
    yield srv
    await srv.stop()


def running_calls(server: ParrotServer) -> int:
    return sum(c.state is CallState.RUNNING for s in server.manager.sessions
               for c in s.calls.values())


@pytest.mark.parametrize("over_http", [True, False])
async def test_pieces_arrive_while_the_call_runs(server, over_http):
    session = parrot.Session(server.url) if over_http else parrot.Session(manager=server.manager)
    async with session:
        text = write("birds")
        pieces, running = [], []
        async for piece in text.astream():
            pieces.append(piece)
            running.append(running_calls(server))
        assert len(pieces) == 6 and all(len(p) == 4 for p in pieces)
        assert running[0] == 1  # the first piece came before the call finished
        assert "".join(pieces) == await text.aget()
        # a dependent call's output streams too, after its producer's value flowed in-service
        assert len([p async for p in write(text).astream()]) == 6


async def test_transformed_and_client_set_values_come_whole(server):
    async with parrot.Session(server.url) as session:
        stripped = write_stripped("fish")
        assert [p async for p in stripped.astream()] == [await stripped.aget()]
        var = session.variable("v", "set by me")
        assert [p async for p in var.astream()] == ["set by me"]


@parrot.semantic_function(max_tokens=6, transforms={"doc": [{"type": "json_path",
                                                            "path": "title"}]})
def title_of(doc, text):
    """Title: {{input:doc}} -> {{output:text}}"""


async def test_a_failed_call_raises(server):
    async with parrot.Session(server.url):
        with pytest.raises(CallFailedError, match="input transform failed"):
            async for _ in title_of("not json").astream():
                pass


async def test_chat_function_renders_with_the_engine_template():
    server = await echo_server(ChatTemplate(
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>"
        "{% endfor %}"))

    @parrot.semantic_function(chat=True, system="Be brief.", max_tokens=100)
    def ask(question, answer):
        """Tell me about {{input:question}}. {{output:answer}}"""

    try:
        async with parrot.Session(server.url) as session:
            answer = ask("owls")
            # the echo engine answers with the prompt the manager rendered
            assert await answer.aget() == ("<system>Be brief.</system><user>Tell me about owls."
                                           "</user><assistant>")
            graph = await session.graph()
            prompts = [n.prompt for n in graph.nodes if n.kind == "call"]
            assert prompts == ["<system>Be brief.</system><user>Tell me about "
                               "{{input:question}}.</user><assistant>{{output:answer}}"
                               "</assistant>"]
    finally:
        await server.stop()


async def test_stream_field_is_checked_before_submitting(server):
    async with parrot.Session(server.url) as session:
        with pytest.raises(InvalidRequestError, match="not outputs of the prompt"):
            await session.request("POST", "/v1/submit", SubmitReply, SubmitRequest(
                session.session_id, "{{output:a}}", stream=("b",)))
        assert not server.manager.sessions.get(session.session_id).calls
