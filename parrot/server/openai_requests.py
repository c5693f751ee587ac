"""Typed forms of the OpenAI-compatible request bodies, parsed and validated once at the edge.

Fields follow OpenAI's API reference, with OpenAI's defaults (`temperature` 1.0, `top_p` 1.0:
an omitted temperature samples, as OpenAI and vLLM do; the wire API keeps its own defaults in
`SamplingParams`). A field is one of four kinds, decided per field by one rule: would ignoring
it silently change the answer?

* implemented: the sampling fields, `n`, `stream`, vLLM's `top_k`, `ignore_eos`,
  `stop_token_ids`, and Parrot's extension `extra_body={"parrot": {...}}` (`ParrotOptions`);
* known, not implemented (`_NEUTRAL`): accepted only at the value that changes nothing
  (e.g. `presence_penalty: 0`, `tools: []`); any other value is a 400 naming the field, since
  ignoring it would change the answer;
* known hints (`_IGNORED`): bookkeeping or hints that do not change the text of a model that
  does no hidden reasoning (`user`, `store`, `prompt_cache_key`, `reasoning_effort`, ...):
  accepted and ignored;
* unknown (newer fields, other servers' extensions): accepted and ignored, as vLLM does, and
  listed in a debug log line so that a surprised user can see what was dropped.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar, Literal
from collections.abc import Mapping

from parrot.chat import ChatMessage, parse_messages
from parrot.errors import InvalidRequestError
from parrot.sampling import SamplingParams
from parrot.server.openai_tools import (ToolUse, completion_constraint, parse_tool_use,
                                       tool_messages)
from parrot.types import Criterion

log = logging.getLogger(__name__)

MAX_N = 16
MAX_PROMPTS = 256
DEFAULT_COMPLETION_MAX_TOKENS = 16  # OpenAI's default for /v1/completions

_SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "seed", "stop", "stop_token_ids",
                    "ignore_eos")
# OpenAI's sampling defaults, applied when a request omits the field (OpenAI's API reference:
# temperature 1, top_p 1). Not SamplingParams' own (greedy), which the wire API documents.
OPENAI_SAMPLING_DEFAULTS: dict[str, Any] = {"temperature": 1.0, "top_p": 1.0}
# Known fields Parrot does not implement: accepted only at the value that changes nothing
# (name -> allowed values); anything else would be silently answered differently, so it is a
# 400 naming the field. OpenAI's, then vLLM's extensions.
_NEUTRAL: dict[str, tuple[Any, ...]] = {
    "presence_penalty": (0, 0.0, None), "frequency_penalty": (0, 0.0, None),
    "logprobs": (None, False), "top_logprobs": (None, 0), "logit_bias": (None, {}),
    "echo": (None, False), "best_of": (None, 1), "suffix": (None,),
    "functions": (None, []), "function_call": (None, "none"), "audio": (None,),
    "modalities": (None, ["text"]), "web_search_options": (None,),
    "repetition_penalty": (None, 1, 1.0), "min_p": (None, 0, 0.0), "min_tokens": (None, 0),
    "length_penalty": (None, 1, 1.0), "use_beam_search": (None, False),
    "include_stop_str_in_output": (None, False), "skip_special_tokens": (None, True),
    "add_generation_prompt": (None, True), "continue_final_message": (None, False),
    "truncate_prompt_tokens": (None,), "prompt_logprobs": (None, 0),
    "chat_template": (None,), "chat_template_kwargs": (None, {}),
    "guided_json": (None,), "guided_regex": (None,), "guided_choice": (None,),
    "guided_grammar": (None,), "structured_outputs": (None,),
}
# Known fields accepted and ignored: bookkeeping, caching and routing hints, and reasoning
# hints (the models Parrot serves do no hidden reasoning, so the text does not change).
# `parallel_tool_calls` only matters with tools, which are refused above.
_IGNORED = frozenset({
    "user", "metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier",
    "reasoning_effort", "verbosity", "parallel_tool_calls", "prediction", "priority",
    "request_id"})


# --- the wire bodies: what a client may send (the parser allows exactly these fields, and
# /openapi.json is generated from them) ---------------------------------------------------------

@dataclass(frozen=True)
class StreamOptions:
    include_usage: bool = False   # a last chunk with `usage` and no choices

    OPEN_SCHEMA: ClassVar[bool] = True   # other options (newer OpenAI ones) are ignored


@dataclass(frozen=True)
class ParrotOptionsBody:
    """Parrot's extension, sent as `extra_body={"parrot": {...}}`. With `session_id` (and the
    session's token as the API key) the request runs in that session: its output becomes a
    Semantic Variable named `output` that later semantic functions can consume, and the prompt
    (or the messages) may use `{{input:name}}` placeholders bound by `inputs` to the session's
    variables. The reply then carries `parrot.semantic_var_ids` (one per choice)."""

    criteria: Literal["latency", "throughput"] = "latency"
    session_id: str | None = None
    output: str | None = None               # the output variable's name (default "completion")
    inputs: dict[str, str] | None = None    # placeholder name -> semantic_var_id


@dataclass(frozen=True)
class _CommonBody:
    # Fields not listed here are accepted and ignored (the module's docstring); the generated
    # schema says so with additionalProperties.
    OPEN_SCHEMA: ClassVar[bool] = True

    model: str
    n: int | None = None                      # choices per prompt, 1 to 16
    stream: bool | None = None                # server-sent events, ending `data: [DONE]`
    stream_options: StreamOptions | None = None
    temperature: float | None = None          # default 1.0 (OpenAI's)
    top_p: float | None = None                # default 1.0
    top_k: int | None = None                  # vLLM's extension
    seed: int | None = None                   # choice j of n uses seed + j
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None   # vLLM's extension
    ignore_eos: bool | None = None            # vLLM's extension
    parrot: ParrotOptionsBody | None = None
    user: str | None = None                   # accepted, ignored
    metadata: dict[str, str] | None = None    # accepted, ignored
    store: bool | None = None                 # accepted, ignored
    service_tier: str | None = None           # accepted, ignored
    prompt_cache_key: str | None = None       # accepted, ignored
    reasoning_effort: str | None = None       # accepted, ignored
    min_p: float | None = None                # 0 only (vLLM's extension)
    presence_penalty: float | None = None     # 0 only
    frequency_penalty: float | None = None    # 0 only
    repetition_penalty: float | None = None   # 1 only
    logprobs: bool | None = None              # false only
    logit_bias: dict[str, float] | None = None  # empty only


@dataclass(frozen=True)
class CompletionBody(_CommonBody):
    """POST /v1/completions: OpenAI's legacy completions (token-id prompts are not taken)."""

    prompt: str | list[str] = field(default="", metadata={"required": True})
    max_tokens: int | None = None             # default 16
    echo: bool | None = None                  # false only
    best_of: int | None = None                # 1 only
    suffix: str | None = None                 # null only
    # a constraint, as vLLM takes it on completions (openai_tools.completion_constraint)
    response_format: dict[str, Any] | None = None
    guided_json: dict[str, Any] | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None


