"""The manager's HTTP API against docs/HTTP_API.md, with a raw aiohttp client (no frontend)."""

from __future__ import annotations

import contextlib

import aiohttp
import pytest

from parrot.serve_config import ServeConfig
from parrot.server.service import ParrotServer

CONFIG = {
    "manager": {"max_body_bytes": 64 * 1024},
    "policy": {"name": "least_queue"},
    "engines": [{"name": "sim-0", "kind": "simulated", "in_process": True,
                 "params": {"zero_latency": True}}],
}


@pytest.fixture
async def server():
    srv = ParrotServer(ServeConfig.from_mapping(CONFIG))
    await srv.start(port=0)
    yield srv
    await srv.stop()


@pytest.fixture
async def http(server):
    async with aiohttp.ClientSession(base_url=server.url) as client:
        yield client


async def new_session(http) -> tuple[str, dict]:
    async with http.post("/v1/sessions") as resp:
        assert resp.status == 200
        data = await resp.json()
    return data["session_id"], {"Authorization": f"Bearer {data['token']}"}


async def post(http, path, body, headers=None, raw=None):
    kwargs = {"data": raw} if raw is not None else {"json": body}
    async with http.post(path, headers=headers, **kwargs) as resp:
        return resp.status, await resp.json()


async def test_chain_of_ten_calls_only_final_get(http):
    sid, auth = await new_session(http)
    status, first = await post(http, "/v1/submit", {
        "session_id": sid, "prompt": "Step 0 of {{input:doc}}: {{output:out}}",
        "placeholders": [{"name": "doc", "in_out": "input", "value": "a document"}],
        "sampling": {"max_tokens": 4}}, auth)
    assert status == 200
    var = first["placeholders"][-1]["semantic_var_id"]
    for i in range(1, 10):
        status, reply = await post(http, "/v1/submit", {
            "session_id": sid,
            "prompt": f"Step {i}: improve {{{{input:prev}}}} -> {{{{output:out}}}}",
            "placeholders": [{"name": "prev", "in_out": "input", "semantic_var_id": var}],
            "sampling": {"max_tokens": 4}}, auth)
        assert status == 200, reply
        var = reply["placeholders"][-1]["semantic_var_id"]
    status, got = await post(http, "/v1/get", {"session_id": sid, "semantic_var_id": var,
                                               "criteria": "latency", "timeout": 30}, auth)
    assert status == 200 and len(got["value"]) == 16  # 4 simulated tokens of 4 characters
    async with http.get(f"/v1/sessions/{sid}/graph", headers=auth) as resp:
        graph = await resp.json()
    calls = [n for n in graph["nodes"] if n["kind"] == "call"]
    assert len(calls) == 10
    assert {c["state"] for c in calls} == {"done"}
    assert {c["criterion"] for c in calls} == {"latency"}  # a chain is one critical path
    assert {c["task_group"] for c in calls} == {None}
    assert all(c["engine"] == "sim-0" and c["timings"]["finished"] >= c["timings"]["ready"]
               for c in calls)
    assert len(graph["links"]) == 10 + 10  # input edge and output edge per call


@pytest.mark.parametrize("body, status, kind", [
    ({"prompt": "{{input:x} {{output:y}}", "placeholders": []}, 400, "TemplateSyntaxError"),
    ({"prompt": "{{inp:x}} {{output:y}}", "placeholders": []}, 400, "TemplateSyntaxError"),
    ({"prompt": "{{output:y}} {{output:y}}", "placeholders": []}, 400, "TemplateSyntaxError"),
    ({"prompt": "{{input:x}} {{output:y}}", "placeholders": []}, 400, "InvalidRequestError"),
    ({"prompt": "{{input:x}} {{output:y}}",
      "placeholders": [{"name": "x", "in_out": "input", "semantic_var_id": "v-unknown"}]},
     404, "NotFoundError"),
    ({"prompt": "{{input:x}} {{output:x}}", "placeholders": []}, 400, "TemplateSyntaxError"),
    ({"prompt": "{{input:x}} {{output:y}}",
      "placeholders": [{"name": "x", "in_out": "input", "value": "v"}],
      "sampling": {"temperature": -1}}, 400, "InvalidRequestError"),
    ({"prompt": "{{input:x}} {{output:y}}",
      "placeholders": [{"name": "x", "in_out": "input", "value": "v"},
                       {"name": "y", "in_out": "output", "sampling": {"top_p": 0}}]},
     400, "InvalidRequestError"),
    ({"prompt": "{{input:x}} {{output:y}}",
      "placeholders": [{"name": "x", "in_out": "input", "value": "v"},
                       {"name": "zz", "in_out": "input", "value": "v"}]},
     400, "InvalidRequestError"),
])
async def test_submit_errors_are_json_4xx(http, body, status, kind):
    sid, auth = await new_session(http)
    got_status, reply = await post(http, "/v1/submit", {"session_id": sid, **body}, auth)
    assert (got_status, reply["error"]["type"]) == (status, kind), reply
    async with http.get("/healthz") as resp:
        assert resp.status == 200


