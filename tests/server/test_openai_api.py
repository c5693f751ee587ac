"""The OpenAI-compatible front door, through the official `openai` client against a real
parrot-serve process on simulated engines, and in-process against an echo engine (whose answer
is its own context, so tests see exactly the prompt the manager sent)."""

from __future__ import annotations

import asyncio
import json
import aiohttp
import openai
import pytest

from parrot.chat import ChatTemplate
from tests.echo_engine import echo_server
from tests.serve_process import SIM_ENGINE, parrot_serve

ADMIN = "admin-token-for-the-engine-counters"
SIM_CONFIG = {"manager": {"admin_token": ADMIN}, "policy": {"name": "least_queue"},
              "engines": [{"name": "sim-0", **SIM_ENGINE}, {"name": "sim-1", **SIM_ENGINE}]}


@pytest.fixture(scope="module")
def serve_url(tmp_path_factory):
    with parrot_serve(SIM_CONFIG, tmp_path_factory.mktemp("serve")) as (url, _):
        yield url


@pytest.fixture
def client(serve_url):
    with openai.OpenAI(base_url=serve_url + "/v1", api_key="unused") as c:
        yield c


# --- the official client against parrot-serve on simulated engines ------------------------------

def test_models_lists_what_the_engines_serve(client):
    models = client.models.list()
    assert [m.id for m in models.data] == ["simulated"]
    assert client.models.retrieve("simulated").owned_by == "parrot"


def test_completion_with_n_seed_and_usage(client):
    reply = client.completions.create(model="simulated", prompt="The quick brown fox",
                                      max_tokens=5, n=3, seed=7, stop=["\n"])
    assert reply.object == "text_completion" and len(reply.choices) == 3
    assert [c.index for c in reply.choices] == [0, 1, 2]
    # the simulated engine writes exactly max_tokens 4-character words, seeded per choice
    assert all(len(c.text) == 20 and c.finish_reason == "length" for c in reply.choices)
    assert len({c.text for c in reply.choices}) == 3
    # (the simulated engine's filler depends on the context id too, so a seed does not repeat
    # across requests there; tests/server/test_openai_smollm2.py checks that on a real model)
    assert reply.usage.completion_tokens == 15
    assert reply.usage.prompt_tokens == 5  # 19 characters at 4 per simulated token
    assert reply.usage.total_tokens == 20


def test_completion_of_several_prompts(client):
    reply = client.completions.create(model="simulated", prompt=["a", "b"], max_tokens=2, n=2)
    assert len(reply.choices) == 4 and reply.usage.completion_tokens == 8


def test_completion_stream_one_chunk_per_token(client):
    pieces, reasons = [], []
    for chunk in client.completions.create(model="simulated", prompt="stream me",
                                           max_tokens=6, seed=1, stream=True):
        assert chunk.object == "text_completion"
        pieces.append(chunk.choices[0].text)
        reasons.append(chunk.choices[0].finish_reason)
    assert len([p for p in pieces if p]) == 6  # one chunk per token
    assert all(len(p) == 4 for p in pieces if p)  # the simulated engine's 4-character words
    assert reasons[-1] == "length" and set(reasons[:-1]) == {None}


def test_chat_and_chat_stream_with_usage(client):
    messages = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Say hi."}]
    reply = client.chat.completions.create(model="simulated", messages=messages, max_tokens=4,
                                           seed=3)
    assert reply.object == "chat.completion"
    assert reply.choices[0].message.role == "assistant"
    assert len(reply.choices[0].message.content) == 16
    # ChatML of the two messages plus the assistant header: 101 characters, 26 simulated tokens
    assert reply.usage.prompt_tokens == 26 and reply.usage.completion_tokens == 4
    chunks = list(client.chat.completions.create(
        model="simulated", messages=messages, max_tokens=4, seed=3, stream=True,
        stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(text) == 16 and len(chunks) == 7  # role, 4 tokens, finish, usage
    assert chunks[-2].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == 30


def test_errors_have_openai_shape(client):
    with pytest.raises(openai.NotFoundError) as not_found:
        client.completions.create(model="gpt-4", prompt="x")
    assert not_found.value.body["type"] == "not_found_error"
    assert not_found.value.body["param"] == "model"
    with pytest.raises(openai.BadRequestError) as bad:
        client.completions.create(model="simulated", prompt="x", temperature=-1)
    assert bad.value.body["param"] == "temperature"
    with pytest.raises(openai.BadRequestError) as unsupported:
        client.completions.create(model="simulated", prompt="x", logprobs=2)
    assert unsupported.value.body["param"] == "logprobs"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="simulated", messages=[{"role": "robot",
                                                                     "content": "x"}])
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="simulated", prompt=[1, 2, 3])


