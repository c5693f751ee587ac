"""The `openai` engine kind against a real second server: parrot-serve (simulated engine) in
its own process serves the OpenAI API; the engine drives it, directly and as the engine of
another parrot-serve process that the official `openai` client and a Parrot session talk to."""

from __future__ import annotations

import asyncio

import openai
import pytest

import parrot
from parrot.engines.factory import create_engine
from parrot.engines.latency_model import EngineConfigError
from parrot.engines.openai_engine import OpenAIEngine, OpenAIEngineConfig
from parrot.engines.protocol import FillRequest, GenerateRequest
from parrot.errors import (EngineUnavailableError, InvalidRequestError, PromptTooLongError,
                           UnknownContextError)
from parrot.sampling import SamplingParams
from tests.serve_process import SIM_ENGINE, parrot_serve


@pytest.fixture(scope="module")
def backend_url(tmp_path_factory):
    config = {"policy": {"name": "least_queue"}, "engines": [{"name": "sim-0", **SIM_ENGINE}]}
    with parrot_serve(config, tmp_path_factory.mktemp("backend")) as (url, _):
        yield url


@pytest.fixture
async def engine(backend_url):
    eng = create_engine("openai", "oa", {"url": backend_url, "max_context_len": 2048})
    await eng.start()
    yield eng
    await eng.close()


