"""Typed shapes of the OpenAI-compatible routes' replies and errors, for /openapi.json (their
requests are the parser classes of openai_requests.py). The wire API's own requests and replies
are `parrot.wire_types`, shared with the frontend; tests/manager/test_openapi.py validates live
replies of every route against the generated schemas, so a shape that drifts fails there."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


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
