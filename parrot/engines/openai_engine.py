"""`openai` engine kind: the Engine protocol over any OpenAI-compatible server.

vLLM, SGLang, llama.cpp's server, or another Parrot can serve Parrot's calls:

* Fill appends the text to the context (a fork starts from the parent's text); nothing is sent.
* Generate sends a streamed `/v1/completions` of the context's whole text and appends what
  comes back; the server's own prefix cache (vLLM's automatic prefix caching, SGLang's radix
  cache) does the reuse that Fill/fork do in the builtin engine.
* FreeContext forgets the text.

Token counts: the server's tokenizer is not at hand, so `FillResult` counts 4 characters a
token. Generated tokens are counted as the server counts them: the stream asks for
`stream_options.include_usage` and the last chunk makes the Generate's tally the server's
`usage.completion_tokens`; a server that sends no usage is counted one token per text event
(vLLM, SGLang and llama.cpp send one per decode step). The stream carries text, not ids, so a
chunk's `token_ids` are placeholders (0), one per token counted: what the manager counts
(usage, budgets) is right; the ids themselves mean nothing. A Generate aborted mid-way closes
its stream; the engine does not count it in `aborted_generates` / `aborted_decode_tokens`:
what the server decoded before it saw the connection close is not reported back. Params:

    url               the server, with or without the trailing /v1 (required)
    model             the model to ask for (default: the first of GET /v1/models)
    api_key           sent as a bearer token (default: none)
    chat_template     a model folder or .jinja file whose template Parrot renders chats with
                      (default: ChatML)
    max_context_len   the model's context (default 4096)
    kv_cache_tokens   what the manager may keep cached as prefix contexts (default 262144);
                      also what the default `throughput_capacity: auto` takes its share of,
                      so best the server's own KV cache size
    request_timeout_s bound on one request (default: none)
"""

from __future__ import annotations

import json
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any
from collections.abc import AsyncGenerator, AsyncIterator, Mapping

import aiohttp

from parrot.chat import ChatTemplate, load_chat_template
from parrot.engines.protocol import (Engine, EngineInfo, EngineStats, FillRequest, FillResult,
                                     GenerateChunk, GenerateRequest)
from parrot.engines.tpot import TpotMeter
from parrot.errors import (EngineConfigError, EngineUnavailableError, InvalidRequestError,
                           PromptTooLongError, UnknownContextError)
from parrot.constraints import openai_fields
from parrot.sampling import SamplingParams
from parrot.types import estimate_num_tokens
from parrot.validation import Checks

BLOCK_SIZE = 16
_FINISH = {"stop": "stop", "length": "length", "eos": "eos"}
_CHECK = Checks("openai engine", EngineConfigError)


@dataclass(frozen=True)
class OpenAIEngineConfig:
    url: str
    model: str | None = None
    api_key: str | None = None
    chat_template: str | None = None
    max_context_len: int = 4096
    kv_cache_tokens: int = 262144
    request_timeout_s: float | None = None

    def __post_init__(self) -> None:
        _CHECK.require(isinstance(self.url, str) and self.url.startswith(("http://", "https://")),
                       "url", self.url, "a URL starting with http:// or https://")
        for key in ("max_context_len", "kv_cache_tokens"):
            _CHECK.positive_int(key, getattr(self, key))
        for key in ("model", "api_key", "chat_template"):
            _CHECK.text(key, getattr(self, key), optional=True)
        _CHECK.positive("request_timeout_s", self.request_timeout_s, optional=True)

    @classmethod
    def from_mapping(cls, params: Mapping[str, Any]) -> OpenAIEngineConfig:
        _CHECK.keys(params, cls.__dataclass_fields__, required=("url",))
        return cls(**params)

    @property
    def base_url(self) -> str:
        url = self.url.rstrip("/")
        return url if url.endswith("/v1") else url + "/v1"


