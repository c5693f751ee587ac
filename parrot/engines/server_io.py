"""What the engine server's routes share: a JSON body read within its deadline, a request
parsed strictly, a Generate's `stream` flag and window check, NDJSON lines, and telling a
client that went away from a failure."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

from parrot.engines.protocol import Engine, GenerateRequest
from parrot.errors import (InvalidRequestError, ParrotError, PayloadTooLargeError,
                           RequestTimeoutError)

BODY_TIMEOUT_S = 30.0           # a request's body, once its headers are in
BODY_TIMEOUT_KEY = web.AppKey("parrot_body_timeout_s", float)
NDJSON = "application/x-ndjson"


def is_disconnect(exc: BaseException) -> bool:
    # aiohttp raises ClientConnectionResetError (a ConnectionResetError) writing to a closed peer
    return isinstance(exc, ConnectionError)


def ndjson_line(payload: dict[str, Any]) -> bytes:
    return (json.dumps(payload, separators=(",", ":")) + "\n").encode()


def parse(parser: Callable[[Any], Any], body: Any) -> Any:
    """`parser(body)`, any malformation a 400 (InvalidRequestError)."""
    try:
        return parser(body)
    except ParrotError:
        raise
    except (TypeError, ValueError, KeyError) as exc:
        raise InvalidRequestError(f"malformed request: {exc}") from None


def parse_generate(body: dict[str, Any]) -> tuple[GenerateRequest, bool]:
    """A Generate's body: the request and its `stream` flag (default false)."""
    body = dict(body)
    stream = body.pop("stream", False)
    if not isinstance(stream, bool):
        raise InvalidRequestError(f"stream must be a boolean, got {stream!r}")
    return parse(GenerateRequest.from_wire, body), stream


def check_window(request: GenerateRequest, window: int) -> None:
    """A Generate that could never finish as asked within the context window is refused up
    front: it would hold a batch slot until the window fills."""
    if request.sampling.max_tokens > window:
        raise InvalidRequestError(
            f"max_tokens={request.sampling.max_tokens} exceeds this engine's context "
            f"window of {window} tokens")


class ContextWindow:
    """The engine's context window for `check_window`, read from its info at the first Generate
    and kept: the window is a static fact of the engine, while `info()` builds the whole
    EngineInfo (chat template, serving limits; on the openai kind a request to its server)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._tokens: int | None = None

    async def check(self, request: GenerateRequest) -> None:
        if self._tokens is None:
            self._tokens = (await self._engine.info()).max_context_len
        check_window(request, self._tokens)


async def json_body(request: web.Request) -> dict[str, Any]:
    timeout_s = request.app.get(BODY_TIMEOUT_KEY, BODY_TIMEOUT_S)
    try:
        raw = await asyncio.wait_for(request.read(), timeout_s)
    except web.HTTPRequestEntityTooLarge as exc:
        raise PayloadTooLargeError(f"request body too large: {exc.text}") from None
    except TimeoutError:
        raise RequestTimeoutError(f"request body not received within {timeout_s:g} s") from None
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidRequestError(f"body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidRequestError(f"body must be a JSON object, got {type(body).__name__}")
    return body