def test_a_prompt_over_the_window_is_context_length_exceeded(client):
    # the simulated engines' window is 4096 tokens (4 characters each)
    long_prompt = "word " * 4000   # 5,000 tokens
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as too_long:
            reply = client.completions.create(model="simulated", prompt=long_prompt,
                                              max_tokens=4, stream=stream)
            list(reply) if stream else reply  # noqa: B018 - a stream raises while read
        error = too_long.value.body
        assert too_long.value.status_code == 400
        assert error["code"] == "context_length_exceeded" and error["param"] == "prompt"
        assert error["type"] == "invalid_request_error"
        assert "maximum context length is 4096 tokens" in error["message"]
        assert "c-" not in error["message"]  # no internal context ids
    with pytest.raises(openai.BadRequestError) as chat:
        client.chat.completions.create(model="simulated",
                                       messages=[{"role": "user", "content": long_prompt}])
    assert chat.value.body["code"] == "context_length_exceeded"
    assert chat.value.body["param"] == "messages"
    # a prompt that fits, with max_tokens past what is left of the window: the same 400
    with pytest.raises(openai.BadRequestError) as plus_output:
        client.completions.create(model="simulated", prompt="word " * 3000, max_tokens=1000)
    assert plus_output.value.body["code"] == "context_length_exceeded"
    assert "plus max_tokens (1000)" in plus_output.value.body["message"]


def test_unknown_and_newer_fields_are_accepted_and_ignored(client):
    reply = client.chat.completions.create(
        model="simulated", messages=[{"role": "user", "content": "hi"}], max_tokens=2,
        reasoning_effort="low", parallel_tool_calls=True, user="u", store=False,
        extra_body={"prompt_cache_key": "k", "a_field_from_the_future": {"x": 1},
                    "min_p": 0.0, "stream_options_v2": True})
    assert reply.choices[0].finish_reason == "length"
    reply = client.completions.create(model="simulated", prompt="x", max_tokens=2,
                                      extra_body={"top_k": -1, "priority": 3})
    assert len(reply.choices[0].text) == 8
    # a field whose value would change the answer stays a 400 that names it
    for field, value in (("min_p", 0.1), ("guided_json", {"type": "object"}),
                         ("min_tokens", 5), ("chat_template", "{{ x }}")):
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(
                model="simulated", messages=[{"role": "user", "content": "hi"}],
                max_tokens=2, extra_body={field: value})
        assert refused.value.body["param"] == field
        assert "would change the answer" in refused.value.body["message"]


def test_requests_are_calls_the_policy_placed(client, serve_url):
    async def engines() -> list[dict]:
        async with aiohttp.ClientSession() as http:
            async with http.get(serve_url + "/v1/engines",  # counters: the admin's only
                                headers={"Authorization": f"Bearer {ADMIN}"}) as resp:
                return (await resp.json())["engines"]

    before = sum(e["calls_done"] for e in asyncio.run(engines()))
    client.completions.create(model="simulated", prompt="x", max_tokens=1, n=4)
    assert sum(e["calls_done"] for e in asyncio.run(engines())) == before + 4


# --- in-process, against an echo engine --------------------------------------------------------

async def post(url: str, body: dict) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json=body) as resp:
            return resp.status, await resp.json()


