"""Chat messages → one prompt, through the model's own chat template.

A model folder ships its chat template (Jinja, as `chat_template.jinja` or in
`tokenizer_config.json`); an engine reports it in `EngineInfo.chat_template` and the manager
renders OpenAI chat requests and `chat=True` semantic functions with it. Rendering goes through
transformers' `render_jinja_template` (what `tokenizer.apply_chat_template` uses) when
transformers is installed, and through the same sandboxed Jinja environment otherwise, so a
manager without the `engine` extra renders identically. Engines without a template (the
simulated engine, a remote server that does not say) get ChatML, the format of SmolLM2/Qwen.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
from dataclasses import dataclass
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from parrot.errors import InvalidRequestError

ROLES = ("system", "user", "assistant", "tool", "developer")
MAX_MESSAGES = 4096

CHATML = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
          "{{ message['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@dataclass(frozen=True)
class ChatMessage:
    role: str
    content: str

    @classmethod
    def from_json(cls, data: Any, where: str) -> ChatMessage:
        if not isinstance(data, Mapping):
            raise InvalidRequestError(f"{where} must be an object {{role, content}}")
        role, content = data.get("role"), data.get("content")
        if role not in ROLES:
            raise InvalidRequestError(f"{where}.role must be one of {list(ROLES)}, got {role!r}")
        if isinstance(content, list):  # OpenAI's content parts: text parts only
            texts = [text for part in content
                     if isinstance(part, Mapping) and part.get("type") == "text"
                     and isinstance(text := part.get("text"), str)]
            if len(texts) != len(content):
                raise InvalidRequestError(f"{where}.content: only text parts are supported")
            content = "".join(texts)
        if not isinstance(content, str):
            raise InvalidRequestError(f"{where}.content must be a string or a list of text parts")
        return cls(role, content)

    def to_json(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


def parse_messages(data: Any, where: str = "messages") -> tuple[ChatMessage, ...]:
    if not isinstance(data, list) or not 1 <= len(data) <= MAX_MESSAGES:
        raise InvalidRequestError(f"'{where}' must be a list of 1 to {MAX_MESSAGES} messages")
    return tuple(ChatMessage.from_json(m, f"{where}[{i}]") for i, m in enumerate(data))


class SpecialTokens(TypedDict, total=False):
    """The tokens a chat template may name, passed to it as template variables."""

    bos_token: str
    eos_token: str


@dataclass(frozen=True)
class ChatTemplate:
    """A model's chat template and the special tokens templates may refer to."""

    source: str = CHATML
    bos_token: str | None = None
    eos_token: str | None = None

    def render(self, messages: Sequence[ChatMessage], *,
               add_generation_prompt: bool = True) -> str:
        conversation = [m.to_json() for m in messages]
        tokens = SpecialTokens()
        if self.bos_token is not None:
            tokens["bos_token"] = self.bos_token
        if self.eos_token is not None:
            tokens["eos_token"] = self.eos_token
        try:
            return _render(conversation, self.source, add_generation_prompt, tokens)
        except InvalidRequestError:
            raise
        except Exception as exc:  # noqa: BLE001 - a template raising (e.g. role order) is the
            # client's mistake as far as the request goes: report it, never crash the server
            raise InvalidRequestError(f"the model's chat template rejected the messages: "
                                      f"{exc}") from None

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "bos_token": self.bos_token, "eos_token": self.eos_token}

    @classmethod
    def from_json(cls, data: Any) -> ChatTemplate | None:
        if data is None:
            return None
        if not isinstance(data, Mapping) or not isinstance(data.get("source"), str):
            raise InvalidRequestError(f"chat_template must be {{source, bos_token?, eos_token?}}, "
                                      f"got {data!r}")
        return cls(data["source"], data.get("bos_token"), data.get("eos_token"))

    @classmethod
    def from_tokenizer(cls, tokenizer: Any) -> ChatTemplate | None:
        """The template a transformers tokenizer carries (None when it has none)."""
        source = getattr(tokenizer, "chat_template", None)
        if not isinstance(source, str) or not source:
            return None
        return cls(source, _token(tokenizer, "bos_token"), _token(tokenizer, "eos_token"))


def _token(tokenizer: Any, name: str) -> str | None:
    value = getattr(tokenizer, name, None)
    return value if isinstance(value, str) else None


_RENDERER = "transformers.utils.chat_template_utils"


