"""Submit fields the manager acts on around `Manager.submit`.

* `chat` (`ChatSpec`): the prompt is rendered through the engines' chat template before the
  manager parses it (`parrot.chat.chat_prompt`), so clients never write model-specific markup.
* `stream`: these outputs will be read as they are generated (`astream`), so their Generates
  are streamed from the engine from the start (`mark_streamed`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from parrot.chat import ChatTemplate, chat_prompt
from parrot.manager.engine_pool import EngineState
from parrot.manager.manager import Manager
from parrot.manager.nodes import Call
from parrot.manager.sessions import Session
from parrot.wire_types import SubmitRequest


def chat_template_of(engines: Iterable[EngineState]) -> ChatTemplate:
    """The template of the first engine that has one (one model per manager is the norm),
    else ChatML."""
    return next((e.info.chat_template for e in engines if e.info.chat_template is not None),
                ChatTemplate())


def render_chat(manager: Manager, request: SubmitRequest) -> SubmitRequest:
    """The submit with a `chat` prompt rendered (others are returned as they are)."""
    if request.chat is None:
        return request
    prompt = chat_prompt(request.prompt, request.chat.system,
                         chat_template_of(manager.engines))
    return dataclasses.replace(request, prompt=prompt, chat=None)


def mark_streamed(session: Session, call: Call, names: Iterable[str]) -> None:
    """Before the call can be dispatched: its listed outputs stream from the engine."""
    for name in names:
        session.variables[call.outputs[name].var_id].stream.wanted = True
