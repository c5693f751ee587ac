"""Who may do what (docs/SECURITY.md): admin token, tenants, prefix isolation, counters."""

from __future__ import annotations

import parrot
from parrot.manager.prefix import prefix_pieces
from parrot.template import parse_template
from tests.server.front_door import (SLOW_ENGINE, bearer, call, config, new_session, one_call,
                                     running)

KEY_A, KEY_B, KEY_C = "tenant-a-key-0123456789", "tenant-b-key-0123456789", "tenant-c-key-012345678"
TENANTS = [{"name": "a", "api_key": KEY_A}, {"name": "b", "api_key": KEY_B},
           {"name": "c", "api_key": KEY_C, "share_prefixes": True}]
# Long enough (>= 64 tokens) that its boundary is a cacheable prefix.
SYSTEM = "You are a careful assistant. Answer briefly and cite the document. " * 8


async def test_engine_registration_needs_the_admin_token():
    async with running(config()) as (server, http):
        assert server.admin_token_generated and len(server.admin_token) >= 32
        body = {"name": "evil", "url": "http://127.0.0.1:9"}
        for headers in (None, bearer("wrong-token-0123456789"), bearer("é-not-ascii")):
            status, reply, _ = await call(http, "POST", "/v1/engines", body, headers)
            assert (status, reply["error"]["type"]) == (401, "UnauthorizedError")
        _, engines, _ = await call(http, "GET", "/v1/engines")
        assert [e["name"] for e in engines["engines"]] == ["sim-0"]


async def test_configured_admin_token_is_used_not_generated():
    async with running(config({"admin_token": "configured-admin-token"})) as (server, http):
        assert not server.admin_token_generated
        status, reply, _ = await call(http, "POST", "/v1/engines", {"name": "x", "url": "u"},
                                      bearer("configured-admin-token"))
        assert status == 400  # authorised; the body is what is wrong (url not reachable form)


async def test_engine_counters_are_the_admins_only():
    """The prefix-cache side channel: prefix_hits must not be public."""
    async with running(config()) as (server, http):
        sid, auth = await new_session(http)
        _, sub, _ = await call(http, "POST", "/v1/submit",
                               one_call(sid, SYSTEM + "{{input:x}} {{output:y}}", wait=True), auth)
        for headers in (None, auth):
            _, public, _ = await call(http, "GET", "/v1/engines", headers=headers)
            assert set(public["engines"][0]) == {"name", "kind", "model", "healthy",
                                                 "latency_capacity", "throughput_capacity",
                                                 "profile_source", "serving"}
        _, full, _ = await call(http, "GET", "/v1/engines", headers=bearer(server.admin_token))
        assert {"prefix_hits", "prefix_misses", "cached_prefixes"} <= set(full["engines"][0])
        status, reply, _ = await call(http, "GET", "/v1/stats", headers=auth)
        assert status == 401
        status, stats, _ = await call(http, "GET", "/v1/stats",
                                      headers=bearer(server.admin_token))
        assert status == 200 and stats["sessions"] == 1


async def test_session_counters_only_for_their_session():
    async with running(config()) as (_, http):
        sid, auth = await new_session(http)
        other_sid, other_auth = await new_session(http)
        await call(http, "POST", "/v1/submit", one_call(sid, wait=True), auth)
        status, stats, _ = await call(http, "GET", f"/v1/sessions/{sid}/stats", headers=auth)
        assert status == 200
        assert stats == {"session_id": sid, "tenant": "default", "calls": {"done": 1},
                         "variables": 2, "waiting_gets": 0}
        status, _, _ = await call(http, "GET", f"/v1/sessions/{sid}/stats", headers=other_auth)
        assert status == 404  # another session answers as an unknown one


async def test_tenants_need_their_api_key_to_open_sessions():
    async with running(config(tenants=TENANTS)) as (_, http):
        for headers in (None, bearer("not-a-tenant-key-0000")):
            status, reply, _ = await call(http, "POST", "/v1/sessions", headers=headers)
            assert (status, reply["error"]["type"]) == (401, "UnauthorizedError")
        sid, auth = await new_session(http, KEY_B)
        _, stats, _ = await call(http, "GET", f"/v1/sessions/{sid}/stats", headers=auth)
        assert stats["tenant"] == "b"