class OpenAIEngine(Engine):
    def __init__(self, name: str, config: OpenAIEngineConfig) -> None:
        self.name = name
        self.config = config
        self._template: ChatTemplate | None = None
        if config.chat_template is not None:
            try:
                self._template = load_chat_template(config.chat_template)
            except (OSError, ValueError, InvalidRequestError) as exc:
                raise EngineConfigError(f"openai engine {name!r}.chat_template", str(exc)) \
                    from None
        self._model = config.model
        self._contexts: dict[str, str] = {}
        self._num_running = 0
        self._tpot = TpotMeter()   # time per output token as Generates are handed over
        self._http: aiohttp.ClientSession | None = None

    # ---- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        self._client()

    async def close(self) -> None:
        http, self._http = self._http, None
        if http is not None:
            await http.close()

    async def info(self) -> EngineInfo:
        return EngineInfo(self.name, "openai", await self._model_name(),
                          self.config.max_context_len, BLOCK_SIZE,
                          self.config.kv_cache_tokens // BLOCK_SIZE, self._template,
                          takes_prompt_in_generate=True)

    async def healthz(self) -> bool:
        try:
            await self._models()
        except (EngineUnavailableError, InvalidRequestError):
            return False
        return True

    # ---- the protocol ------------------------------------------------------------------------

    async def fill(self, request: FillRequest) -> FillResult:
        if request.text is None:
            raise InvalidRequestError("the openai engine takes text, not token ids")
        text = self._open(request.context_id, request.parent_context_id) + request.text
        if estimate_num_tokens(text) > self.config.max_context_len:
            raise PromptTooLongError(f"context {request.context_id!r} would hold about "
                                     f"{estimate_num_tokens(text)} tokens; the model takes "
                                     f"{self.config.max_context_len}")
        self._contexts[request.context_id] = text
        return FillResult(request.context_id, estimate_num_tokens(request.text),
                          estimate_num_tokens(text))

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        prompt_len = await self.fill_prompt(request)   # (it gets the whole text anyway)
        prompt = self._open(request.context_id, request.parent_context_id)
        self._contexts[request.context_id] = prompt
        body = {"model": await self._model_name(), "prompt": prompt, "stream": True,
                "stream_options": {"include_usage": True},
                **_sampling_body(request.sampling)}
        timer = self._tpot.timer()
        self._num_running += 1
        counted = 0                       # tokens reported in the chunks yielded so far
        last: tuple[str, str] | None = None   # the finishing event's (text, reason), held
        usage: int | None = None          # the server's completion_tokens
        try:
            async with self._client().post(self.config.base_url + "/completions", json=body,
                                           headers=self._headers()) as resp:
                if resp.status >= 400:
                    raise _http_error(resp.status, await resp.text())
                async with aclosing(_sse_events(resp)) as events:
                    async for event in events:
                        if "error" in event:
                            raise EngineUnavailableError(f"{self.config.base_url}: "
                                                         f"{event['error']}")
                        usage = _completion_tokens(event.get("usage"), usage)
                        for choice in event.get("choices") or ():
                            text = choice.get("text") or ""
                            reason = choice.get("finish_reason")
                            if request.context_id in self._contexts:
                                self._contexts[request.context_id] += text
                            if reason:   # held until the usage that follows it
                                last = (text, _FINISH.get(reason, reason))
                            elif text:
                                # an event of text counts as one token (one per decode step
                                # on vLLM, SGLang, llama.cpp; a server that merges steps reads
                                # as slower per token until its usage corrects the count)
                                chunk = GenerateChunk(text, (0,), prompt_len=prompt_len)
                                prompt_len = None
                                counted += 1
                                timer.observe(chunk, tokens=1)
                                yield chunk
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise EngineUnavailableError(f"{self.config.base_url} unreachable: {exc!r}") from exc
        finally:
            self._num_running -= 1
        if last is None:
            raise EngineUnavailableError(f"{self.config.base_url}: the stream ended before "
                                         "a finish_reason")
        text, reason = last
        tokens = max(usage - counted, 0) if usage is not None else int(bool(text))
        chunk = GenerateChunk(text, (0,) * tokens, reason, prompt_len)
        timer.observe(chunk, tokens=tokens)
        yield chunk

    async def free_context(self, context_id: str) -> None:
        if self._contexts.pop(context_id, None) is None:
            raise UnknownContextError(f"unknown context {context_id!r}")

    async def stats(self) -> EngineStats:
        tokens = sum(estimate_num_tokens(t) for t in self._contexts.values())
        total = self.config.kv_cache_tokens // BLOCK_SIZE
        return EngineStats(num_running=self._num_running, num_waiting=0,
                           num_blocks_total=total,
                           num_blocks_free=max(total - -(-tokens // BLOCK_SIZE), 0),
                           block_size=BLOCK_SIZE, num_tokens_in_use=tokens,
                           num_contexts=len(self._contexts), counters=self._tpot.counters())

    def context_text(self, context_id: str) -> str | None:
        """The text a context holds here (the prompt sent with its next Generate), or None."""
        return self._contexts.get(context_id)

    # ---- plumbing ----------------------------------------------------------------------------

    def _open(self, context_id: str, parent_id: str | None) -> str:
        """The text of `context_id`, forking `parent_id` when the context is new."""
        if context_id in self._contexts:
            return self._contexts[context_id]
        if parent_id is None:
            return ""
        if parent_id not in self._contexts:
            raise UnknownContextError(f"unknown parent context {parent_id!r}")
        return self._contexts[parent_id]

    def _client(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(
                total=self.config.request_timeout_s, connect=10.0))
        return self._http

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.config.api_key}"} if self.config.api_key else {}

    async def _model_name(self) -> str:
        if self._model is None:
            models = await self._models()
            if not models:
                raise EngineUnavailableError(f"{self.config.base_url} serves no model")
            self._model = models[0]
        return self._model

    async def _models(self) -> list[str]:
        try:
            async with self._client().get(self.config.base_url + "/models",
                                          headers=self._headers()) as resp:
                if resp.status >= 400:
                    raise _http_error(resp.status, await resp.text())
                data = await resp.json()
        except (TimeoutError, aiohttp.ClientError, json.JSONDecodeError) as exc:
            raise EngineUnavailableError(f"{self.config.base_url} unreachable: {exc!r}") from exc
        return [m["id"] for m in data.get("data", []) if isinstance(m, dict) and "id" in m]


def _sampling_body(sampling: SamplingParams) -> dict[str, Any]:
    body: dict[str, Any] = {"max_tokens": sampling.max_tokens,
                            "temperature": sampling.temperature, "top_p": sampling.top_p}
    if sampling.seed is not None:
        body["seed"] = sampling.seed
    if sampling.stop:
        body["stop"] = list(sampling.stop)
    # vLLM's extensions, sent only when they change something (OpenAI itself rejects them)
    if sampling.top_k:
        body["top_k"] = sampling.top_k
    if sampling.ignore_eos:
        body["ignore_eos"] = True
    if sampling.stop_token_ids:
        body["stop_token_ids"] = list(sampling.stop_token_ids)
    if sampling.constraint is not None:   # the server decodes under it (constraints.py)
        body.update(openai_fields(sampling.constraint))
    return body


def _completion_tokens(usage: Any, known: int | None) -> int | None:
    """`usage.completion_tokens` of a stream event, or what was known before it."""
    if isinstance(usage, Mapping):
        tokens = usage.get("completion_tokens")
        if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0:
            return tokens
    return known


def _http_error(status: int, text: str) -> Exception:
    try:
        message = json.loads(text)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = text[:500]
    if status >= 500 or status in (408, 429):
        return EngineUnavailableError(f"remote server answered {status}: {message}")
    return InvalidRequestError(f"remote server answered {status}: {message}")


async def _sse_events(resp: aiohttp.ClientResponse) -> AsyncGenerator[dict[str, Any], None]:
    """The JSON payloads of a server-sent event stream, up to `data: [DONE]`."""
    buffer = b""
    async for piece in resp.content.iter_any():
        buffer = (buffer + piece).replace(b"\r\n", b"\n")
        *events, buffer = buffer.split(b"\n\n")
        for event in events:
            for line in event.split(b"\n"):
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    return
                yield json.loads(data)


def create_openai_engine(name: str, params: Mapping[str, Any]) -> OpenAIEngine:
    return OpenAIEngine(name, OpenAIEngineConfig.from_mapping(params))