@dataclass(frozen=True)
class ChatCompletionBody(_CommonBody):
    """POST /v1/chat/completions: messages rendered with the model's chat template."""

    messages: list[ChatMessage] = field(default_factory=list, metadata={"required": True})
    max_tokens: int | None = None             # default: until the turn ends / context is full
    max_completion_tokens: int | None = None  # OpenAI's newer name of max_tokens
    top_logprobs: int | None = None           # 0 only
    # structured outputs and tool calls (openai_tools.py)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None   # none | auto | required | a function
    response_format: dict[str, Any] | None = None     # text | json_object | json_schema
    parallel_tool_calls: bool | None = None


def _allowed(body: type) -> set[str]:
    return {f.name for f in fields(body)}


@dataclass(frozen=True)
class ParrotOptions:
    """The parsed `parrot` extension (`ParrotOptionsBody`): the performance objective of the
    call (default latency, as for any interactive request), which the policy schedules by, and
    optionally the session the request joins."""

    criteria: Criterion = Criterion.LATENCY
    session_id: str | None = None
    output: str = "completion"
    inputs: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_json(cls, data: Any) -> ParrotOptions:
        if data is None:
            return cls()
        allowed = _allowed(ParrotOptionsBody)
        if not isinstance(data, Mapping) or set(data) - allowed:
            raise _bad("parrot", f"'parrot' must be an object with fields {sorted(allowed)}")
        session_id, output = data.get("session_id"), data.get("output", "completion")
        inputs = data.get("inputs") or {}
        if session_id is not None and not isinstance(session_id, str):
            raise _bad("parrot", "parrot.session_id must be a string")
        if not isinstance(output, str) or not output.isidentifier():
            raise _bad("parrot", "parrot.output must be an identifier")
        if not isinstance(inputs, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in inputs.items()):
            raise _bad("parrot", "parrot.inputs must map placeholder names to semantic_var_ids")
        if (inputs or "output" in data) and session_id is None:
            raise _bad("parrot", "parrot.inputs and parrot.output need parrot.session_id")
        return cls(Criterion.parse(data.get("criteria", "latency")), session_id, output,
                   tuple(sorted(inputs.items())))