async def test_a_chat_without_max_tokens_on_the_sim_config_ends_by_itself():
    """configs/sim.yaml (what `parrot-serve --config sim` runs): a chat that sets no
    max_tokens (LangChain's default) ends its turn like a model, not at the window."""
    import yaml

    from parrot.serve_config import ServeConfig
    from parrot.server.service import ParrotServer
    from tests.serve_process import ROOT

    data = yaml.safe_load((ROOT / "configs/sim.yaml").read_text())
    for engine in data["engines"]:  # the same engines, on no clock (the test's time)
        engine["in_process"] = True
        engine["params"]["zero_latency"] = True
        engine["params"]["profile"] = "a100_llama13b"  # the file's path is relative to it
    server = ParrotServer(ServeConfig.from_mapping(data))
    await server.start(port=0)
    try:
        async with openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="x") as client:
            reply = await client.chat.completions.create(
                model="llama-13b", messages=[{"role": "user", "content": "Tell me a story."}],
                n=4)
        assert {c.finish_reason for c in reply.choices} == {"stop"}
        # mean 128 tokens per turn: far from the 8,192-token window
        assert reply.usage.completion_tokens < 4 * 1024
    finally:
        await server.stop()


async def test_sampling_defaults_are_openais_on_the_openai_routes_only():
    """OpenAI's defaults (temperature 1, top_p 1) when a request omits them: `n` choices are
    samples, not n copies of the greedy answer. The wire API keeps its own (greedy)."""
    server = await echo_server(None)
    engine = server.manager.engines.get("echo").engine
    try:
        status, _ = await post(server.url + "/v1/completions",
                               {"model": "echo-model", "prompt": "x", "max_tokens": 8})
        assert status == 200
        status, _ = await post(server.url + "/v1/chat/completions", {
            "model": "echo-model", "messages": [{"role": "user", "content": "x"}],
            "temperature": 0.3})
        assert status == 200
        assert [(s.temperature, s.top_p) for s in engine.samplings] == [(1.0, 1.0), (0.3, 1.0)]
        async with aiohttp.ClientSession(base_url=server.url) as http:
            async with http.post("/v1/sessions") as resp:
                created = await resp.json()
            async with http.post("/v1/submit", headers={
                    "Authorization": f"Bearer {created['token']}"}, json={
                    "session_id": created["session_id"], "prompt": "a {{output:y}}",
                    "placeholders": [], "wait": True}) as resp:
                assert resp.status == 200, await resp.text()
        assert engine.samplings[-1].temperature == 0.0   # the wire API's documented default
    finally:
        await server.stop()


async def test_chat_renders_the_models_template():
    template = ChatTemplate("{{ bos_token }}{% for m in messages %}[{{ m['role'] }}] "
                            "{{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}"
                            "[assistant] {% endif %}", bos_token="<s>")
    server = await echo_server(template)
    try:
        status, reply = await post(server.url + "/v1/chat/completions", {
            "model": "echo-model", "messages": [{"role": "user", "content": "{{input:x}} hi"}]})
        assert status == 200, reply
        # placeholder-looking text is text; no max_tokens: the turn runs to its end ("stop")
        assert reply["choices"][0]["message"]["content"] == "<s>[user] {{input:x}} hi\n[assistant] "
        assert reply["choices"][0]["finish_reason"] == "stop"
    finally:
        await server.stop()


async def test_the_first_chat_loads_the_renderer_beside_the_loop(monkeypatch):
    """The first chat render imports transformers' renderer (a second or more): it runs in a
    thread, so no other request waits for it; later chats find it loaded."""
    import threading

    from parrot.server import openai_api, wire_routes

    loaded: list[bool] = []
    threads: list[int] = []

    def load() -> None:
        threads.append(threading.get_ident())
        loaded.append(True)

    for module in (openai_api, wire_routes):
        monkeypatch.setattr(module, "renderer_loaded", lambda: bool(loaded))
        monkeypatch.setattr(module, "load_renderer", load)
    server = await echo_server(None)
    try:
        for _ in range(2):
            status, reply = await post(server.url + "/v1/chat/completions", {
                "model": "echo-model", "messages": [{"role": "user", "content": "hi"}]})
            assert status == 200, reply
        assert len(threads) == 1 and threads[0] != threading.get_ident()
    finally:
        await server.stop()


async def test_engines_without_template_get_chatml():
    server = await echo_server(None)
    try:
        status, reply = await post(server.url + "/v1/chat/completions", {
            "model": "echo-model", "messages": [{"role": "user", "content": "hi"}]})
        assert reply["choices"][0]["message"]["content"] == \
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    finally:
        await server.stop()


