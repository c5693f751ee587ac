"""OpenAI's structured outputs and tool calls on /v1/chat/completions.

* `response_format`: `{"type": "text"}` (free), `{"type": "json_object"}` (any JSON object),
  `{"type": "json_schema", "json_schema": {"name", "schema", "strict"?}}`: decoded under the
  constraint (parrot/constraints.py), so the content is valid by construction; `strict` is
  accepted either way (the decode is always constrained).
* `tools` (functions) with `tool_choice`:
  * `"none"`: the tools are not shown; plain text.
  * `"required"` or `{"type": "function", "function": {"name"}}`: the reply is decoded under a
    JSON Schema of one call, `{"name": <a tool's name>, "arguments": <its parameters>}`
    (name first), and returned as `tool_calls` with `finish_reason: "tool_calls"`.
  * `"auto"` (the default with tools): free text, parsed afterwards in the Hermes/Qwen format
    the tool prompt asks for, `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (a
    reply that is only such a JSON object counts too); a reply with no call is content.
  The tools are shown to the model in a system message in that format (chat templates without
  a tools section, such as SmolLM2's, would otherwise never see them).
* Input messages: `tool` messages (their `content`), and assistant messages carrying
  `tool_calls` (rendered back into the `<tool_call>` form the model produced them in).
* Streaming: a forced call streams as OpenAI does: one delta with the call's id, type and
  name (arguments ""), then the arguments in pieces as decoded, then `finish_reason:
  "tool_calls"`. An `auto` reply is held until it ends (a tool call can only be told from
  content once parsed), then sent as content or as tool-call deltas.
One call per choice (`parallel_tool_calls` is accepted; required/named decode one call).
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from parrot.constraints import (Choice, Constraint, ConstraintError, JsonObject, JsonSchema,
                                Regex, check_constraint)
from parrot.errors import InvalidRequestError

MAX_TOOLS = 128
TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# the head of a forced call as decoded (constraints.JSON_OPTIONS fixes the layout)
FORCED_HEAD = re.compile(r'^\{"name": ("(?:[^"\\]|\\.)*"), "arguments": ')


def _bad(param: str, message: str) -> InvalidRequestError:
    error = ConstraintError(message)
    error.param = param  # type: ignore[attr-defined]  # OpenAI's error.param
    return error


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]

    def to_prompt(self) -> str:
        return json.dumps({"type": "function", "function": {
            "name": self.name, "description": self.description,
            "parameters": self.parameters}}, ensure_ascii=False)


@dataclass(frozen=True)
class ToolUse:
    """A chat request's `response_format`, `tools` and `tool_choice`, parsed."""

    tools: tuple[Tool, ...] = ()
    choice: str = "none"                 # "none" | "auto" | "required" | "function"
    function: str | None = None          # the named function of a "function" choice
    response_format: Constraint | None = None

    @property
    def forced(self) -> bool:
        return self.choice in ("required", "function")

    @property
    def active(self) -> bool:
        return self.choice != "none"

    @property
    def constraint(self) -> Constraint | None:
        """What the reply is decoded under."""
        if not self.forced:
            return self.response_format
        tools = [t for t in self.tools if self.function in (None, t.name)]
        calls = [{"type": "object", "properties": {
            "name": {"const": t.name}, "arguments": t.parameters},
            "required": ["name", "arguments"], "additionalProperties": False} for t in tools]
        return JsonSchema.of(calls[0] if len(calls) == 1 else {"anyOf": calls})

    def system_prompt(self) -> str:
        return ("You can call functions. The available tools, one JSON signature per line:\n"
                "<tools>\n" + "\n".join(t.to_prompt() for t in self.tools) + "\n</tools>\n"
                "To call a tool, reply with exactly:\n<tool_call>\n"
                '{"name": <function-name>, "arguments": <arguments-json-object>}\n</tool_call>')

    def with_tools(self, messages: list[Any]) -> list[Any]:
        """The raw messages with the tools' system prompt (merged into a leading system
        message) when the tools are in play."""
        if not self.active or not self.tools:
            return messages
        text = self.system_prompt()
        first = messages[0] if messages else None
        if isinstance(first, Mapping) and first.get("role") == "system" \
                and isinstance(first.get("content"), str):
            return [{"role": "system", "content": first["content"] + "\n\n" + text},
                    *messages[1:]]
        return [{"role": "system", "content": text}, *messages]

    # --- replies ------------------------------------------------------------------------

    def parse(self, text: str) -> list[dict[str, Any]]:
        """The tool calls of a finished reply ([] for content)."""
        if not self.active:
            return []
        if self.forced:
            found = [text]
        else:
            found = TOOL_CALL.findall(text) or ([text.strip()] if text.strip().startswith("{")
                                                else [])
        calls = []
        names = {t.name for t in self.tools}
        for raw in found:
            try:
                data = json.loads(raw)
            except ValueError:
                continue
            if (isinstance(data, Mapping) and data.get("name") in names
                    and isinstance(data.get("arguments", {}), Mapping)):
                calls.append(_call(data["name"], json.dumps(data.get("arguments", {}),
                                                            ensure_ascii=False)))
        return calls

    def message(self, text: str, finish_reason: str) -> tuple[dict[str, Any], str]:
        """The chat reply's message and finish_reason."""
        calls = self.parse(text) if finish_reason == "stop" else []
        if calls:
            return {"role": "assistant", "content": None, "tool_calls": calls}, "tool_calls"
        return {"role": "assistant", "content": text}, finish_reason


