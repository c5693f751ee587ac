"""Typed shapes of the HTTP bodies that have no parser class of their own: small request bodies
wire.py reads inline, and the replies. /openapi.json is generated from these and from the parser
classes (requests.py, openai_requests.py); tests/core/test_openapi.py validates live replies of
every route against the generated schemas, so a shape that drifts from the code fails there."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True)
class Error:
    """Every Parrot error: `type` is the exception class (InvalidRequestError, ...)."""

    error: ErrorDetail


@dataclass(frozen=True)
class ErrorDetail:
    type: str
    message: str


@dataclass(frozen=True)
class OpenAIError:
    """Errors of the /v1/models, /v1/completions and /v1/chat/completions routes."""

    error: OpenAIErrorDetail


@dataclass(frozen=True)
class OpenAIErrorDetail:
    message: str
    type: str             # invalid_request_error | not_found_error | server_error | ...
    param: str | None     # the offending field, when one is to blame
    code: str | None      # Parrot's error class


@dataclass(frozen=True)
class Health:
    status: Literal["ok", "degraded"]
    engines: int
    healthy_engines: int


@dataclass(frozen=True)
class SessionCreated:
    session_id: str
    token: str            # send as `Authorization: Bearer <token>` on the session's routes


@dataclass(frozen=True)
class SessionDeleted:
    deleted: str


@dataclass(frozen=True)
class PlaceholderBinding:
    name: str
    semantic_var_id: str


@dataclass(frozen=True)
class SubmitReply:
    request_id: str
    placeholders: list[PlaceholderBinding]
    values: dict[str, str] | None = None   # with "wait": true, the outputs by name


@dataclass(frozen=True)
class BatchBody:
    """Several submits in one message; a call may bind an output of an earlier call of the
    batch with `{"name", "in_out": "input", "ref": {"call": j, "output": name}}`."""

    session_id: str
    calls: list[dict[str, Any]]   # submit bodies without session_id


@dataclass(frozen=True)
class BatchReply:
    results: list[SubmitReply | Error]   # in order; each call accepted or rejected alone


@dataclass(frozen=True)
class CreateVariableBody:
    session_id: str
    name: str = "var"
    value: str | None = None   # set now (else later with POST /v1/variables/{id})


@dataclass(frozen=True)
class SetVariableBody:
    session_id: str
    value: str


@dataclass(frozen=True)
class VariableId:
    semantic_var_id: str


@dataclass(frozen=True)
class Value:
    value: str


@dataclass(frozen=True)
class Graph:
    """The session DAG as networkx node-link JSON: call nodes (kind "call": prompt, state,
    criterion, task_group, engine, prefix_hashes, timings) and variable nodes."""

    nodes: list[dict[str, Any]]
    links: list[dict[str, Any]]
    directed: bool = True
    multigraph: bool = False
    graph: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SessionStats:
    """A session's own counters (shown only to its token)."""

    session_id: str
    tenant: str
    calls: dict[str, int]       # state -> number of calls
    variables: int
    waiting_gets: int


@dataclass(frozen=True)
class Engines:
    engines: list[dict[str, Any]]   # name, kind, model, healthy, running_calls, ...


@dataclass(frozen=True)
class RegisterEngineBody:
    """An engine process joining by URL (needs the admin token when one is configured)."""

    name: str
    url: str
    latency_capacity: int = 6144
    throughput_capacity: int = 32768
    speed: float = 1.0


@dataclass(frozen=True)
class Registered:
    registered: str


@dataclass(frozen=True)
class Stats:
    sessions: int
    allocated_blocks: int           # Python objects alive after a full collection
    ready_calls: int
    scheduling_rounds: int
    calls_placed: int
    engines: list[dict[str, Any]]


@dataclass(frozen=True)
class Model:
    id: str
    object: Literal["model"]
    created: int
    owned_by: str


@dataclass(frozen=True)
class ModelList:
    object: Literal["list"]
    data: list[Model]


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


@dataclass(frozen=True)
class CompletionChoice:
    index: int
    text: str
    finish_reason: Literal["stop", "length"] | None
    logprobs: None = None


@dataclass(frozen=True)
class Completion:
    """The reply of /v1/completions; with stream: true, each SSE event is this shape with a
    piece of text per choice (object "text_completion"), then `data: [DONE]`."""

    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None
    system_fingerprint: None = None
    parrot: ParrotReply | None = None


@dataclass(frozen=True)
class ChatMessageOut:
    role: Literal["assistant"]
    content: str


@dataclass(frozen=True)
class ChatChoice:
    index: int
    message: ChatMessageOut
    finish_reason: Literal["stop", "length"]
    logprobs: None = None


@dataclass(frozen=True)
class ChatCompletion:
    """The reply of /v1/chat/completions; with stream: true, SSE events of object
    "chat.completion.chunk" whose choices carry `delta` {role?, content?}, then [DONE]."""

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    system_fingerprint: None = None
    parrot: ParrotReply | None = None


@dataclass(frozen=True)
class ParrotReply:
    """With `parrot.session_id`: where the outputs live (one Semantic Variable per choice)."""

    session_id: str
    semantic_var_ids: list[str]
