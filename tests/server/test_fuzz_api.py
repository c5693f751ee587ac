"""Property-based fuzzing of every route of the manager's HTTP API (hypothesis).

A real ParrotServer (in-process simulated engine) on a loopback port takes ≥10,000 generated
requests per run: well-formed-looking bodies with hostile fields (templates, placeholders,
transforms, sampling, ids, refs), random JSON, random bytes, bad tokens, wrong methods, and raw
malformed HTTP. The properties: no 5xx ever; every 4xx is a JSON error `{error: {type,
message}}`; every 200 is JSON; the service is healthy afterwards.
"""

from __future__ import annotations

import asyncio
import copy
import json
import random
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parrot.server.service import ParrotServer
from tests.server.front_door import config, raw_exchange, split_response

# Hypothesis draws EXAMPLES batches of BATCH requests (its draws cost ~0.5 ms each here, too slow
# for 10,000 fully drawn requests on 2 cores); each drawn request is sent as is and as
# MUTANTS - 1 cheap mutants (a field set to a hostile value, a key dropped, the body cut or
# corrupted, a wrong method or token), seeded from the example so a failure replays exactly.
EXAMPLES, BATCH, MUTANTS = 20, 25, 20   # 10,000 requests


@dataclass
class Harness:
    server: ParrotServer
    http: aiohttp.ClientSession
    sessions: list[tuple[str, str]]      # (session_id, token)
    var_ids: list[str]
    num_sent: int = 0
    statuses: dict[int, int] = field(default_factory=dict)

    @classmethod
    async def start(cls) -> Harness:
        # Short waits: a `get` of an unset variable, and a raw connection kept alive after its
        # answer, would otherwise hold a whole batch up.
        server = ParrotServer(config({"max_get_timeout_s": 0.02, "default_get_timeout_s": 0.02,
                                      "max_body_bytes": 256 * 1024,
                                      "request_header_timeout_s": 1.0,
                                      "request_body_timeout_s": 0.5}))
        await server.start(port=0)
        # A fresh connection per request: a kept-alive one can be closed by the server's header
        # timeout just as the client reuses it (a stall of the loaded 2-core CI box once made a
        # request meet a connection reset), and keep-alive is not what this test is about.
        http = aiohttp.ClientSession(base_url=server.url, connector=aiohttp.TCPConnector(
            force_close=True))
        sessions, var_ids = [], []
        for _ in range(3):
            async with http.post("/v1/sessions") as resp:
                data = await resp.json()
            sessions.append((data["session_id"], data["token"]))
            auth = {"Authorization": f"Bearer {data['token']}"}
            for value in ("known value", None):
                async with http.post("/v1/variables", headers=auth, json={
                        "session_id": data["session_id"], "name": "v", "value": value}) as resp:
                    var_ids.append((await resp.json())["semantic_var_id"])
        return cls(server, http, sessions, var_ids)

    async def stop(self) -> None:
        await self.http.close()
        await self.server.stop()


# --- strategies ---------------------------------------------------------------------------

NAMES = st.sampled_from(["x", "y", "z", "doc", "", "a b", "é", "{{", "x" * 300])
TEXT = st.text(max_size=40)
ODD = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                st.text(max_size=10), st.lists(st.integers(), max_size=3),
                st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))
JSON_VALUES = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(
    allow_nan=False, allow_infinity=False), st.text(max_size=20)),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12)
TRANSFORM = st.one_of(
    st.sampled_from(["strip", "parse_list", "parse_json", "json_path", "regex", "nope"]),
    st.fixed_dictionaries({"type": st.just("regex"), "pattern": st.sampled_from(
        ["(zzz)|", "(a|aa)+$", "(", "A: (.*)", "(?P<n>x)", "\\", "a{99999999}"]),
        "group": st.one_of(st.integers(-2, 3), ODD)}),
    st.fixed_dictionaries({"type": st.just("json_path"), "path": st.one_of(TEXT, ODD)}),
    ODD)
SAMPLING = st.one_of(ODD, st.fixed_dictionaries({}, optional={
    "max_tokens": st.one_of(st.integers(-5, 10), st.integers(8000, 10**7), ODD),
    "temperature": st.one_of(st.floats(-1, 3, allow_nan=False), ODD),
    "top_p": st.one_of(st.floats(-1, 2, allow_nan=False), ODD),
    "stop": st.one_of(st.lists(TEXT, max_size=3), ODD),
    "seed": ODD, "bogus": ODD}))