def _call(name: str, arguments: str) -> dict[str, Any]:
    return {"id": f"call_{secrets.token_hex(12)}", "type": "function",
            "function": {"name": name, "arguments": arguments}}


@dataclass
class ToolStream:
    """One streamed choice of a request with tools: text in, OpenAI's chat deltas out."""

    tools: ToolUse
    index: int
    text: str = ""
    sent: int = 0                   # of text, the characters already sent as arguments
    call_id: str | None = None      # set once the forced call's head went out
    deltas: list[dict[str, Any]] = field(default_factory=list)

    def feed(self, piece: str | None, finish_reason: str | None) -> list[dict[str, Any]]:
        """The choice deltas (each the `choices[i]` of one chunk) for a piece of text."""
        self.text += piece or ""
        out: list[dict[str, Any]] = []
        if self.tools.forced:
            if self.call_id is None and (head := FORCED_HEAD.match(self.text)):
                self.call_id = f"call_{secrets.token_hex(12)}"
                self.sent = head.end()
                out.append(self._delta({"tool_calls": [{
                    "index": 0, "id": self.call_id, "type": "function",
                    "function": {"name": json.loads(head.group(1)), "arguments": ""}}]}))
            if self.call_id is not None:
                # the arguments, holding back the call object's closing brace
                end = len(self.text) - 1 if finish_reason is None else self.text.rfind("}")
                if end > self.sent:
                    out.append(self._delta({"tool_calls": [{
                        "index": 0, "function": {"arguments": self.text[self.sent:end]}}]}))
                    self.sent = end
        if finish_reason is None:
            return out
        if self.call_id is not None:
            return out + [self._delta({}, "tool_calls" if finish_reason == "stop"
                                      else finish_reason)]
        message, reason = self.tools.message(self.text, finish_reason)
        if message.get("tool_calls"):
            calls = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
            return out + [self._delta({"tool_calls": calls}), self._delta({}, reason)]
        return out + [self._delta({"content": self.text} if self.text else {}, reason)]

    def _delta(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {"index": self.index, "delta": delta, "finish_reason": finish_reason,
                "logprobs": None}


# --- parsing the request's fields ------------------------------------------------------------

def parse_tool_use(body: Mapping[str, Any]) -> ToolUse:
    """`response_format`, `tools`, `tool_choice` of a chat body; a 400 naming the field when
    malformed, or when a schema does not compile."""
    response_format = _response_format(body.get("response_format"))
    tools = _tools(body.get("tools"))
    raw = body.get("tool_choice")
    function = None
    if raw is None:
        choice = "auto" if tools else "none"
    elif raw in ("none", "auto", "required"):
        choice = raw
    elif (isinstance(raw, Mapping) and raw.get("type") == "function"
          and isinstance(raw.get("function"), Mapping)
          and isinstance(raw["function"].get("name"), str)):
        choice, function = "function", raw["function"]["name"]
        if function not in {t.name for t in tools}:
            raise _bad("tool_choice", f"tool_choice names {function!r}, not one of the tools")
    else:
        raise _bad("tool_choice", "tool_choice must be 'none', 'auto', 'required' or "
                   "{'type': 'function', 'function': {'name': ...}}")
    if choice in ("auto", "required", "function") and not tools:
        raise _bad("tool_choice", f"tool_choice {raw!r} needs 'tools'")
    if choice != "none" and response_format is not None:
        raise _bad("response_format", "response_format cannot be combined with tools "
                   "(tool_choice 'auto', 'required' or a function); send one of them")
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise _bad("parallel_tool_calls", "parallel_tool_calls must be a boolean")
    use = ToolUse(tools, choice, function, response_format)
    try:
        check_constraint(use.constraint, "tools" if use.forced else "response_format")
    except ConstraintError as exc:
        raise _bad("tools" if use.forced else "response_format", str(exc)) from None
    return use


def completion_constraint(body: Mapping[str, Any]) -> Constraint | None:
    """/v1/completions' constraint: `response_format` (as on chat; vLLM takes it on
    completions too) or vLLM's `guided_json` / `guided_regex` / `guided_choice`, at most one
    (what the `openai` engine kind sends to the server it fronts)."""
    given = [k for k in ("response_format", "guided_json", "guided_regex", "guided_choice")
             if body.get(k) is not None]
    if len(given) > 1:
        raise _bad(given[1], f"at most one of {given} may be given")
    if not given:
        return None
    key = given[0]
    try:
        constraint: Constraint | None
        if key == "response_format":
            constraint = _response_format(body[key])
        elif key == "guided_json":
            constraint = JsonSchema.of(body[key])
        elif key == "guided_regex":
            constraint = Regex(body[key])
        else:
            choices = body[key]
            if not isinstance(choices, list):
                raise ConstraintError("guided_choice must be a list of strings")
            constraint = Choice(tuple(choices))
        check_constraint(constraint, key)
    except ConstraintError as exc:
        raise _bad(key, str(exc)) from None
    return constraint


def _response_format(data: Any) -> Constraint | None:
    if data is None:
        return None
    kind = data.get("type") if isinstance(data, Mapping) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return JsonObject()
    if kind == "json_schema":
        spec = data.get("json_schema")
        if not isinstance(spec, Mapping) or "schema" not in spec:
            raise _bad("response_format", "response_format json_schema needs "
                       "{'json_schema': {'name', 'schema', 'strict'?}}")
        try:
            constraint = JsonSchema.of(spec["schema"], spec.get("name"))
        except ConstraintError as exc:
            raise _bad("response_format", f"response_format: {exc}") from None
        return constraint
    raise _bad("response_format", "response_format.type must be 'text', 'json_object' or "
               f"'json_schema', got {kind!r}")


def _tools(data: Any) -> tuple[Tool, ...]:
    if data is None:
        return ()
    if not isinstance(data, list) or len(data) > MAX_TOOLS:
        raise _bad("tools", f"tools must be a list of at most {MAX_TOOLS} functions")
    tools = []
    for i, item in enumerate(data):
        fn = item.get("function") if isinstance(item, Mapping) else None
        if not isinstance(item, Mapping) or item.get("type") != "function" \
                or not isinstance(fn, Mapping):
            raise _bad("tools", f"tools[{i}] must be {{'type': 'function', 'function': {{...}}}}")
        name, params = fn.get("name"), fn.get("parameters") or {"type": "object"}
        if not isinstance(name, str) or not NAME.match(name):
            raise _bad("tools", f"tools[{i}].function.name must match {NAME.pattern}")
        if not isinstance(params, Mapping):
            raise _bad("tools", f"tools[{i}].function.parameters must be a JSON Schema object")
        description = fn.get("description") or ""
        tools.append(Tool(name, str(description), dict(params)))
    if len({t.name for t in tools}) != len(tools):
        raise _bad("tools", "tools have duplicate names")
    return tuple(tools)


def tool_messages(data: Any) -> Any:
    """Raw chat messages with OpenAI's tool-call turns made plain text: an assistant message's
    `tool_calls` rendered back in the `<tool_call>` form (its content may be null), a `tool`
    message's content kept (its `tool_call_id` dropped)."""
    if not isinstance(data, list):
        return data
    out = []
    for message in data:
        if isinstance(message, Mapping) and message.get("role") == "assistant" \
                and message.get("tool_calls"):
            calls = message["tool_calls"]
            parts = [message.get("content") or ""] if message.get("content") else []
            for call in calls if isinstance(calls, list) else []:
                fn = call.get("function", {}) if isinstance(call, Mapping) else {}
                try:
                    arguments = json.loads(fn.get("arguments") or "{}")
                except (TypeError, ValueError):
                    arguments = fn.get("arguments")
                parts.append("<tool_call>\n" + json.dumps(
                    {"name": fn.get("name"), "arguments": arguments}, ensure_ascii=False)
                    + "\n</tool_call>")
            message = {"role": "assistant", "content": "\n".join(parts)}
        elif isinstance(message, Mapping) and message.get("role") == "tool":
            message = {"role": "tool", "content": message.get("content")}
        out.append(message)
    return out