@dataclass(frozen=True)
class CompletionRequest:
    """POST /v1/completions."""

    model: str
    prompts: tuple[str, ...]           # `prompt`: one string or a list of strings
    sampling: SamplingParams
    max_tokens_given: bool             # False: the default of the route applied
    n: int = 1
    stream: bool = False
    include_usage: bool = False        # stream_options.include_usage
    parrot: ParrotOptions = ParrotOptions()

    @classmethod
    def from_json(cls, data: Any) -> CompletionRequest:
        body = _object(data)
        common = _common(body, CompletionBody, "completions")
        prompt = body.get("prompt")
        prompts = [prompt] if isinstance(prompt, str) else prompt
        if not isinstance(prompts, list) or not 1 <= len(prompts) <= MAX_PROMPTS \
                or not all(isinstance(p, str) for p in prompts):
            raise _bad("prompt", "'prompt' must be a string or a list of 1 to "
                       f"{MAX_PROMPTS} strings (token-id prompts are not supported: send text)")
        max_tokens = body.get("max_tokens")
        sampling = _sampling(body, DEFAULT_COMPLETION_MAX_TOKENS
                             if max_tokens is None else max_tokens)
        constraint = completion_constraint(body)
        if constraint is not None:
            try:
                sampling = replace(sampling, constraint=constraint)
            except InvalidRequestError as exc:   # e.g. stop strings with a constraint
                raise _bad("stop", str(exc)) from None
        return cls(prompts=tuple(prompts), sampling=sampling,
                   max_tokens_given=max_tokens is not None, **common)


@dataclass(frozen=True)
class ChatCompletionRequest:
    """POST /v1/chat/completions. Without max_tokens / max_completion_tokens generation runs
    until the model ends its turn or the context is full, as OpenAI does."""

    model: str
    messages: tuple[ChatMessage, ...]
    sampling: SamplingParams
    max_tokens_given: bool
    n: int = 1
    stream: bool = False
    include_usage: bool = False
    parrot: ParrotOptions = ParrotOptions()
    tools: ToolUse = ToolUse()   # response_format / tools / tool_choice (openai_tools.py)

    @classmethod
    def from_json(cls, data: Any) -> ChatCompletionRequest:
        body = _object(data)
        common = _common(body, ChatCompletionBody, "chat")
        tools = parse_tool_use(body)
        messages = parse_messages(tools.with_tools(tool_messages(body.get("messages"))))
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        sampling = _sampling(body, 1 if max_tokens is None else max_tokens)
        if tools.constraint is not None:
            try:
                sampling = replace(sampling, constraint=tools.constraint)
            except InvalidRequestError as exc:   # e.g. stop strings with a constraint
                raise _bad("response_format", str(exc)) from None
        return cls(messages=messages, sampling=sampling,
                   max_tokens_given=max_tokens is not None, tools=tools, **common)


