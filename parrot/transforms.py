"""Per-placeholder value transforms, applied in the service as values flow between calls.

A transform list is given per placeholder on the wire, e.g.
`["strip", {"type": "json_path", "path": "items.0.name"}, {"type": "regex", "pattern": "A: (.*)"}]`.
On an output placeholder the transforms turn the generated text into the variable's value; on an
input placeholder they turn the variable's value into the text rendered into the prompt.

Kinds:
* `strip` — strip surrounding whitespace.
* `json_path` {path} — parse the first JSON value in the text and take a dotted path
  (`a.b.0.c`); the result is rendered as a string (JSON for objects/lists).
* `regex` {pattern, group=1} — the group of the first match (whole match for group 0).
* `parse_list` — LangChain-style: a JSON list if the text holds one, else the lines of a
  bulleted/numbered list; rendered as a JSON list of strings.
* `parse_json` — the first JSON object/list in the text (code fences allowed), re-serialized.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from parrot.errors import InvalidRequestError

MAX_TRANSFORMS = 16


class TransformError(ValueError):
    """A transform could not be applied to a value (the producing call fails with it)."""


@dataclass(frozen=True)
class Transform:
    kind: str
    path: tuple[str, ...] = ()
    pattern: str = ""
    group: int = 1

    def to_json(self) -> Any:
        if self.kind == "json_path":
            return {"type": "json_path", "path": ".".join(self.path)}
        if self.kind == "regex":
            return {"type": "regex", "pattern": self.pattern, "group": self.group}
        return self.kind

    def apply(self, value: str) -> str:
        if self.kind == "strip":
            return value.strip()
        if self.kind == "json_path":
            obj = _first_json(value)
            for key in self.path:
                try:
                    obj = obj[int(key)] if isinstance(obj, list) else obj[key]
                except (KeyError, IndexError, ValueError, TypeError):
                    raise TransformError(f"json_path {'.'.join(self.path)!r}: no {key!r} in "
                                         f"{_clip(value)}") from None
            return obj if isinstance(obj, str) else json.dumps(obj)
        if self.kind == "regex":
            match = re.search(self.pattern, value, re.DOTALL)
            if match is None:
                raise TransformError(f"regex {self.pattern!r} does not match {_clip(value)}")
            return match.group(self.group)
        if self.kind == "parse_list":
            return json.dumps(_parse_list(value))
        if self.kind == "parse_json":
            return json.dumps(_first_json(value))
        raise AssertionError(self.kind)


SIMPLE_KINDS = ("strip", "parse_list", "parse_json")
KINDS = SIMPLE_KINDS + ("json_path", "regex")


def parse_transforms(spec: Any, where: str) -> tuple[Transform, ...]:
    """Validate the wire form of a transform list; `where` names the placeholder in errors."""
    if spec is None:
        return ()
    if not isinstance(spec, list) or len(spec) > MAX_TRANSFORMS:
        raise InvalidRequestError(f"{where}: transforms must be a list of at most "
                                  f"{MAX_TRANSFORMS} items")
    return tuple(_parse_one(item, where) for item in spec)


def _parse_one(item: Any, where: str) -> Transform:
    if isinstance(item, str):
        item = {"type": item}
    if not isinstance(item, dict) or not isinstance(item.get("type"), str):
        raise InvalidRequestError(f"{where}: a transform is a name or an object with 'type'")
    kind = item["type"]
    if kind not in KINDS:
        raise InvalidRequestError(f"{where}: unknown transform {kind!r}; allowed: {list(KINDS)}")
    extra = set(item) - {"type", "path", "pattern", "group"}
    if extra:
        raise InvalidRequestError(f"{where}: unknown transform field(s) {sorted(extra)}")
    if kind == "json_path":
        path = item.get("path")
        if not isinstance(path, str) or not path:
            raise InvalidRequestError(f"{where}: json_path needs a non-empty 'path' string")
        return Transform(kind, path=tuple(path.split(".")))
    if kind == "regex":
        pattern, group = item.get("pattern"), item.get("group", 1)
        if not isinstance(pattern, str):
            raise InvalidRequestError(f"{where}: regex needs a 'pattern' string")
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise InvalidRequestError(f"{where}: invalid regex {pattern!r}: {exc}") from None
        if not isinstance(group, int) or isinstance(group, bool) or not 0 <= group <= compiled.groups:
            raise InvalidRequestError(f"{where}: regex group {group!r} must be in "
                                      f"[0, {compiled.groups}]")
        return Transform(kind, pattern=pattern, group=group)
    return Transform(kind)


def apply_transforms(transforms: tuple[Transform, ...], value: str) -> str:
    for transform in transforms:
        value = transform.apply(value)
    return value


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+(.*\S)\s*$")


def _first_json(text: str) -> Any:
    fenced = _FENCE.search(text)
    candidates = [fenced.group(1)] if fenced else []
    candidates.append(text)
    decoder = json.JSONDecoder()
    for candidate in candidates:
        for start, char in enumerate(candidate):
            if char in "[{":
                try:
                    return decoder.raw_decode(candidate, start)[0]
                except json.JSONDecodeError:
                    continue
    raise TransformError(f"no JSON object or list in {_clip(text)}")


def _parse_list(text: str) -> list[str]:
    try:
        obj = _first_json(text)
        if isinstance(obj, list):
            return [item if isinstance(item, str) else json.dumps(item) for item in obj]
    except TransformError:
        pass
    items = [m.group(1) for line in text.splitlines() if (m := _BULLET.match(line))]
    if not items:
        items = [line.strip() for line in text.splitlines() if line.strip()]
    return items


def _clip(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")
