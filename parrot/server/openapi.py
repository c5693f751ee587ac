"""`GET /openapi.json`: the OpenAPI 3.1 document of the manager's HTTP API, generated.

The wire API's bodies and replies are the classes of `parrot.wire_types` (the same ones the
frontend builds and the manager parses); the OpenAI routes' bodies are the parser classes of
`openai_requests` and their replies the shapes of `api_shapes`. The route list is
`OPERATIONS`; tests/manager/test_openapi.py checks it against the live routes (every route
documented, nothing documented that does not exist) and validates live replies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

import parrot
from parrot import wire_types as wt
from parrot.server import api_shapes as shapes
from parrot.server.openai_requests import ChatCompletionBody, CompletionBody
from parrot.server.schema import SchemaBuilder


@dataclass(frozen=True)
class Operation:
    method: str
    path: str                   # OpenAPI template, e.g. /v1/sessions/{sid}
    summary: str
    body: type | None = None    # the request body's typed class
    reply: type | None = None   # the 200 reply's typed class
    auth: str | None = None     # "session" | "admin" | None
    reply_kind: str = "json"    # "json" | "sse" | "text"
    openai: bool = False        # errors in OpenAI's shape


OPERATIONS: tuple[Operation, ...] = (
    Operation("GET", "/healthz", "health of the manager and its engines (503 when degraded)",
              reply=wt.Health),
    Operation("POST", "/v1/sessions", "open a session; the reply's token authorizes it",
              reply=wt.SessionCreated),
    Operation("DELETE", "/v1/sessions/{sid}", "delete a session (cancels its running calls)",
              reply=wt.SessionDeleted, auth="session"),
    Operation("GET", "/v1/sessions/{sid}/graph", "the session DAG (node-link JSON)",
              reply=wt.Graph, auth="session"),
    Operation("GET", "/v1/sessions/{sid}/stats", "the session's own counters",
              reply=wt.SessionStats, auth="session"),
    Operation("POST", "/v1/submit", "submit one semantic-function call (a template and its "
              "placeholder bindings); with wait: true the reply carries the output values",
              body=wt.SubmitRequest, reply=wt.SubmitReply, auth="session"),
    Operation("POST", "/v1/submit_batch", "several submits in one message",
              body=wt.SubmitBatchRequest, reply=wt.BatchReply, auth="session"),
    Operation("POST", "/v1/variables", "create a Semantic Variable (set now or later)",
              body=wt.CreateVariableRequest, reply=wt.VariableId, auth="session"),
    Operation("POST", "/v1/variables/{vid}", "set a client-owned variable; releases its "
              "consumers", body=wt.SetVariableRequest, reply=wt.VariableId,
              auth="session"),
    Operation("GET", "/v1/variables/{vid}/stream", "a variable's value as it is generated "
              "(query: session_id, criteria?): SSE `data: {text}` events, then [DONE]",
              auth="session", reply_kind="sse"),
    Operation("POST", "/v1/get", "wait for a variable's value; criteria seeds objective "
              "deduction", body=wt.GetRequest, reply=wt.Value, auth="session"),
    Operation("GET", "/v1/engines", "the registered engines", reply=wt.EngineList),
    Operation("POST", "/v1/engines", "register an engine process by URL",
              body=wt.RegisterEngineRequest, reply=wt.Registered, auth="admin"),
    Operation("GET", "/v1/stats", "scheduler and engine counters", reply=wt.Stats,
              auth="admin"),
    Operation("GET", "/metrics", "Prometheus metrics (text exposition format)",
              reply_kind="text", auth="admin"),
    Operation("GET", "/openapi.json", "this document", reply_kind="json"),
    Operation("GET", "/v1/models", "OpenAI: the models the engines serve",
              reply=shapes.ModelList, openai=True),
    Operation("GET", "/v1/models/{model}", "OpenAI: one model", reply=shapes.Model,
              openai=True),
    Operation("POST", "/v1/completions", "OpenAI: text completion (stream: SSE chunks)",
              body=CompletionBody, reply=shapes.Completion, openai=True),
    Operation("POST", "/v1/chat/completions", "OpenAI: chat completion with the model's "
              "chat template (stream: SSE chunks)", body=ChatCompletionBody,
              reply=shapes.ChatCompletion, openai=True),
)

_ERRORS = {"400": "malformed request or invalid value", "401": "missing or wrong bearer token",
           "404": "unknown route, session, variable or model", "408": "get timed out",
           "409": "conflicts with existing state", "413": "body too large",
           "424": "the call producing the value failed", "503": "no engine available"}


def build_document() -> dict[str, Any]:
    builder = SchemaBuilder()
    paths: dict[str, dict[str, Any]] = {}
    for op in OPERATIONS:
        paths.setdefault(op.path, {})[op.method.lower()] = _operation(op, builder)
    return {
        "openapi": "3.1.0",
        "info": {"title": "Parrot", "version": parrot.__version__,
                 "description": "The manager's HTTP API: Parrot's semantic-variable wire API, "
                                "an OpenAI-compatible API, metrics. See docs/HTTP_API.md."},
        "paths": paths,
        "components": {"schemas": builder.components, "securitySchemes": {
            "session": {"type": "http", "scheme": "bearer",
                        "description": "the token of POST /v1/sessions"},
            "admin": {"type": "http", "scheme": "bearer",
                      "description": "manager.admin_token, when configured"}}},
    }


def _operation(op: Operation, builder: SchemaBuilder) -> dict[str, Any]:
    out: dict[str, Any] = {"summary": op.summary, "operationId": _operation_id(op)}
    params = [p.strip("{}") for p in op.path.split("/") if p.startswith("{")]
    if params:
        out["parameters"] = [{"name": p, "in": "path", "required": True,
                              "schema": {"type": "string"}} for p in params]
    if op.body is not None:
        out["requestBody"] = {"required": True,
                              "content": {"application/json": {"schema": builder.ref(op.body)}}}
    if op.auth is not None:
        out["security"] = [{op.auth: []}]
    ok: dict[str, Any] = {"description": "success"}
    if op.reply_kind == "sse":
        ok["content"] = {"text/event-stream": {"schema": {"type": "string"}}}
    elif op.reply_kind == "text":
        ok["content"] = {"text/plain": {"schema": {"type": "string"}}}
    elif op.reply is not None:
        media = {"application/json": {"schema": builder.ref(op.reply)}}
        if op.body in (CompletionBody, ChatCompletionBody):
            media["text/event-stream"] = {"schema": {"type": "string"}}
        ok["content"] = media
    else:
        ok["content"] = {"application/json": {"schema": {"type": "object"}}}
    error = builder.ref(shapes.OpenAIError if op.openai else wt.ErrorReply)
    out["responses"] = {"200": ok, **{code: {"description": text, "content": {
        "application/json": {"schema": error}}} for code, text in _ERRORS.items()}}
    return out


def _operation_id(op: Operation) -> str:
    words = [w.strip("{}") for w in op.path.split("/") if w and w != "v1"]
    return op.method.lower() + "_" + "_".join(words).replace(".", "_")


class OpenAPIRoute:
    """Serves the document, built once."""

    def __init__(self) -> None:
        self._document = build_document()

    def setup(self, app: web.Application) -> None:
        app.router.add_get("/openapi.json", self.serve)

    async def serve(self, request: web.Request) -> web.Response:
        return web.json_response(self._document)