def renderer_loaded() -> bool:
    """Whether a render imports nothing: transformers' renderer is imported already, or
    transformers is not installed (the sandboxed Jinja renders). Otherwise the first render
    imports transformers (1.1 s on the 2-core VM, seconds on a GPU host); a server awaits
    `load_renderer` beside its event loop first, so that no other request waits for it."""
    return _RENDERER in sys.modules or not _transformers_installed()


@functools.cache
def _transformers_installed() -> bool:
    return importlib.util.find_spec("transformers") is not None


def load_renderer() -> None:
    """Import transformers' renderer (see renderer_loaded), where it is installed."""
    if _transformers_installed():
        importlib.import_module(_RENDERER)


def _render(conversation: list[dict[str, str]], source: str, add_generation_prompt: bool,
            tokens: SpecialTokens) -> str:
    try:
        from transformers.utils.chat_template_utils import render_jinja_template
    except ImportError:
        return _render_jinja(conversation, source, add_generation_prompt, tokens)
    rendered = render_jinja_template(conversations=[conversation], chat_template=source,
                                     add_generation_prompt=add_generation_prompt, **tokens)
    texts = rendered[0] if isinstance(rendered, tuple) else rendered
    return texts[0] if isinstance(texts, list) else texts


def _render_jinja(conversation: list[dict[str, str]], source: str, add_generation_prompt: bool,
                  tokens: SpecialTokens) -> str:
    """The environment transformers builds: sandboxed, trim_blocks, lstrip_blocks,
    `raise_exception` for templates that reject a conversation."""
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(source).render(messages=conversation,
                                          add_generation_prompt=add_generation_prompt, **tokens)


def load_chat_template(path: str) -> ChatTemplate:
    """A chat template from a model folder (`chat_template.jinja`, else the `chat_template` of
    `tokenizer_config.json`, with its bos/eos tokens) or from a `.jinja` file."""
    import json
    from pathlib import Path

    where = Path(path).expanduser()
    if where.is_file():
        return ChatTemplate(where.read_text(encoding="utf-8"))
    config_path = where / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
    jinja = where / "chat_template.jinja"
    source = jinja.read_text(encoding="utf-8") if jinja.is_file() else config.get("chat_template")
    if not isinstance(source, str) or not source:
        raise InvalidRequestError(f"no chat template in {str(where)!r} (looked for "
                                  "chat_template.jinja and tokenizer_config.json)")
    return ChatTemplate(source, config_token(config, "bos_token"),
                        config_token(config, "eos_token"))


def config_token(config: Mapping[str, Any], name: str) -> str | None:
    """A special token tokenizer_config.json names, as text."""
    return token_text(config.get(name))


def token_text(value: Any) -> str | None:
    """A special token as a tokenizer config writes it, as text."""
    if isinstance(value, Mapping):  # {"content": "<s>", ...} in older tokenizer configs
        value = value.get("content")
    return value if isinstance(value, str) else None


def chat_prompt(template_source: str, system: str | None, template: ChatTemplate) -> str:
    """A semantic function's prompt template as a chat, rendered with the model's template.

    The text before an output is a user turn, the output is the assistant's answer to it:
    `"Summarize {{input:doc}} {{output:summary}}"` becomes [user: "Summarize {{input:doc}}",
    assistant: "{{output:summary}}"], with `system` first when given. Several outputs make a
    multi-turn chat. Placeholders pass through the chat template as text and stay placeholders
    of the rendered prompt (checked), so the manager fills and shares prefixes as for any prompt.
    """
    from parrot.template import Placeholder, parse_template

    parsed = parse_template(template_source)
    messages = [ChatMessage("system", system)] if system else []
    pending: list[str] = []
    for seg in parsed.segments:
        if not isinstance(seg, Placeholder):
            pending.append(seg.text)
        elif not seg.is_output:
            pending.append("{{input:" + seg.name + "}}")
        else:
            messages.append(ChatMessage("user", "".join(pending).strip()))
            messages.append(ChatMessage("assistant", "{{output:" + seg.name + "}}"))
            pending = []
    if "".join(pending).strip():
        raise InvalidRequestError("chat: text after the last output is never seen by the model; "
                                  "end the prompt with an {{output:...}}")
    rendered = template.render(messages, add_generation_prompt=False)
    try:
        again = parse_template(rendered)
    except InvalidRequestError:
        again = None
    if again is None or (again.input_names, again.output_names) \
            != (parsed.input_names, parsed.output_names):
        raise InvalidRequestError("the model's chat template changed the prompt's placeholders")
    return rendered