def _common(body: Mapping[str, Any], wire: type, route: str) -> dict[str, Any]:
    # vLLM's guided decoding is implemented on /v1/completions (a constraint), not on chat
    implemented = _allowed(wire) & {"guided_json", "guided_regex", "guided_choice"}
    for name, neutral in _NEUTRAL.items():
        if name in body and name not in implemented and not _is_neutral(body[name], neutral):
            raise _bad(name, f"'{name}'={body[name]!r} is not supported by Parrot: ignoring "
                       "it would change the answer (allowed: "
                       f"{[v for v in neutral if v is not None]} or absent)")
    ignored = sorted(set(body) - _allowed(wire) - set(_NEUTRAL))
    if ignored:
        log.debug("%s: ignored unknown field(s) %s", route, ignored)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("model", "'model' must be a non-empty string (see GET /v1/models)")
    n = body.get("n", 1)
    if n is None:
        n = 1
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_N:
        raise _bad("n", f"'n' must be an integer in [1, {MAX_N}], got {n!r}")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise _bad("stream", f"'stream' must be a boolean, got {stream!r}")
    options = body.get("stream_options") or {}
    if not isinstance(options, Mapping) \
            or not isinstance(options.get("include_usage", False), bool):
        raise _bad("stream_options", "'stream_options' must be {include_usage?: boolean}")
    if set(options) - {"include_usage"}:
        log.debug("%s: ignored stream_options %s", route, sorted(set(options) - {"include_usage"}))
    if options and not stream:
        raise _bad("stream_options", "'stream_options' is only allowed with stream: true")
    return {"model": model, "n": n, "stream": stream,
            "include_usage": bool(options.get("include_usage", False)),
            "parrot": ParrotOptions.from_json(body.get("parrot"))}


def _is_neutral(value: Any, neutral: tuple[Any, ...]) -> bool:
    # `value in neutral` would take True for 1 and False for 0: a bool matches only a bool
    return any(isinstance(value, bool) == isinstance(v, bool) and value == v for v in neutral)


def _sampling(body: Mapping[str, Any], max_tokens: Any) -> SamplingParams:
    wire = {**OPENAI_SAMPLING_DEFAULTS,
            **{k: body[k] for k in _SAMPLING_FIELDS if body.get(k) is not None}}
    wire["max_tokens"] = max_tokens
    if wire.get("top_k") == -1:   # vLLM's spelling of "no top-k cut"
        wire["top_k"] = 0
    try:
        return SamplingParams.from_json(wire)
    except InvalidRequestError as exc:
        name = str(exc).partition("sampling.")[2].partition("=")[0] or None
        raise OpenAIParamError(str(exc), name) from None


class OpenAIParamError(InvalidRequestError):
    """A 400 that names the offending field (OpenAI's `error.param`)."""

    def __init__(self, message: str, param: str | None) -> None:
        super().__init__(message)
        self.param = param


class ContextLengthExceededError(OpenAIParamError):
    """The prompt, plus the tokens asked for, does not fit the model's context window: a 400
    with OpenAI's code `context_length_exceeded` (what OpenAI and vLLM answer), never the
    424 of a failed call."""

    openai_code = "context_length_exceeded"


def _bad(param: str, message: str) -> OpenAIParamError:
    return OpenAIParamError(message, param)


def _object(data: Any) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise OpenAIParamError("request body must be a JSON object", None)
    return data