async def test_fill_fork_generate_free(engine: OpenAIEngine):
    info = await engine.info()
    assert (info.kind, info.model, info.max_context_len) == ("openai", "simulated", 2048)
    assert await engine.healthz()
    filled = await engine.fill(FillRequest("sys", text="You are a parrot. " * 4))
    assert filled.context_len == 18  # 72 characters, estimated at 4 a token
    chunks = [c async for c in engine.generate(GenerateRequest(
        "c1", parent_context_id="sys", sampling=SamplingParams(max_tokens=3)))]
    text = "".join(c.text for c in chunks)
    assert len(text) == 12 and chunks[-1].finish_reason == "length"
    # the tokens generated, as the server's usage counts them (no ids come over the wire)
    assert sum(len(c.token_ids) for c in chunks) == 3
    assert [c.finish_reason for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    # the generated text stays in the context; the parent is untouched
    assert engine.context_text("c1") == "You are a parrot. " * 4 + text
    assert engine.context_text("sys") == "You are a parrot. " * 4
    stats = await engine.stats()
    assert stats.num_contexts == 2 and stats.num_running == 0
    # time per output token: one Generate, its 3 text events counted as tokens; the
    # backend's simulated decode steps take time, so the sum is positive
    assert stats.counter("tpot_generates") == 1 and stats.counter("tpot_us_sum") > 0
    await engine.free_context("c1")
    with pytest.raises(UnknownContextError):
        await engine.free_context("c1")
    with pytest.raises(UnknownContextError):
        await engine.fill(FillRequest("c2", parent_context_id="gone", text="x"))


async def test_a_prompt_in_the_generate_is_sent_with_it(engine: OpenAIEngine):
    assert (await engine.info()).takes_prompt_in_generate
    await engine.fill(FillRequest("sys", text="You are a parrot. " * 4))
    chunks = [c async for c in engine.generate(GenerateRequest(
        "c1", parent_context_id="sys", sampling=SamplingParams(max_tokens=3),
        text="Say hi. "))]
    text = "".join(c.text for c in chunks)
    # the prompt's length as a Fill of it reports it (estimated at 4 characters a token)
    assert [c.prompt_len for c in chunks][0] == 20
    assert all(c.prompt_len is None for c in chunks[1:])
    assert engine.context_text("c1") == "You are a parrot. " * 4 + "Say hi. " + text
    await engine.free_context("c1")
    await engine.free_context("sys")


async def test_errors(engine: OpenAIEngine, backend_url):
    with pytest.raises(PromptTooLongError):
        await engine.fill(FillRequest("big", text="x" * 4 * 3000))
    wrong = OpenAIEngine("w", OpenAIEngineConfig(backend_url, model="no-such-model"))
    try:
        with pytest.raises(InvalidRequestError, match="404"):
            async for _ in wrong.generate(GenerateRequest("c")):
                pass
    finally:
        await wrong.close()
    down = OpenAIEngine("d", OpenAIEngineConfig("http://127.0.0.1:9", model="m"))
    try:
        assert not await down.healthz()
        with pytest.raises(EngineUnavailableError):
            async for _ in down.generate(GenerateRequest("c")):
                pass
    finally:
        await down.close()
    with pytest.raises(EngineConfigError, match="unknown key"):
        create_engine("openai", "x", {"url": backend_url, "modle": "m"})
    with pytest.raises(EngineConfigError, match="url"):
        create_engine("openai", "x", {"url": "localhost:8000"})


def test_parrot_serve_on_an_openai_engine(backend_url, tmp_path):
    """parrot-serve whose only engine is another server's OpenAI API: the openai client and
    a semantic-variable chain both work through it."""
    config = {"policy": {"name": "app_centric"},
              "engines": [{"name": "upstream", "kind": "openai", "in_process": True,
                           "params": {"url": backend_url}}]}
    with parrot_serve(config, tmp_path) as (url, _):
        with openai.OpenAI(base_url=url + "/v1", api_key="unused") as client:
            assert [m.id for m in client.models.list().data] == ["simulated"]
            reply = client.completions.create(model="simulated", prompt="Hi", max_tokens=4)
            assert len(reply.choices[0].text) == 16
            assert reply.choices[0].finish_reason == "length"
            assert reply.usage.completion_tokens == 4   # the upstream server's own count
            chunks = list(client.chat.completions.create(
                model="simulated", messages=[{"role": "user", "content": "Hi"}],
                max_tokens=3, stream=True))
            assert len("".join(c.choices[0].delta.content or "" for c in chunks)) == 12

        @parrot.semantic_function(max_tokens=2)
        def step(x, y):
            """Improve {{input:x}} -> {{output:y}}"""

        async def chain() -> str:
            async with parrot.Session(url):
                return await step(step("draft")).aget()

        assert len(asyncio.run(chain())) == 8


async def test_a_server_without_usage_is_counted_one_token_per_text_event():
    import json

    from aiohttp import web

    async def completions(request: web.Request) -> web.StreamResponse:
        assert (await request.json())["stream_options"] == {"include_usage": True}
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        events = [{"choices": [{"text": t, "finish_reason": None}]} for t in ("a", "b", "c")]
        events.append({"choices": [{"text": "d", "finish_reason": "length"}]})  # no usage
        for event in events:
            await response.write(f"data: {json.dumps(event)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        return response

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    engine = OpenAIEngine("old", OpenAIEngineConfig(f"http://127.0.0.1:{port}", model="m"))
    try:
        chunks = [c async for c in engine.generate(GenerateRequest("c"))]
        assert "".join(c.text for c in chunks) == "abcd"
        assert [len(c.token_ids) for c in chunks] == [1, 1, 1, 1]
        assert chunks[-1].finish_reason == "length"
    finally:
        await engine.close()
        await runner.cleanup()


@pytest.mark.parametrize("constraint, valid", [
    (parrot.json({"type": "object", "properties": {"n": {"type": "integer"}},
                  "required": ["n"]}), lambda t: isinstance(__import__("json").loads(t)["n"],
                                                             int)),
    (parrot.regex(r"[a-f]{6}"), lambda t: __import__("re").fullmatch(r"[a-f]{6}", t)),
    (parrot.choice(["yes", "no"]), lambda t: t in ("yes", "no")),
])
async def test_constraints_pass_through_to_the_server(engine: OpenAIEngine, constraint, valid):
    """The constraint travels in the completions body (response_format / guided_*); the
    server behind (Parrot on a simulated engine) decodes a value valid for it."""
    await engine.fill(FillRequest("q", text="Answer: "))
    result = await engine.generate_all(GenerateRequest("a", parent_context_id="q", sampling=(
        SamplingParams(max_tokens=8, constraint=constraint))))
    assert valid(result.text), result.text