async def test_sse_wire_format_ends_with_done():
    server = await echo_server(None)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(server.url + "/v1/completions", json={
                    "model": "echo-model", "prompt": "abcdefghijklmnopqrstuvwxyz",
                    "max_tokens": 50, "stream": True}) as resp:
                assert resp.headers["Content-Type"].startswith("text/event-stream")
                raw = (await resp.read()).decode()
        events = [e for e in raw.split("\n\n") if e]
        assert all(e.startswith("data: ") for e in events)
        assert events[-1] == "data: [DONE]"
        texts = [json.loads(e[6:])["choices"][0]["text"] for e in events[:-1]]
        assert "".join(texts) == "abcdefghijklmnopqrstuvwxyz"
        assert not list(server.manager.sessions)  # the private session is gone
    finally:
        await server.stop()


async def test_bad_json_and_unknown_route_errors():
    server = await echo_server(None)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(server.url + "/v1/completions", data=b"{nope") as resp:
                assert resp.status == 400
                body = await resp.json()
                assert body["error"]["type"] == "invalid_request_error"
                assert set(body["error"]) == {"message", "type", "param", "code"}
        status, body = await post(server.url + "/v1/completions",
                                  {"model": "echo-model", "prompt": "x", "n": 99})
        assert status == 400 and body["error"]["param"] == "n"
        async with aiohttp.ClientSession() as http:
            async with http.get(server.url + "/v1/chat/completions") as resp:
                assert resp.status == 405 and resp.headers["Allow"] == "POST"
                assert (await resp.json())["error"]["type"] == "invalid_request_error"
    finally:
        await server.stop()


async def test_client_leaving_mid_stream_cancels_its_call():
    server = await echo_server(None, delay=0.05)
    engine = server.manager.engines.get("echo").engine
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(server.url + "/v1/completions", json={
                    "model": "echo-model", "prompt": "x" * 400, "stream": True}) as resp:
                first = await resp.content.readuntil(b"\n\n")
                assert first.startswith(b"data: ")
        for _ in range(100):  # the server notices on its next write
            if engine.cancelled:
                break
            await asyncio.sleep(0.02)
        assert engine.cancelled == 1 and not engine.contexts
        assert not list(server.manager.sessions)
    finally:
        await server.stop()


async def test_extra_body_joins_a_session_with_semantic_variables():
    server = await echo_server(None)
    try:
        async with aiohttp.ClientSession(base_url=server.url) as http:
            async with http.post("/v1/sessions") as resp:
                created = await resp.json()
            sid, auth = created["session_id"], {"Authorization": f"Bearer {created['token']}"}
            async with http.post("/v1/variables", headers=auth,
                                 json={"session_id": sid, "value": "owls"}) as resp:
                topic = (await resp.json())["semantic_var_id"]
            async with openai.AsyncOpenAI(base_url=server.url + "/v1",
                                          api_key=created["token"]) as client:
                reply = await client.completions.create(
                    model="echo-model", prompt="Tell me about {{input:topic}}.", max_tokens=50,
                    extra_body={"parrot": {"session_id": sid, "inputs": {"topic": topic},
                                           "output": "fact"}})
            assert reply.choices[0].text == "Tell me about owls."
            fact = reply.model_extra["parrot"]["semantic_var_ids"][0]
            # the output is a Semantic Variable of the session: a semantic function consumes it
            async with http.post("/v1/submit", headers=auth, json={
                    "session_id": sid, "prompt": "Repeat: {{input:f}} {{output:out}}",
                    "placeholders": [{"name": "f", "in_out": "input", "semantic_var_id": fact}],
                    "sampling": {"max_tokens": 64}, "wait": True}) as resp:
                assert (await resp.json())["values"]["out"] == "Repeat: Tell me about owls. "
            async with openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="wrong") as bad:
                with pytest.raises(openai.AuthenticationError):
                    await bad.completions.create(model="echo-model", prompt="x",
                                                 extra_body={"parrot": {"session_id": sid}})
        assert server.manager.sessions.find(sid) is not None  # the client's session stays
    finally:
        await server.stop()
