"""Chat semantic functions on the wire: a submit body with `"chat": true` or
`"chat": {"system": "..."}` has its prompt rendered through the engines' chat template before it
is parsed (`parrot.chat.chat_prompt`), so clients never write model-specific markup."""

from __future__ import annotations

from typing import Any, Iterable

from parrot.chat import ChatTemplate, chat_prompt
from parrot.core.engine_pool import EngineState
from parrot.core.manager import Manager
from parrot.errors import InvalidRequestError


def chat_template_of(engines: Iterable[EngineState]) -> ChatTemplate:
    """The template of the first engine that has one (one model per manager is the norm),
    else ChatML."""
    return next((e.info.chat_template for e in engines if e.info.chat_template is not None),
                ChatTemplate())


def render_chat_submit(manager: Manager, body: Any) -> Any:
    """The submit body with a `chat` prompt rendered (other bodies are returned as they are)."""
    if not isinstance(body, dict) or "chat" not in body:
        return body
    body = dict(body)
    chat = body.pop("chat")
    if chat is False or chat is None:
        return body
    if chat is True:
        chat = {}
    if not isinstance(chat, dict) or set(chat) - {"system"} \
            or not isinstance(chat.get("system", ""), str):
        raise InvalidRequestError("submit: 'chat' must be true or {system?: string}")
    if not isinstance(body.get("prompt"), str):
        raise InvalidRequestError("submit: 'prompt' must be a string")
    body["prompt"] = chat_prompt(body["prompt"], chat.get("system") or None,
                                 chat_template_of(manager.engines))
    return body