async def test_a_batch_that_opens_its_session_is_let_in_as_a_session_open_is():
    """submit_batch without session_id opens a session: only with a tenant's key where tenants
    are configured, and nothing is opened for a body that does not parse."""
    batch = {"calls": [{"prompt": "{{input:x}} {{output:y}}",
                        "placeholders": [{"name": "x", "in_out": "input", "value": "hi"}]}]}
    async with running(config(tenants=TENANTS)) as (server, http):
        for headers in (None, bearer("not-a-tenant-key-0000")):
            status, reply, _ = await call(http, "POST", "/v1/submit_batch", batch, headers)
            assert (status, reply["error"]["type"]) == (401, "UnauthorizedError")
        status, reply, _ = await call(http, "POST", "/v1/submit_batch", {"calls": "no"},
                                      bearer(KEY_B))
        assert status == 400 and "calls" in reply["error"]["message"]
        assert not server.manager.sessions   # neither attempt opened one
        status, reply, _ = await call(http, "POST", "/v1/submit_batch", batch, bearer(KEY_B))
        assert status == 200 and "error" not in reply["results"][0]
        sid, auth = reply["session"]["session_id"], bearer(reply["session"]["token"])
        assert [s.session_id for s in server.manager.sessions] == [sid]
        _, stats, _ = await call(http, "GET", f"/v1/sessions/{sid}/stats", headers=auth)
        assert stats["tenant"] == "b" and sum(stats["calls"].values()) == 1
        y = reply["results"][0]["placeholders"][-1]["semantic_var_id"]
        status, got, _ = await call(http, "POST", "/v1/get",
                                    {"session_id": sid, "semantic_var_id": y}, auth)
        assert status == 200 and isinstance(got["value"], str)
        # the session's token, not the tenant's key, reaches the session afterwards
        status, _, _ = await call(http, "GET", f"/v1/sessions/{sid}/stats", headers=bearer(KEY_B))
        assert status == 401


async def _prefix_hashes(http, key: str) -> list[str]:
    sid, auth = await new_session(http, key)
    _, sub, _ = await call(http, "POST", "/v1/submit",
                           one_call(sid, SYSTEM + "{{input:x}} {{output:y}}", wait=True), auth)
    _, graph, _ = await call(http, "GET", f"/v1/sessions/{sid}/graph", headers=auth)
    return next(n["prefix_hashes"] for n in graph["nodes"] if n["kind"] == "call")


async def test_equal_prompts_of_two_tenants_never_share_a_prefix():
    async with running(config(tenants=TENANTS)) as (server, http):
        a1, a2, b = [await _prefix_hashes(http, k) for k in (KEY_A, KEY_A, KEY_B)]
        assert a1 and a1 == a2          # one tenant's sessions share
        assert not set(a1) & set(b)     # tenants are isolated by default
        _, full, _ = await call(http, "GET", "/v1/engines", headers=bearer(server.admin_token))
        # The second call of tenant a forked the first one's context; tenant b's did not.
        assert full["engines"][0]["prefix_hits"] == 1


async def test_a_sharing_tenant_uses_the_unsalted_hash():
    async with running(config(tenants=TENANTS)) as (_, http):
        shared = await _prefix_hashes(http, KEY_C)
        unsalted = prefix_pieces(parse_template(SYSTEM + "{{input:x}} {{output:y}}"),
                                 {"x": "hi"})
        assert shared == [p.prefix_hash for p in unsalted]
        assert not set(shared) & set(await _prefix_hashes(http, KEY_A))


async def test_frontend_opens_sessions_with_a_tenant_key():
    from parrot.frontend.session import Session
    from parrot.frontend.transport import HttpTransport

    async with running(config(tenants=TENANTS)) as (server, _):
        async with Session(transport=HttpTransport(server.url, api_key=KEY_A)) as session:
            assert (await session.stats()).tenant == "a"
        # a deferred open: the first batch carries the key and opens the session over HTTP
        echo = parrot.semantic_function(prompt="{{input:x}} {{output:y}}", max_tokens=4)
        transport = HttpTransport(server.url, api_key=KEY_A)
        async with Session(transport=transport, defer_open=True) as session:
            assert isinstance(await echo(x="hi").aget(), str)
            assert (await session.stats()).tenant == "a"
        # batch (opens it, and carries the value awaited at once), stats, delete
        assert transport.num_messages == 3


