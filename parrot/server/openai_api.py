"""The OpenAI-compatible front door, on the manager's own HTTP server.

    GET  /v1/models                    the models the registered engines serve
    GET  /v1/models/{model}
    POST /v1/completions               CompletionRequest      (stream: SSE chunks, [DONE])
    POST /v1/chat/completions          ChatCompletionRequest  (messages → the model's template)

Each request runs as one-call DAGs in a private session (`OneShot`), so the policy schedules it
beside semantic-variable traffic. Errors use OpenAI's shape
`{"error": {"message", "type", "param", "code"}}` with the same HTTP statuses as the wire API.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from dataclasses import dataclass, replace
from typing import Any
from collections.abc import Awaitable, Callable

from aiohttp import web

from parrot.manager.admission import Admission
from parrot.chat import load_renderer, renderer_loaded
from parrot.server.chat_submit import chat_template_of
from parrot.manager.engine_pool import EngineState
from parrot.server.http_api import FRONT, bearer_token, error_headers, read_json
from parrot.manager.manager import Manager
from parrot.server.off_loop import OFF_LOOP_BYTES, beside_loop, serving_http
from parrot.server.oneshot import Delta, OneShot
from parrot.server.openai_requests import (ChatCompletionRequest, CompletionRequest,
                                         ContextLengthExceededError, ParrotOptions)
from parrot.server.openai_tools import ToolStream, ToolUse
from parrot.server.sse import finish, is_disconnect, open_stream, send
from parrot.manager.sessions import Session
from parrot.server.tenants import TenantGrant
from parrot.errors import (CallFailedError, EngineUnavailableError, InvalidRequestError,
                           NotFoundError, ParrotError, PromptTooLongError)
from parrot.sampling import SamplingParams
from parrot.types import estimate_num_tokens

log = logging.getLogger(__name__)

_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                403: "permission_error", 404: "not_found_error", 405: "invalid_request_error",
                408: "timeout_error", 409: "conflict_error", 413: "invalid_request_error",
                424: "call_failed_error", 429: "rate_limit_error"}


def openai_error(exc: ParrotError) -> web.Response:
    return web.json_response(openai_error_body(exc), status=exc.status,
                             headers=error_headers(exc))


def openai_error_body(exc: ParrotError) -> dict[str, Any]:
    """OpenAI's error shape; `code` is OpenAI's code where one applies (e.g.
    `context_length_exceeded`), else Parrot's error class."""
    return {"error": {"message": str(exc),
                      "type": _ERROR_TYPES.get(exc.status, "server_error"),
                      "param": getattr(exc, "param", None),
                      "code": getattr(exc, "openai_code", type(exc).__name__)}}


@dataclass(frozen=True)
class _Window:
    """What a too-long request is told: the model's window and what the request asked for."""

    context_len: int        # the smallest window among the model's engines
    prompt_tokens: int      # the longest prompt, estimated
    max_tokens: int
    param: str              # "prompt" | "messages"

    def error(self, exc: ParrotError) -> ParrotError:
        """A call that failed because its prompt (plus max_tokens) overflowed an engine's
        window becomes OpenAI's 400 `context_length_exceeded`; anything else stays as it is."""
        if not (isinstance(exc, CallFailedError) and isinstance(exc.__cause__, PromptTooLongError)):
            return exc
        if self.prompt_tokens >= self.context_len:
            asked = f"the {self.param} are about {self.prompt_tokens} tokens" \
                if self.param == "messages" else f"the prompt is about {self.prompt_tokens} tokens"
        else:
            asked = (f"the {self.param} (about {self.prompt_tokens} tokens) plus max_tokens "
                     f"({self.max_tokens}) exceed it")
        return ContextLengthExceededError(
            f"This model's maximum context length is {self.context_len} tokens, but {asked}. "
            f"Reduce the length of the {self.param} or max_tokens.", self.param)

    def reraise(self, exc: ParrotError) -> None:
        """Raise `error(exc)` when it differs from `exc` (the caller re-raises `exc` else)."""
        mapped = self.error(exc)
        if mapped is not exc:
            raise mapped from None