async def test_auth_and_session_errors(http):
    sid, auth = await new_session(http)
    other_sid, other_auth = await new_session(http)
    body = {"session_id": sid, "name": "x", "value": "1"}
    assert (await post(http, "/v1/variables", body))[0] == 401
    # Another session's token naming this session: answered as an unknown session is.
    assert (await post(http, "/v1/variables", body, other_auth))[0] == 404
    assert (await post(http, "/v1/variables", {**body, "session_id": "s-nope"}, auth))[0] == 404
    status, created = await post(http, "/v1/variables", body, auth)
    assert status == 200
    # Another session's variable is invisible (indistinguishable from unknown).
    status, reply = await post(http, "/v1/get", {"session_id": other_sid, "semantic_var_id":
                                                 created["semantic_var_id"]}, other_auth)
    assert (status, reply["error"]["type"]) == (404, "NotFoundError")
    status, reply = await post(http, "/v1/get", {"session_id": sid, "semantic_var_id":
                                                 created["semantic_var_id"],
                                                 "criteria": "fast"}, auth)
    assert status == 400 and "criteria" in reply["error"]["message"]


async def test_malformed_and_oversize_bodies(http):
    sid, auth = await new_session(http)
    status, reply = await post(http, "/v1/submit", None, auth, raw=b"{not json")
    assert (status, reply["error"]["type"]) == (400, "InvalidRequestError")
    status, reply = await post(http, "/v1/submit", None, auth, raw=b"x" * (65 * 1024))
    assert status == 413 and reply["error"]["type"] == "PayloadTooLargeError"
    status, reply = await post(http, "/v1/submit", [1, 2], auth)
    assert status == 400
    async with http.get("/v1/nothing") as resp:
        assert resp.status == 404 and (await resp.json())["error"]["type"] == "NotFoundError"


async def test_second_producer_and_cycle_are_conflicts(http):
    sid, auth = await new_session(http)
    _, var = await post(http, "/v1/variables", {"session_id": sid, "name": "v"}, auth)
    vid = var["semantic_var_id"]
    ok = {"session_id": sid, "prompt": "{{input:a}} {{output:b}}",
          "placeholders": [{"name": "a", "in_out": "input", "value": "1"},
                           {"name": "b", "in_out": "output", "semantic_var_id": vid}]}
    status, first = await post(http, "/v1/submit", ok, auth)
    assert status == 200
    status, reply = await post(http, "/v1/submit", ok, auth)
    assert (status, reply["error"]["type"]) == (409, "ConflictError")
    # b (= vid) -> c, then a call consuming c that writes a variable upstream of it: a cycle.
    _, upstream = await post(http, "/v1/variables", {"session_id": sid, "name": "u"}, auth)
    uid = upstream["semantic_var_id"]
    status, mid = await post(http, "/v1/submit", {
        "session_id": sid, "prompt": "{{input:u}} {{output:c}}",
        "placeholders": [{"name": "u", "in_out": "input", "semantic_var_id": uid}]}, auth)
    cid = mid["placeholders"][-1]["semantic_var_id"]
    status, reply = await post(http, "/v1/submit", {
        "session_id": sid, "prompt": "{{input:c}} {{output:u}}",
        "placeholders": [{"name": "c", "in_out": "input", "semantic_var_id": cid},
                         {"name": "u", "in_out": "output", "semantic_var_id": uid}]}, auth)
    assert (status, reply["error"]["type"]) == (409, "ConflictError")


