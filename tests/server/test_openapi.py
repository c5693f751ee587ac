"""/openapi.json against the live server: every route documented and nothing more, and real
requests and replies of every JSON route validate against the generated schemas."""

from __future__ import annotations

import dataclasses
from typing import Any

import aiohttp
import jsonschema
import pytest

from parrot.serve_config import ServeConfig
from parrot.server.metrics import _template
import parrot.wire_types as wt
from parrot.server.openapi import OPERATIONS, build_document
from parrot.server.schema import SchemaBuilder
from parrot.server.service import ParrotServer
from parrot.server.wire_routes import WireAPI

CONFIG = {"policy": {"name": "least_queue"}, "manager": {"admin_token": "admin-secret-of-16-chars"},
          "engines": [{"name": "sim-0", "kind": "simulated", "in_process": True,
                       "params": {"zero_latency": True}}]}


@pytest.fixture
async def server():
    srv = ParrotServer(ServeConfig.from_mapping(CONFIG))
    await srv.start(port=0)
    yield srv
    await srv.stop()


def live_routes(server: ParrotServer) -> set[tuple[str, str]]:
    routes = {(m, _template(p)) for m, p in WireAPI(server.manager).route_table}
    app = server.app
    assert app is not None
    for route in app.router.routes():
        canonical = route.resource.canonical if route.resource is not None else ""
        if route.method in ("HEAD", "*") or "{tail}" in canonical:
            continue
        routes.add((route.method, canonical.replace("{model:.+}", "{model}")))
    return routes


async def test_every_live_route_is_documented_and_nothing_else(server):
    documented = {(op.method, op.path) for op in OPERATIONS}
    assert live_routes(server) == documented


def check(document: dict, schema: dict, instance: Any) -> None:
    jsonschema.validate(instance, {**schema, "components": document["components"]},
                        cls=jsonschema.Draft202012Validator)


def reply_schema(document: dict, method: str, path: str, status: str = "200") -> dict:
    return document["paths"][path][method.lower()]["responses"][status]["content"][
        "application/json"]["schema"]


def body_schema(document: dict, method: str, path: str) -> dict:
    return document["paths"][path][method.lower()]["requestBody"]["content"][
        "application/json"]["schema"]


async def test_live_requests_and_replies_match_the_schemas(server):
    async with aiohttp.ClientSession(base_url=server.url) as http:
        async with http.get("/openapi.json") as resp:
            document = await resp.json()
        assert document == build_document()
        for schema in document["components"]["schemas"].values():
            jsonschema.Draft202012Validator.check_schema(schema)

        async def call(method: str, path: str, template: str, body: Any = None,
                       headers: dict | None = None, status: int = 200) -> Any:
            if body is not None:
                check(document, body_schema(document, method, template), body)
            async with http.request(method, path, json=body, headers=headers) as resp:
                assert resp.status == status, await resp.text()
                reply = await resp.json()
            check(document, reply_schema(document, method, template, str(status)), reply)
            return reply

        await call("GET", "/healthz", "/healthz")
        created = await call("POST", "/v1/sessions", "/v1/sessions")
        sid, auth = created["session_id"], {"Authorization": f"Bearer {created['token']}"}
        var = await call("POST", "/v1/variables", "/v1/variables",
                         {"session_id": sid, "name": "topic"}, auth)
        vid = var["semantic_var_id"]
        submitted = await call("POST", "/v1/submit", "/v1/submit", {
            "session_id": sid, "prompt": "About {{input:t}}: {{output:o}}",
            "placeholders": [{"name": "t", "in_out": "input", "semantic_var_id": vid},
                             {"name": "o", "in_out": "output", "transforms": ["strip"]}],
            "sampling": {"max_tokens": 3}}, auth)
        await call("POST", f"/v1/variables/{vid}", "/v1/variables/{vid}",
                   {"session_id": sid, "value": "birds"}, auth)
        out = submitted["placeholders"][-1]["semantic_var_id"]
        await call("POST", "/v1/get", "/v1/get", {"session_id": sid, "semantic_var_id": out,
                                                  "criteria": "latency"}, auth)
        await call("POST", "/v1/submit_batch", "/v1/submit_batch", {
            "session_id": sid, "calls": [
                {"prompt": "A {{output:a}}", "placeholders": []},
                {"prompt": "B {{input:a}} {{output:b}}", "placeholders": [
                    {"name": "a", "in_out": "input", "ref": {"call": 0, "output": "a"}}]},
                {"prompt": "{{input:missing}} {{output:c}}", "placeholders": []}]}, auth)
        await call("GET", f"/v1/sessions/{sid}/graph", "/v1/sessions/{sid}/graph",
                   headers=auth)
        await call("GET", "/v1/engines", "/v1/engines")
        await call("GET", f"/v1/sessions/{sid}/stats", "/v1/sessions/{sid}/stats",
                   headers=auth)
        await call("GET", "/v1/stats", "/v1/stats",
                   headers={"Authorization": f"Bearer {CONFIG['manager']['admin_token']}"})
        await call("POST", "/v1/engines", "/v1/engines",
                   {"name": "e1", "url": "http://127.0.0.1:9"}, status=401)
        await call("POST", "/v1/get", "/v1/get", {"session_id": sid, "semantic_var_id": "v-x"},
                   auth, status=404)
        await call("DELETE", f"/v1/sessions/{sid}", "/v1/sessions/{sid}", headers=auth)
        await call("GET", "/v1/models", "/v1/models")
        await call("GET", "/v1/models/simulated", "/v1/models/{model}")
        await call("POST", "/v1/completions", "/v1/completions",
                   {"model": "simulated", "prompt": "x", "max_tokens": 2, "n": 2})
        await call("POST", "/v1/chat/completions", "/v1/chat/completions",
                   {"model": "simulated", "messages": [{"role": "user", "content": "hi"}],
                    "max_tokens": 2, "parrot": {"criteria": "throughput"}})
        await call("POST", "/v1/completions", "/v1/completions",
                   {"model": "simulated", "prompt": "x", "best_of": 3}, status=400)