Route = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _is_big(request: web.Request) -> bool:
    """A body worth decoding (and rendering) beside the loop; unknown length counts as big."""
    return request.content_length is None or request.content_length >= OFF_LOOP_BYTES


class OpenAIRoutes:
    def __init__(self, manager: Manager,
                 admit_session: Callable[[str | None], TenantGrant] | None = None,
                 admission: Admission | None = None,
                 require_caller: Callable[[str | None], None] | None = None,
                 admit_work: Callable[[], None] | None = None) -> None:
        self.manager = manager
        self._admit_work = admit_work  # 503 while draining, also for calls in a client's session
        # Where tenants are configured, a tenant's key or a session's token: checked from the
        # headers before a body is read, on every route (/v1/models included).
        self._require_caller = require_caller
        self._admission = admission  # the wire API's limits on unfinished calls
        # The wire API's checks before a new session: a tenant's API key where tenants are
        # configured (the request's bearer token), draining, the session limit.
        self._admit_session = admit_session
        self.started = int(time.time())

    def setup(self, app: web.Application) -> None:
        for method, path, route in (
                ("GET", "/v1/models", self.list_models),
                ("GET", "/v1/models/{model:.+}", self.get_model),
                ("POST", "/v1/completions", self.completions),
                ("POST", "/v1/chat/completions", self.chat_completions)):
            resource = app.router.add_route(method, path, self._guard(route)).resource
            # An over-limit Content-Length on an OpenAI route: the app's middleware answers
            # its 413 at once, in OpenAI's error shape (Parrot's on the other routes).
            if resource is not None:
                app[FRONT].error_shape(resource, openai_error)
            app.router.add_route("*", path, _method_not_allowed(method))

    def _guard(self, route: Route) -> Route:
        async def handler(request: web.Request) -> web.StreamResponse:
            serving_http()  # big bodies are decoded beside the loop
            try:
                if self._require_caller is not None:
                    self._require_caller(bearer_token(request))
                return await route(request)
            except ParrotError as exc:
                return openai_error(exc)
        return handler

    # --- models ---------------------------------------------------------------------------

    def served_models(self) -> dict[str, list[EngineState]]:
        models: dict[str, list[EngineState]] = {}
        for engine in self.manager.engines:
            models.setdefault(engine.info.model, []).append(engine)
        return models

    def _model_card(self, model: str) -> dict[str, Any]:
        return {"id": model, "object": "model", "created": self.started, "owned_by": "parrot"}

    async def list_models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            self._model_card(m) for m in self.served_models()]})

    async def get_model(self, request: web.Request) -> web.Response:
        return web.json_response(self._model_card(self._engines_of(
            request.match_info["model"])[0].info.model))

    def _engines_of(self, model: str) -> list[EngineState]:
        models = self.served_models()
        if not models:
            raise EngineUnavailableError("no engine is registered yet")
        if model not in models:
            error = NotFoundError(f"the model {model!r} does not exist; served: {sorted(models)}")
            error.param = "model"  # type: ignore[attr-defined]
            raise error
        return models[model]

    # --- completions ----------------------------------------------------------------------

    async def completions(self, request: web.Request) -> web.StreamResponse:
        data = await read_json(request, self._max_body, self.manager.config.request_body_timeout_s)
        req = await beside_loop(_is_big(request), lambda: CompletionRequest.from_json(data))
        caller = self._admit(request, req.parrot)   # who may ask comes before what exists
        engines = self._engines_of(req.model)
        window = _Window(min(e.info.max_context_len for e in engines),
                         max(estimate_num_tokens(p) for p in req.prompts),
                         req.sampling.max_tokens, "prompt")
        run = self._one_shot(caller, req.prompts, req.n, req.sampling, req.parrot, req.stream)
        reply = _Reply("cmpl", "text_completion", req.model, chat=False)
        return await self._serve(request, run, reply, req.stream, req.include_usage, window)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        data = await read_json(request, self._max_body, self.manager.config.request_body_timeout_s)
        req = await beside_loop(_is_big(request), lambda: ChatCompletionRequest.from_json(data))
        caller = self._admit(request, req.parrot)
        engines = self._engines_of(req.model)
        template = chat_template_of(engines)
        if not renderer_loaded():   # the first chat: its import beside the loop
            await asyncio.to_thread(load_renderer)
        prompt = await beside_loop(_is_big(request), lambda: template.render(req.messages))
        sampling = req.sampling
        context_len = min(e.info.max_context_len for e in engines)
        if not req.max_tokens_given:  # until the turn ends or the context is full (as vLLM)
            room = context_len - estimate_num_tokens(prompt)
            sampling = replace(sampling, max_tokens=max(room, 1))
        window = _Window(context_len, estimate_num_tokens(prompt), sampling.max_tokens,
                         "messages")
        run = self._one_shot(caller, [prompt], req.n, sampling, req.parrot, req.stream)
        reply = _Reply("chatcmpl", "chat.completion", req.model, chat=True)
        reply.tools = req.tools
        return await self._serve(request, run, reply, req.stream, req.include_usage, window)

    def _admit(self, request: web.Request, options: ParrotOptions) -> TenantGrant | Session | None:
        """The caller's right to run calls, checked before the model or anything else is looked
        up (an unauthenticated client learns nothing, not even which models exist): a
        tenant's grant for a private session, or the client's own session when joining one
        (the API key is then the session's token)."""
        if options.session_id is not None:
            session = self.manager.authenticate(options.session_id, bearer_token(request))
            if self._admit_work is not None:
                self._admit_work()
            return session
        return None if self._admit_session is None else self._admit_session(
            bearer_token(request))

    def _one_shot(self, caller: TenantGrant | Session | None,
                  prompts: list[str] | tuple[str, ...], n: int, sampling: SamplingParams,
                  options: ParrotOptions, stream: bool) -> OneShot:
        if isinstance(caller, Session):
            return OneShot(self.manager, prompts, n, sampling, options.criteria, caller,
                           options.output, options.inputs, stream, admission=self._admission)
        return OneShot(self.manager, prompts, n, sampling, options.criteria, stream=stream,
                       grant=caller, admission=self._admission)

    @property
    def _max_body(self) -> int:
        return self.manager.config.max_body_bytes

    async def _serve(self, request: web.Request, run: OneShot, reply: _Reply, stream: bool,
                     include_usage: bool, window: _Window) -> web.StreamResponse:
        await run.start()  # submits its calls in slices (deletes its session if it fails)
        if not run.owns_session:  # the outputs are the client's Semantic Variables
            reply.parrot = {"session_id": run.session.session_id,
                            "semantic_var_ids": [v.var_id for v in run.outputs]}
        try:
            if not stream:
                try:
                    choices = await run.choices()
                except ParrotError as exc:
                    window.reraise(exc)
                    raise
                return web.json_response(reply.whole(
                    [reply.choice(c.index, c.text, c.finish_reason) for c in choices],
                    run.usage().to_json()))
            # The first piece (or the error) is awaited before the stream opens: a request
            # the engines refuse at once (a prompt over the window) gets its 4xx status, as
            # from OpenAI, rather than a 200 whose stream carries the error.
            deltas = run.deltas()
            try:
                first: list[Delta] = [await anext(deltas)]
            except StopAsyncIteration:
                first = []
            except ParrotError as exc:
                window.reraise(exc)
                raise
            response = await open_stream(request)
            try:
                if reply.chat:  # OpenAI opens every chat choice with the role
                    for index in range(len(run.calls)):
                        await send(response, reply.chunk([reply.delta(index, None, role=True)]))
                try:
                    for delta in first:
                        await self._send_delta(response, reply, delta)
                    async for delta in deltas:
                        await self._send_delta(response, reply, delta)
                    if include_usage:
                        await send(response, reply.chunk([], run.usage().to_json()))
                except ParrotError as exc:
                    await send(response, openai_error_body(window.error(exc)))
                await finish(response)
            except Exception as exc:
                if not is_disconnect(exc):
                    raise
                log.info("%s %s: client went away; its calls are cancelled", request.method,
                         request.path)
            finally:
                await deltas.aclose()
            return response
        finally:
            await run.aclose()

    @staticmethod
    async def _send_delta(response: web.StreamResponse, reply: _Reply, delta: Delta) -> None:
        if delta.text or delta.finish_reason:   # a request with tools: its tool-call deltas
            for choice in reply.stream(delta.index, delta.text or None, delta.finish_reason):
                await send(response, reply.chunk([choice]))