async def test_delete_session_fails_waiters(http):
    sid, auth = await new_session(http)
    async with http.delete(f"/v1/sessions/{sid}", headers=auth) as resp:
        assert resp.status == 200
    status, reply = await post(http, "/v1/variables", {"session_id": sid, "name": "x"}, auth)
    assert status == 401  # the deleted session's token is no session's token any more


async def test_submit_batch_with_refs_and_a_rejected_call(http):
    sid, auth = await new_session(http)
    status, reply = await post(http, "/v1/submit_batch", {"session_id": sid, "calls": [
        {"prompt": "A {{input:x}} {{output:a}}",
         "placeholders": [{"name": "x", "in_out": "input", "value": "1"}]},
        {"prompt": "B {{input:a}} {{output:b}}",
         "placeholders": [{"name": "a", "in_out": "input", "ref": {"call": 0, "output": "a"}}]},
        {"prompt": "C {{input:x} {{output:c}}", "placeholders": []},
        {"prompt": "D {{input:c}} {{output:d}}",
         "placeholders": [{"name": "c", "in_out": "input", "ref": {"call": 2, "output": "c"}}]},
        {"prompt": "E {{input:a}} {{output:e}}",
         "placeholders": [{"name": "a", "in_out": "input", "ref": {"call": 4, "output": "a"}}]},
    ]}, auth)
    assert status == 200
    results = reply["results"]
    assert [("error" in r) for r in results] == [False, False, True, True, True]
    assert results[2]["error"]["type"] == "TemplateSyntaxError"
    assert "rejected" in results[3]["error"]["message"]
    a_id = results[0]["placeholders"][-1]["semantic_var_id"]
    assert results[1]["placeholders"][0]["semantic_var_id"] == a_id
    b_id = results[1]["placeholders"][-1]["semantic_var_id"]
    status, got = await post(http, "/v1/get", {"session_id": sid, "semantic_var_id": b_id}, auth)
    assert status == 200
    status, reply = await post(http, "/v1/submit_batch", {"session_id": sid, "calls": []}, auth)
    assert status == 400


@contextlib.asynccontextmanager
async def serve_engine(engine):
    """`engine` behind its own HTTP server on a free port (yields the port) for the block."""
    from aiohttp import web

    from parrot.engines.server import create_app as engine_app

    runner = web.AppRunner(engine_app(engine))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


async def test_an_engine_joining_with_auto_capacity_is_calibrated_from_its_profile(server,
                                                                                    http):
    """The profile an engine reports in its info crosses HTTP, and `latency_capacity: auto`
    is the paper's rule on it (the builtin engine measures its own at start-up)."""
    import dataclasses

    from parrot.engines.simulated import SimulatedEngine, SimulatedEngineConfig
    from parrot.speed_profile import SpeedProfile

    class Measured(SimulatedEngine):
        async def info(self):
            return dataclasses.replace(await super().info(), speed_profile=SpeedProfile(
                0.03, ((0, 7.7), (65536, 7.7 + 0.0003 * 65536))))

    engine = Measured("measured", SimulatedEngineConfig.from_mapping({"zero_latency": True}))
    admin = {"Authorization": f"Bearer {server.admin_token}"}
    async with serve_engine(engine) as port:
        status, _ = await post(http, "/v1/engines", {"name": "measured",
                                                     "url": f"http://127.0.0.1:{port}",
                                                     "latency_capacity": "auto"}, admin)
        assert status == 200
        status, reply = await post(http, "/v1/engines", {"name": "x", "url": "http://e",
                                                         "latency_capacity": "fast"}, admin)
        assert status == 400 and "latency_capacity" in reply["error"]["message"]
        async with http.get("/v1/engines") as resp:
            engines = {e["name"]: e for e in (await resp.json())["engines"]}
        assert (engines["measured"]["latency_capacity"],
                engines["measured"]["profile_source"]) == (20480, "measured")
        # the server's own simulated engine configures no profile and reports none
        assert engines["sim-0"]["profile_source"] == "default"


