"""Submit-body fields read around the parser.

* `"chat": true` or `{"system": "..."}`: the prompt is rendered through the engines' chat
  template before it is parsed (`parrot.chat.chat_prompt`), so clients never write
  model-specific markup.
* `"stream": ["output", ...]`: these outputs will be read as they are generated (`astream`), so
  their Generates are streamed from the engine from the start (`mark_streamed`)."""

from __future__ import annotations

from typing import Any
from collections.abc import Iterable

from parrot.chat import ChatTemplate, chat_prompt
from parrot.core.engine_pool import EngineState
from parrot.core.manager import Manager
from parrot.core.nodes import Call
from parrot.core.sessions import Session
from parrot.errors import InvalidRequestError
from parrot.template import parse_template


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


def pop_streamed(body: Any) -> tuple[Any, tuple[str, ...]]:
    """The body without its `stream` field, and the output names it lists (checked against the
    prompt's outputs before anything is submitted)."""
    if not isinstance(body, dict) or "stream" not in body:
        return body, ()
    body = dict(body)
    names = body.pop("stream")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise InvalidRequestError("submit: 'stream' must be a list of output names")
    try:
        outputs = set(parse_template(body.get("prompt", "")).output_names)
    except (InvalidRequestError, TypeError):
        return body, ()  # the submit itself reports the bad prompt
    unknown = sorted(set(names) - outputs)
    if unknown:
        raise InvalidRequestError(f"submit: 'stream' names {unknown}, not outputs of the prompt")
    return body, tuple(names)


def mark_streamed(session: Session, call: Call, names: tuple[str, ...]) -> None:
    """Before the call can be dispatched: its listed outputs stream from the engine."""
    for name in names:
        session.variables[call.outputs[name].var_id].stream.wanted = True