def templates() -> st.SearchStrategy[str]:
    part = st.one_of(TEXT, NAMES.map(lambda n: f"{{{{input:{n}}}}}"),
                     NAMES.map(lambda n: f"{{{{output:{n}}}}}"),
                     st.sampled_from(["{{", "}}", "{{inp:x}}", "{{output:x}", "[" * 50]))
    return st.lists(part, max_size=6).map("".join)


def placeholder(var_ids: list[str]) -> st.SearchStrategy[Any]:
    ids = st.one_of(st.sampled_from(var_ids), st.just("v-unknown"), ODD)
    return st.one_of(ODD, st.fixed_dictionaries(
        {"name": NAMES, "in_out": st.sampled_from(["input", "output", "inout", 1])},
        optional={"value": st.one_of(TEXT, ODD), "semantic_var_id": ids,
                  "transforms": st.one_of(st.lists(TRANSFORM, max_size=3), ODD),
                  "sampling": SAMPLING,
                  "ref": st.fixed_dictionaries({}, optional={
                      "call": st.one_of(st.integers(-1, 3), st.booleans(), ODD),
                      "output": NAMES})}))


def submit_body(var_ids: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({"prompt": st.one_of(templates(), ODD)}, optional={
        "placeholders": st.one_of(st.lists(placeholder(var_ids), max_size=4), ODD),
        "sampling": SAMPLING, "wait": st.one_of(st.booleans(), ODD), "extra": ODD})


TOOL = st.fixed_dictionaries({"type": st.just("function"), "function": st.fixed_dictionaries(
    {"name": NAMES, "parameters": st.dictionaries(st.text(max_size=8), JSON_VALUES,
                                                   max_size=3)})})
# Bodies past OFF_LOOP_BYTES (64 KiB: parsed, decoded and rendered beside the loop) and up to
# the harness's max_body_bytes (256 KiB): a tool's long description, a long message, many
# prompts.
LONG_TEXT = st.integers(16, 200).map(lambda kib: "d" * (kib * 1024))
BIG_TOOLS = st.lists(st.fixed_dictionaries({"type": st.just("function"), "function":
                                            st.fixed_dictionaries({"name": NAMES,
                                                                   "description": LONG_TEXT})}),
                     min_size=1, max_size=1)
MANY_PROMPTS = st.lists(TEXT, min_size=17, max_size=64)


def openai_body(field_name: str, value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries({"model": st.sampled_from(["simulated", "nope"]),
                                  field_name: value}, optional={
        "max_tokens": st.one_of(st.integers(1, 8), ODD),
        "n": st.one_of(st.integers(1, 4), st.just(16), st.integers(17, 100), ODD),
        "stream": st.one_of(st.booleans(), ODD),
        "stream_options": st.one_of(st.just({"include_usage": True}), ODD),
        "tools": st.one_of(st.lists(TOOL, max_size=40), BIG_TOOLS, ODD),
        "stop": st.one_of(st.lists(TEXT, max_size=20), ODD),
        "top_k": st.one_of(st.integers(-1, 50), st.integers(10**6, 10**7), ODD),
        "seed": ODD, "temperature": ODD,
        "parrot": st.one_of(st.fixed_dictionaries({}, optional={
            "criteria": st.sampled_from(["latency", "throughput", "x"]),
            "session_id": st.one_of(NAMES, ODD)}), ODD)})


def _quote(text: str) -> str:
    return urllib.parse.quote(text, safe="") or "x"


@st.composite
def requests(draw: st.DrawFn, h: Harness) -> dict[str, Any]:
    sid, token = draw(st.sampled_from(h.sessions))
    vid = draw(st.one_of(st.sampled_from(h.var_ids), st.text(max_size=12).map(_quote)))
    route = draw(st.sampled_from([
        # A DELETE never has the right token for the harness's sessions (they must live on).
        ("POST", "/v1/sessions"),
        ("DELETE", f"/v1/sessions/{draw(st.text(max_size=12).map(_quote))}"),
        ("GET", f"/v1/sessions/{sid}/graph"), ("GET", f"/v1/sessions/{sid}/stats"),
        ("POST", "/v1/submit"), ("POST", "/v1/submit_batch"), ("POST", "/v1/variables"),
        ("POST", f"/v1/variables/{vid}"), ("POST", "/v1/get"), ("GET", "/v1/engines"),
        ("POST", "/v1/engines"), ("GET", "/v1/stats"), ("GET", "/healthz"),
        ("GET", "/v1/nothing"), ("PATCH", "/v1/submit"), ("GET", "/v1/submit"),
        # The OpenAI routes (n, tools-sized bodies, streams) and a variable stream.
        ("POST", "/v1/completions"), ("POST", "/v1/chat/completions"), ("GET", "/v1/models"),
        ("GET", f"/v1/models/{draw(st.text(max_size=8).map(_quote))}"),
        ("GET", f"/v1/variables/{vid}/stream?session_id={sid}")]))
    method, path = route
    if draw(st.integers(0, 19)) == 0:
        method = draw(st.sampled_from(["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS"]))
    bodies = {
        "/v1/submit": submit_body(h.var_ids),
        "/v1/submit_batch": st.fixed_dictionaries({"calls": st.one_of(
            st.lists(submit_body(h.var_ids), max_size=4), ODD)}),
        "/v1/variables": st.fixed_dictionaries({}, optional={"name": st.one_of(NAMES, ODD),
                                                            "value": st.one_of(TEXT, ODD)}),
        "/v1/get": st.fixed_dictionaries({}, optional={
            "semantic_var_id": st.one_of(st.just(vid), ODD),
            "criteria": st.one_of(st.sampled_from(["latency", "throughput", "fast"]), ODD),
            "timeout": st.one_of(st.floats(0.001, 0.02), ODD)}),
        "/v1/completions": openai_body("prompt", st.one_of(TEXT, st.lists(TEXT, max_size=3),
                                                           MANY_PROMPTS, LONG_TEXT, ODD)),
        "/v1/chat/completions": openai_body("messages", st.one_of(st.lists(
            st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "tool", "x"]),
                                   "content": st.one_of(TEXT, LONG_TEXT, ODD)}), max_size=3),
            ODD)),
        "/v1/engines": st.fixed_dictionaries({}, optional={
            "name": st.one_of(NAMES, ODD), "url": st.one_of(TEXT, ODD),
            "latency_capacity": ODD}),
    }
    body = draw(bodies.get(path, st.one_of(st.none(), JSON_VALUES)))
    if isinstance(body, dict) and draw(st.integers(0, 9)) > 0:
        body.setdefault("session_id", draw(st.one_of(st.just(sid), ODD)) if draw(
            st.integers(0, 9)) == 0 else sid)
    kind = draw(st.sampled_from(["json"] * 14 + ["random-json", "bytes", "raw-http"]))
    if kind == "random-json":
        body = draw(JSON_VALUES)
    raw = None
    if kind == "bytes":
        raw = draw(st.binary(max_size=64))
    elif kind == "raw-http":  # junk in the request line and the headers; closed after
        raw = (method.encode() + b" " + path.encode() + draw(st.binary(max_size=24))
               + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + draw(st.binary(max_size=40))
               + b"\r\n\r\n")
    auth = draw(st.sampled_from(["mine", "mine", "mine", "none", "other", "garbage"]))
    token = {"mine": token, "none": None, "other": h.sessions[0][1] + "x",
             "garbage": "\u00e9\u00ff\u0080 x"}[auth]
    return {"method": method, "path": path, "body": body, "raw": raw, "kind": kind,
            "token": token}