async def test_openai_routes_need_a_tenant_key_and_salt_prefixes_by_tenant():
    """With tenants configured, the OpenAI routes are a front door like POST /v1/sessions: no
    key, no completion; a key puts the private session in its tenant (salted prefixes)."""
    from parrot.serve_config import EngineSpec, TenantSpec
    from parrot.server.openai_api import OpenAIRoutes
    from parrot.server.tenants import AccessControl
    from parrot.server.wire_routes import WireAPI
    from aiohttp.test_utils import TestClient, TestServer
    from parrot.server.http_api import create_app
    from parrot.manager.manager import Manager
    from parrot.serve_config import ManagerConfig
    from parrot.engines.simulated import SimulatedEngine, SimulatedEngineConfig
    from parrot.policies.registry import default_registry

    key = "k" * 24
    manager = Manager(default_registry().create("least_queue", {}), ManagerConfig())
    await manager.start()
    try:
        engine = SimulatedEngine("e0", SimulatedEngineConfig())
        await manager.add_engine(EngineSpec(name="e0", kind="simulated"), engine)
        api = WireAPI(manager, access=AccessControl((TenantSpec("team-a", key),), "a" * 32))
        seen = []
        original = manager.create_session

        def spy():
            session = original()
            seen.append(session)
            return session

        manager.create_session = spy  # type: ignore[method-assign]
        app = create_app(api, [OpenAIRoutes(manager, api.admit_session).setup])
        async with TestClient(TestServer(app)) as http:
            body = {"model": "simulated", "prompt": "hello", "max_tokens": 2}
            async with http.post("/v1/completions", json=body) as resp:
                assert resp.status == 401
                assert (await resp.json())["error"]["type"] == "authentication_error"
            # without a key, a model that does not exist is still a 401 (not a 404 that
            # tells a stranger which models do), for completions and chat alike
            for path, extra in (("/v1/completions", {"prompt": "x"}),
                                ("/v1/chat/completions",
                                 {"messages": [{"role": "user", "content": "x"}]})):
                async with http.post(path, json={"model": "no-such-model", **extra}) as resp:
                    assert resp.status == 401, (path, await resp.text())
            async with http.post("/v1/completions", json=body,
                                 headers={"Authorization": f"Bearer {key}"}) as resp:
                assert resp.status == 200, await resp.text()
        assert [(s.tenant, s.prefix_salt) for s in seen] == [("team-a", "team-a")]
    finally:
        await manager.close()


async def test_a_tenants_session_quota_keeps_it_from_taking_every_session():
    tenants = [{"name": "a", "api_key": KEY_A, "max_sessions": 2}, {"name": "b", "api_key": KEY_B}]
    async with running(config(tenants=tenants)) as (server, http):
        first, first_auth = await new_session(http, KEY_A)
        await new_session(http, KEY_A)
        status, reply, resp = await call(http, "POST", "/v1/sessions", headers=bearer(KEY_A))
        assert status == 429 and "max_sessions" in reply["error"]["message"]
        assert resp.headers["Retry-After"]
        async with http.post("/v1/completions", headers=bearer(KEY_A), json={
                "model": "simulated", "prompt": "x", "max_tokens": 1}) as r:
            assert r.status == 429  # its OpenAI requests' private sessions count too
        await new_session(http, KEY_B)  # other tenants are not held to a's quota
        async with http.delete(f"/v1/sessions/{first}", headers=first_auth) as r:
            assert r.status == 200
        await new_session(http, KEY_A)  # a deleted session frees its place
        assert server.manager.sessions.num_of_tenant("a") == 2


async def test_a_tenants_call_quota_answers_429_and_leaves_other_tenants_alone():
    tenants = [{"name": "a", "api_key": KEY_A, "max_active_calls": 3},
               {"name": "b", "api_key": KEY_B}]
    long_call = {"sampling": {"max_tokens": 400}}
    async with running(config(tenants=tenants, engine=SLOW_ENGINE)) as (server, http):
        first, first_auth = await new_session(http, KEY_A)
        for _ in range(3):
            status, reply, _ = await call(http, "POST", "/v1/submit",
                                          one_call(first, **long_call), first_auth)
            assert status == 200, reply
        second, second_auth = await new_session(http, KEY_A)
        for sid, auth in ((first, first_auth), (second, second_auth)):  # all its sessions
            status, reply, resp = await call(http, "POST", "/v1/submit",
                                             one_call(sid, **long_call), auth)
            assert status == 429, reply
            assert reply["error"]["message"] == (
                "tenant 'a' has 3 unfinished calls (its max_active_calls); wait for some to "
                "finish")
            assert resp.headers["Retry-After"]
        status, reply, _ = await call(http, "POST", "/v1/submit_batch", {"calls": [
            {"prompt": "x {{output:y}}"}]}, bearer(KEY_A))
        assert status == 429 and "max_active_calls" in reply["error"]["message"]
        async with http.post("/v1/completions", headers=bearer(KEY_A), json={
                "model": "simulated", "prompt": "x", "max_tokens": 1}) as resp:
            error = (await resp.json())["error"]
            assert (resp.status, error["type"]) == (429, "rate_limit_error")
        other, other_auth = await new_session(http, KEY_B)
        for _ in range(4):  # tenant b has no quota of its own
            status, reply, _ = await call(http, "POST", "/v1/submit",
                                          one_call(other, **long_call), other_auth)
            assert status == 200, reply
        async with http.delete(f"/v1/sessions/{first}", headers=first_auth) as resp:
            assert resp.status == 200
        status, reply, _ = await call(http, "POST", "/v1/submit",
                                      one_call(second, **long_call), second_auth)
        assert status == 200, reply  # the deleted session's calls no longer count