def _method_not_allowed(allowed: str) -> Route:
    async def handler(request: web.Request) -> web.Response:
        error = InvalidRequestError(f"{request.method} is not allowed on {request.path}; "
                                    f"use {allowed}")
        error.status = 405
        response = openai_error(error)
        response.headers["Allow"] = allowed
        return response
    return handler


class _Reply:
    """OpenAI's reply and chunk shapes for one request (completion or chat)."""

    def __init__(self, prefix: str, obj: str, model: str, *, chat: bool) -> None:
        self.id = f"{prefix}-{secrets.token_hex(12)}"
        self.object, self.model, self.chat = obj, model, chat
        self.created = int(time.time())
        self.parrot: dict[str, Any] | None = None  # Parrot's extension, in every reply/chunk
        self.tools = ToolUse()    # a chat request's tools: replies may carry tool_calls
        self._tool_streams: dict[int, ToolStream] = {}

    def stream(self, index: int, text: str | None,
               finish_reason: str | None) -> list[dict[str, Any]]:
        """The chunk choices for one streamed piece (a request with tools: its deltas)."""
        if not (self.chat and self.tools.active):
            return [self.delta(index, text, finish_reason)]
        tool_stream = self._tool_streams.setdefault(index, ToolStream(self.tools, index))
        return tool_stream.feed(text, finish_reason)

    def choice(self, index: int, text: str, finish_reason: str) -> dict[str, Any]:
        if self.chat and self.tools.active:
            message, finish_reason = self.tools.message(text, finish_reason)
            return {"index": index, "message": message, "finish_reason": finish_reason,
                    "logprobs": None}
        if self.chat:
            return {"index": index, "message": {"role": "assistant", "content": text},
                    "finish_reason": finish_reason, "logprobs": None}
        return {"index": index, "text": text, "finish_reason": finish_reason, "logprobs": None}

    def delta(self, index: int, text: str | None, finish_reason: str | None = None, *,
              role: bool = False) -> dict[str, Any]:
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {}
            if text:
                delta["content"] = text
            return {"index": index, "delta": delta, "finish_reason": finish_reason,
                    "logprobs": None}
        return {"index": index, "text": text or "", "finish_reason": finish_reason,
                "logprobs": None}

    def whole(self, choices: list[dict[str, Any]], usage: dict[str, int]) -> dict[str, Any]:
        data = {"id": self.id, "object": self.object, "created": self.created,
                "model": self.model, "choices": choices, "usage": usage,
                "system_fingerprint": None}
        if self.parrot is not None:
            data["parrot"] = self.parrot
        return data

    def chunk(self, choices: list[dict[str, Any]],
              usage: dict[str, int] | None = None) -> dict[str, Any]:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        data = {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "choices": choices, "system_fingerprint": None}
        if usage is not None:
            data["usage"] = usage
        if self.parrot is not None:
            data["parrot"] = self.parrot
        return data