# --- mutants -------------------------------------------------------------------------------

HOSTILE = [None, True, False, -1, 0, 2**64, 10**30, 1e308, -0.0, "", "x" * 5000, [], {},
           "\ud800", "{{input:x}}", "{{output:", "[" * 3000, "v-unknown", "s-unknown",
           {"ref": {"call": True, "output": "y"}}, [{"type": "regex", "pattern": "(a|aa)+$"}],
           {"max_tokens": 10**9}, "\u0000", "latency", "throughput"]


def mutate(req: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    req = copy.deepcopy(req)
    op = rng.randrange(8)
    body = req["body"]
    if op <= 2 and isinstance(body, (dict, list)) and body:
        target = _random_container(body, rng)
        if isinstance(target, dict) and target:
            key = rng.choice(list(target))
            if op == 2:
                del target[key]
            else:
                target[key] = copy.deepcopy(rng.choice(HOSTILE))
        elif isinstance(target, list) and target:
            target[rng.randrange(len(target))] = copy.deepcopy(rng.choice(HOSTILE))
    elif op == 3 and req["kind"] == "json" and body is not None:
        raw = json.dumps(body).encode()
        req["kind"], req["raw"] = "bytes", raw[:rng.randrange(len(raw) + 1)]
    elif op == 4 and req["kind"] == "json" and body is not None:
        raw = bytearray(json.dumps(body).encode())
        raw[rng.randrange(len(raw))] = rng.randrange(256)
        req["kind"], req["raw"] = "bytes", bytes(raw)
    elif op == 5:
        req["method"] = rng.choice(["GET", "POST", "DELETE", "PUT"])
    elif op == 6:
        req["token"] = rng.choice([None, "x" * 32, req["token"]])
    elif op == 7:
        req["body"] = {"session_id": body.get("session_id") if isinstance(body, dict) else None,
                       "deep": json.loads("[" * 200 + "]" * 200)}
    return req


def _random_container(value: Any, rng: random.Random) -> Any:
    """A dict or list somewhere inside `value` (the top level or one level down)."""
    children = [v for v in (value.values() if isinstance(value, dict) else value)
                if isinstance(v, (dict, list)) and v]
    return rng.choice(children) if children and rng.random() < 0.5 else value


# --- the property ---------------------------------------------------------------------------

async def send(h: Harness, req: dict[str, Any]) -> None:
    h.num_sent += 1
    if req["kind"] == "raw-http":
        answer, _ = await raw_exchange(h.server.url, req["raw"], read_timeout=5)
        if answer:
            status, headers, body = split_response(answer)
            _check(h, status, headers.get("content-type", ""), body, req)
        return
    headers = {}
    if req["token"] is not None:
        headers["Authorization"] = "Bearer " + req["token"].encode("utf-8").decode("latin-1")
    data = req["raw"] if req["kind"] == "bytes" else (
        None if req["body"] is None else json.dumps(req["body"]).encode())
    async with h.http.request(req["method"], req["path"], data=data, headers=headers) as resp:
        _check(h, resp.status, resp.content_type, await resp.read(), req)


async def send_all(h: Harness, batch: list[dict[str, Any]]) -> None:
    await asyncio.gather(*(send(h, req) for req in batch))


def _check(h: Harness, status: int, content_type: str, body: bytes, req: dict[str, Any]) -> None:
    h.statuses[status] = h.statuses.get(status, 0) + 1
    assert status < 500, (status, body[:300], req)
    if req["method"] == "HEAD":
        return
    if status == 200 and content_type.startswith("text/event-stream"):  # a stream, ended
        assert body.endswith(b"data: [DONE]\n\n"), (body[-300:], req)
        return
    assert content_type.startswith("application/json"), (status, content_type, body[:200], req)
    reply = json.loads(body)
    if status >= 400:
        assert set(reply) == {"error"} and isinstance(reply["error"]["type"], str) \
            and isinstance(reply["error"]["message"], str), (reply, req)


@pytest.fixture(scope="module")
def harness():
    loop = asyncio.new_event_loop()
    h = loop.run_until_complete(Harness.start())
    yield loop, h
    loop.run_until_complete(h.stop())
    loop.close()


def test_fuzz_every_route(harness):
    loop, h = harness

    # derandomize: the same 10,000 requests every run, so CI passes or fails on the code, not
    # on the draw (a random draw once reached too few deep paths for the check below)
    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(requests(h), min_size=BATCH, max_size=BATCH), st.randoms())
    def check(batch: list[dict[str, Any]], rng: random.Random) -> None:
        for _ in range(MUTANTS):
            loop.run_until_complete(send_all(h, batch))
            batch = [mutate(req, rng) for req in batch]

    check()
    assert h.num_sent >= EXAMPLES * BATCH * MUTANTS >= 10_000
    assert h.statuses.get(200, 0) > h.num_sent // 30, h.statuses  # deep paths were reached
    health = loop.run_until_complete(_healthz(h))
    assert health == 200


async def _healthz(h: Harness) -> int:
    async with h.http.get("/healthz") as resp:
        return resp.status
