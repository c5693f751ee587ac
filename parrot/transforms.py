"""Per-placeholder value transforms, applied in the service as values flow between calls.

A transform list is given per placeholder on the wire, e.g.
`["strip", {"type": "json_path", "path": "items.0.name"}, {"type": "regex", "pattern": "A: (.*)"}]`.
On an output placeholder the transforms turn the generated text into the variable's value; on an
input placeholder they turn the variable's value into the text rendered into the prompt.

Kinds:
* `strip` — strip surrounding whitespace.
* `json_path` {path} — parse the first JSON value in the text and take a dotted path
  (`a.b.0.c`); the result is rendered as a string (JSON for objects/lists).
* `regex` {pattern, group=1} — the group of the first match (whole match for group 0). Patterns
  run on the `regex` engine with a deadline (`REGEX_TIMEOUT_S`), so a catastrophic pattern
  fails its call instead of stalling the manager's loop. A pattern is *parsed* before it is
  compiled, and refused when its counted repeats multiply past `MAX_REGEX_EXPANSION` (the
  `regex` compiler unrolls counted repeats: `(?:(?:a{1000}){1000}){1000}` asks for 10^9 nodes
  and takes the process's memory), and one request's patterns together are bounded too
  (`parrot/regex_guard.py`).
* `parse_list` — LangChain-style: a JSON list if the text holds one, else the lines of a
  bulleted/numbered list; rendered as a JSON list of strings.
* `parse_json` — the first JSON object/list in the text (code fences allowed), re-serialized.

Every failure of a transform on a value — however odd the value — is a `TransformError`: the
call it belongs to fails cleanly and nothing else is affected. The JSON search is bounded (text
size, characters scanned, nesting depth), so a hostile value costs linear time at most, and a
`TransformBudget` bounds what all the transforms of one call may cost together (characters
read and seconds spent), so many cheap steps cannot add up to a stalled loop.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from parrot.errors import InvalidRequestError
from parrot.regex_guard import check_and_compile, compiled

MAX_TRANSFORMS = 16
MAX_PATTERN_CHARS = 1024
REGEX_TIMEOUT_S = 0.05          # one regex search; a backtracking blow-up fails, never stalls
# What all the transforms of one call may cost together (`TransformBudget`): characters given
# to transforms, and seconds of the manager's loop. Each regex search's deadline is the smaller
# of REGEX_TIMEOUT_S and what is left, so 16 transforms x 48 inputs over a 3M-character value
# fail after the call's budget instead of holding the loop for seconds.
MAX_TRANSFORM_CHARS_PER_CALL = 16 * 1024 * 1024
TRANSFORM_SECONDS_PER_CALL = 0.2
MAX_JSON_CHARS = 1 << 20        # json_path / parse_json / parse_list look at most this much text
JSON_SCAN_FACTOR = 2            # give up after scanning this many times the text in attempts
MAX_JSON_ATTEMPTS = 64          # bracket positions tried before giving up


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

    def apply(self, value: str, budget: TransformBudget | None = None) -> str:
        if budget is not None:
            budget.charge(len(value), self.kind)
        try:
            return self._apply(value, budget)
        except TransformError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure on user data is the call's error
            raise TransformError(f"{self.kind} failed on {_clip(value)}: "
                                 f"{type(exc).__name__}: {exc}") from None

    def _apply(self, value: str, budget: TransformBudget | None) -> str:
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
            timeout = REGEX_TIMEOUT_S if budget is None else budget.search_timeout()
            try:
                # concurrent: the GIL is released while it matches (the manager runs
                # transforms in a worker thread, beside its loop)
                match = compiled(self.pattern).search(value, timeout=timeout,
                                                       concurrent=True)
            except TimeoutError:
                raise TransformError(f"regex {self.pattern!r} took over {timeout:.3g} s on "
                                     f"{_clip(value)}") from None
            if match is None:
                raise TransformError(f"regex {self.pattern!r} does not match {_clip(value)}")
            group = match.group(self.group)
            if group is None:  # e.g. `(zzz)|` matched through its other branch
                raise TransformError(f"regex {self.pattern!r}: group {self.group} did not take "
                                     f"part in the match on {_clip(value)}")
            return group
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
        if not isinstance(pattern, str) or len(pattern) > MAX_PATTERN_CHARS:
            raise InvalidRequestError(f"{where}: regex needs a 'pattern' string of at most "
                                      f"{MAX_PATTERN_CHARS} characters")
        compiled_pattern = check_and_compile(pattern, where)
        if (not isinstance(group, int) or isinstance(group, bool)
                or not 0 <= group <= compiled_pattern.groups):
            raise InvalidRequestError(f"{where}: regex group {group!r} must be in "
                                      f"[0, {compiled_pattern.groups}]")
        return Transform(kind, pattern=pattern, group=group)
    return Transform(kind)


def apply_transforms(transforms: tuple[Transform, ...], value: str,
                     budget: TransformBudget | None = None) -> str:
    for transform in transforms:
        value = transform.apply(value, budget)
    return value


class TransformBudget:
    """What the transforms of one call may still cost: characters read (each transform is
    charged the length of its input) and seconds of the caller's loop (a regex search gets at
    most what is left). `seconds` may be smaller than TRANSFORM_SECONDS_PER_CALL when the
    caller shares a budget between many calls (the manager's per-tenant bucket)."""

    def __init__(self, chars: int = MAX_TRANSFORM_CHARS_PER_CALL,
                 seconds: float = TRANSFORM_SECONDS_PER_CALL) -> None:
        self.chars_left = chars
        self.seconds = seconds
        self._started = time.perf_counter()

    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self._started

    def charge(self, chars: int, kind: str) -> None:
        self.chars_left -= chars
        if self.chars_left < 0:
            raise TransformError(f"{kind}: the call's transforms read more than their budget "
                                 f"of {MAX_TRANSFORM_CHARS_PER_CALL} characters in all")
        if self.elapsed_s >= self.seconds:
            raise TransformError(f"{kind}: the call's transforms took their whole budget of "
                                 f"{self.seconds:.3g} s")

    def search_timeout(self) -> float:
        return max(min(REGEX_TIMEOUT_S, self.seconds - self.elapsed_s), 1e-4)


def _fenced(text: str) -> str | None:
    """The body of the first ``` (or ```json) code fence, found in linear time (the regex
    form of this backtracked quadratically on a fence followed by whitespace)."""
    start = text.find("```")
    if start < 0:
        return None
    body = start + 3 + (4 if text.startswith("json", start + 3) else 0)
    end = text.find("```", body)
    return text[body:end] if end >= 0 else None


def _bullet_item(line: str) -> str | None:
    """The text of a `- item`, `* item`, `• item`, `1. item` or `1) item` line, else None."""
    stripped = line.strip()
    digits = len(stripped) - len(stripped.lstrip("0123456789"))
    marker = digits if digits else 0
    if digits:
        if stripped[digits:digits + 1] not in (".", ")"):
            return None
    elif stripped[:1] not in ("-", "*", "•"):
        return None
    rest = stripped[marker + 1:]
    if not rest[:1].isspace():
        return None
    return rest.strip() or None


def _first_json(text: str) -> Any:
    if len(text) > MAX_JSON_CHARS:
        raise TransformError(f"text of {len(text)} characters is over the {MAX_JSON_CHARS} a "
                             "JSON transform reads")
    fenced = _fenced(text)
    candidates = [fenced] if fenced is not None else []
    candidates.append(text)
    decoder = json.JSONDecoder()
    # Bounded work: at most MAX_JSON_ATTEMPTS bracket positions are tried, and they may scan at
    # most JSON_SCAN_FACTOR times the text between them (each failed attempt also pays one
    # linear search in C, as JSONDecodeError locates its line).
    budget = JSON_SCAN_FACTOR * len(text) + 4096
    attempts = 0
    for candidate in candidates:
        for start in _json_starts(candidate):
            attempts += 1
            try:
                return decoder.raw_decode(candidate, start)[0]
            except json.JSONDecodeError as exc:
                budget -= exc.pos - start + 1
            except RecursionError:
                raise TransformError(f"JSON nested too deeply in {_clip(text)}") from None
            if budget <= 0 or attempts >= MAX_JSON_ATTEMPTS:
                raise TransformError(f"no JSON object or list found in {attempts} attempts "
                                     f"in {_clip(text)}")
    raise TransformError(f"no JSON object or list in {_clip(text)}")


def _json_starts(text: str):
    """Positions of `[` and `{` in order (str.find: no Python-level loop over every char)."""
    positions = [text.find("["), text.find("{")]
    while True:
        live = [p for p in positions if p >= 0]
        if not live:
            return
        start = min(live)
        yield start
        which = 0 if text[start] == "[" else 1
        positions[which] = text.find(text[start], start + 1)


def _parse_list(text: str) -> list[str]:
    try:
        obj = _first_json(text)
        if isinstance(obj, list):
            return [item if isinstance(item, str) else json.dumps(item) for item in obj]
    except TransformError:
        pass
    items = [item for line in text.splitlines() if (item := _bullet_item(line)) is not None]
    if not items:
        items = [line.strip() for line in text.splitlines() if line.strip()]
    return items


def _clip(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")