async def test_engine_joins_by_url_and_serves_calls(server, http):
    from parrot.engines.simulated import SimulatedEngine, SimulatedEngineConfig

    engine = SimulatedEngine("joiner", SimulatedEngineConfig.from_mapping({"zero_latency": True}))
    admin = {"Authorization": f"Bearer {server.admin_token}"}
    async with serve_engine(engine) as port:
        status, reply = await post(http, "/v1/engines", {"name": "joiner",
                                                         "url": f"http://127.0.0.1:{port}",
                                                         "latency_capacity": 100}, admin)
        assert status == 200 and reply == {"registered": "joiner"}
        # the same name at another address while the first is alive: a conflict
        status, reply = await post(http, "/v1/engines", {"name": "joiner",
                                                         "url": f"http://localhost:{port}"},
                                   admin)
        assert (status, reply["error"]["type"]) == (409, "ConflictError")
        status, reply = await post(http, "/v1/engines", {"name": "x", "url": "http://e",
                                                         "latency_capacity": -1}, admin)
        assert status == 400
        async with http.get("/v1/engines") as resp:
            names = [e["name"] for e in (await resp.json())["engines"]]
        assert names == ["sim-0", "joiner"]
        # Make the joiner the only healthy choice, then run a call through it.
        server.manager.engines.get("sim-0").is_healthy = False
        sid, auth = await new_session(http)
        _, sub = await post(http, "/v1/submit", {
            "session_id": sid, "prompt": "{{input:x}} {{output:y}}",
            "placeholders": [{"name": "x", "in_out": "input", "value": "hi"}]}, auth)
        status, got = await post(http, "/v1/get", {
            "session_id": sid, "semantic_var_id": sub["placeholders"][-1]["semantic_var_id"]},
            auth)
        assert status == 200 and len(got["value"]) == 64 * 4
        async with http.get(f"/v1/sessions/{sid}/graph", headers=auth) as resp:
            graph = await resp.json()
        assert [n["engine"] for n in graph["nodes"] if n["kind"] == "call"] == ["joiner"]


async def test_submit_with_wait_is_a_blocking_completion(http):
    sid, auth = await new_session(http)
    status, reply = await post(http, "/v1/submit", {
        "session_id": sid, "prompt": "Q {{output:a}} then {{output:b}}", "wait": True,
        "placeholders": [{"name": "a", "in_out": "output", "sampling": {"max_tokens": 2}},
                         {"name": "b", "in_out": "output", "sampling": {"max_tokens": 3}}]},
        auth)
    assert status == 200
    assert {k: len(v) for k, v in reply["values"].items()} == {"a": 8, "b": 12}
    status, reply = await post(http, "/v1/submit", {
        "session_id": sid, "prompt": "{{output:a}}", "wait": "yes"}, auth)
    assert status == 400 and "wait" in reply["error"]["message"]


async def test_the_server_judges_fields_the_client_checks_too(server, http):
    """`parrot.Session` cannot build these (the types refuse them), so a raw client sends them:
    the manager's parse of the same types refuses them before anything is submitted."""
    sid, auth = await new_session(http)
    status, reply = await post(http, "/v1/submit", {
        "session_id": sid, "prompt": "{{output:a}}", "stream": ["b"]}, auth)
    assert status == 400 and "'stream' names ['b'], not outputs" in reply["error"]["message"]
    status, reply = await post(http, "/v1/variables", {"session_id": sid, "name": 7}, auth)
    assert status == 400 and "variables.name must be a string" in reply["error"]["message"]
    status, reply = await post(http, "/v1/submit_batch", {"session_id": sid, "calls": [
        {"prompt": "{{output:a}}", "session_id": sid}]}, auth)
    assert status == 200 and "unknown field(s) ['session_id']" in \
        reply["results"][0]["error"]["message"]
    assert not server.manager.sessions.get(sid).calls
