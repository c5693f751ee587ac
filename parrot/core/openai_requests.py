"""Typed forms of the OpenAI-compatible request bodies, parsed and validated once at the edge.

Fields follow OpenAI's API reference. Fields Parrot cannot honour are refused with a message
naming them (never silently ignored) unless they are at their neutral value (e.g.
`presence_penalty: 0`). vLLM's extra sampling fields `top_k` and `ignore_eos` are accepted.
Parrot's own extension travels in `extra_body={"parrot": {...}}` (see `ParrotOptions`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from parrot.chat import ChatMessage, parse_messages
from parrot.errors import InvalidRequestError
from parrot.sampling import SamplingParams
from parrot.types import Criterion

MAX_N = 16
MAX_PROMPTS = 256
DEFAULT_COMPLETION_MAX_TOKENS = 16  # OpenAI's default for /v1/completions

_SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "seed", "stop", "ignore_eos")
# Accepted and ignored: they change nothing about the text (bookkeeping on OpenAI's side).
_IGNORED = ("user", "metadata", "store", "service_tier")
# Accepted only at the neutral value (name -> allowed values).
_NEUTRAL: dict[str, tuple[Any, ...]] = {
    "presence_penalty": (0, 0.0, None), "frequency_penalty": (0, 0.0, None),
    "logprobs": (None, False), "top_logprobs": (None, 0), "logit_bias": (None, {}),
    "echo": (None, False), "best_of": (None, 1), "suffix": (None,), "tools": (None, []),
    "tool_choice": (None, "none"), "response_format": (None, {"type": "text"}),
    "parallel_tool_calls": (None, False, True), "repetition_penalty": (None, 1, 1.0),
}


@dataclass(frozen=True)
class ParrotOptions:
    """`extra_body={"parrot": {"criteria": "throughput"}}`: the performance objective of the
    call (default latency, as for any interactive request), which the policy schedules by."""

    criteria: Criterion = Criterion.LATENCY

    @classmethod
    def from_json(cls, data: Any) -> "ParrotOptions":
        if data is None:
            return cls()
        if not isinstance(data, Mapping) or set(data) - {"criteria"}:
            raise InvalidRequestError("'parrot' must be an object {criteria?: "
                                      "'latency'|'throughput'}")
        return cls(Criterion.parse(data.get("criteria", "latency")))


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
    def from_json(cls, data: Any) -> "CompletionRequest":
        body = _object(data)
        common = _common(body, {"prompt", "max_tokens"}, "completions")
        prompt = body.get("prompt")
        prompts = [prompt] if isinstance(prompt, str) else prompt
        if not isinstance(prompts, list) or not 1 <= len(prompts) <= MAX_PROMPTS \
                or not all(isinstance(p, str) for p in prompts):
            raise _bad("prompt", "'prompt' must be a string or a list of 1 to "
                       f"{MAX_PROMPTS} strings (token-id prompts are not supported: send text)")
        max_tokens = body.get("max_tokens")
        return cls(prompts=tuple(prompts),
                   sampling=_sampling(body, DEFAULT_COMPLETION_MAX_TOKENS
                                      if max_tokens is None else max_tokens),
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

    @classmethod
    def from_json(cls, data: Any) -> "ChatCompletionRequest":
        body = _object(data)
        common = _common(body, {"messages", "max_tokens", "max_completion_tokens"}, "chat")
        messages = parse_messages(body.get("messages"))
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        return cls(messages=messages, sampling=_sampling(body, 1 if max_tokens is None else max_tokens),
                   max_tokens_given=max_tokens is not None, **common)


def _common(body: Mapping[str, Any], own: set[str], route: str) -> dict[str, Any]:
    allowed = own | {"model", "n", "stream", "stream_options", "parrot", *_SAMPLING_FIELDS,
                     *_IGNORED, *_NEUTRAL}
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise _bad(unknown[0], f"{route}: unsupported field(s) {unknown}")
    for name, neutral in _NEUTRAL.items():
        if name in body and body[name] not in neutral:
            raise _bad(name, f"'{name}'={body[name]!r} is not supported by Parrot "
                       f"(allowed: {[v for v in neutral if v is not None]} or absent)")
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
    if not isinstance(options, Mapping) or set(options) - {"include_usage"} \
            or not isinstance(options.get("include_usage", False), bool):
        raise _bad("stream_options", "'stream_options' must be {include_usage?: boolean}")
    if options and not stream:
        raise _bad("stream_options", "'stream_options' is only allowed with stream: true")
    return {"model": model, "n": n, "stream": stream,
            "include_usage": bool(options.get("include_usage", False)),
            "parrot": ParrotOptions.from_json(body.get("parrot"))}


def _sampling(body: Mapping[str, Any], max_tokens: Any) -> SamplingParams:
    wire = {k: body[k] for k in _SAMPLING_FIELDS if body.get(k) is not None}
    wire["max_tokens"] = max_tokens
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


def _bad(param: str, message: str) -> OpenAIParamError:
    return OpenAIParamError(message, param)


def _object(data: Any) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise OpenAIParamError("request body must be a JSON object", None)
    return data