def test_unknown_fields_open_on_the_openai_bodies_only():
    """The OpenAI routes accept and ignore fields they do not know (as OpenAI-compatible
    servers do, so newer clients work); the wire API's bodies stay closed."""
    document = build_document()
    schema = body_schema(document, "POST", "/v1/completions")
    check(document, schema, {"model": "m", "prompt": "x", "a_newer_field": []})
    with pytest.raises(jsonschema.ValidationError):
        check(document, schema, {"prompt": "x"})  # model is required
    submit = body_schema(document, "POST", "/v1/submit")
    with pytest.raises(jsonschema.ValidationError):
        check(document, submit, {"session_id": "s", "prompt": "{{output:y}}", "extra": 1})


def _wire_fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def test_every_wire_api_schema_is_its_types_fields():
    """The wire API's bodies and replies are documented from `parrot.wire_types`, the classes
    the frontend builds and the manager parses: field for field, and required where the type
    has no default."""
    document = build_document()
    schemas = document["components"]["schemas"]
    typed = {t for op in OPERATIONS for t in (op.body, op.reply)
             if isinstance(t, type) and issubclass(t, wt.WireMessage)}
    assert {wt.SubmitRequest, wt.SubmitBatchRequest, wt.GetRequest, wt.Graph, wt.Stats} <= typed
    for cls in typed:
        assert set(schemas[cls.__name__]["properties"]) == _wire_fields(cls), cls
    assert set(schemas["SubmitRequest"]["required"]) == {"session_id", "prompt"}
    # a batch without session_id opens its session; its calls are always required
    assert schemas["SubmitBatchRequest"]["required"] == ["calls"]
    assert "session" in schemas["BatchReply"]["properties"]
    assert {"wait", "stream", "chat"} <= set(schemas["SubmitRequest"]["properties"])
    assert set(schemas["BatchCall"]["properties"]) == _wire_fields(wt.BatchCall)


def test_a_field_added_to_a_type_shows_up_in_the_document():
    grown = dataclasses.make_dataclass(
        "SubmitRequest", [("priority", int, dataclasses.field(default=0))],
        bases=(wt.SubmitRequest,), frozen=True)
    builder = SchemaBuilder()
    builder.ref(grown)
    schema = builder.components["SubmitRequest"]
    assert schema["properties"]["priority"] == {"type": "integer"}
    assert "priority" not in schema.get("required", [])
    parsed = grown.from_wire({"session_id": "s", "prompt": "{{output:y}}", "priority": 2})
    assert parsed.priority == 2 and parsed.to_wire()["priority"] == 2
    document = build_document()  # the real type has no such field, so neither has the document
    assert "priority" not in document["components"]["schemas"]["SubmitRequest"]["properties"]
