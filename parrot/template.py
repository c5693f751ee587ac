"""The prompt-template grammar, shared by the frontend and the manager.

A template is text with placeholders `{{input:name}}` and `{{output:name}}`. A `{{` that starts
`{{<word>:` opens a placeholder and must close with `}}`; any other `{{` is literal text (so
prompts may contain JSON or code). Names are identifiers. An output appears exactly once; an
input may appear several times (same value); a name cannot be both input and output of one
template (the call would consume its own result). A template has at most `MAX_PLACEHOLDERS`
placeholders and `MAX_OUTPUTS` outputs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Literal

from parrot.errors import TemplateSyntaxError

MAX_TEMPLATE_CHARS = 4_000_000
# Every placeholder is a variable boundary (hashed, maybe a context) and every output a
# Generate run one after another: caps keep one request's work on the manager bounded.
MAX_PLACEHOLDERS = 10_000
MAX_OUTPUTS = 128

_OPEN = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*:")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
KINDS = ("input", "output")


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Placeholder:
    kind: Literal["input", "output"]
    name: str

    @property
    def is_output(self) -> bool:
        return self.kind == "output"


Segment = Text | Placeholder


@dataclass(frozen=True)
class Template:
    source: str
    segments: tuple[Segment, ...]

    @cached_property
    def input_names(self) -> tuple[str, ...]:
        """Input names in order of first appearance."""
        seen: dict[str, None] = {}
        for seg in self.segments:
            if isinstance(seg, Placeholder) and not seg.is_output:
                seen.setdefault(seg.name)
        return tuple(seen)

    @cached_property
    def output_names(self) -> tuple[str, ...]:
        return tuple(seg.name for seg in self.segments
                     if isinstance(seg, Placeholder) and seg.is_output)

    @cached_property
    def input_occurrences(self) -> dict[str, int]:
        """How often each input appears (its value is rendered that many times)."""
        counts: dict[str, int] = {}
        for seg in self.segments:
            if isinstance(seg, Placeholder) and not seg.is_output:
                counts[seg.name] = counts.get(seg.name, 0) + 1
        return counts

    @cached_property
    def text_chars(self) -> int:
        return sum(len(seg.text) for seg in self.segments if isinstance(seg, Text))

    def rendered_chars(self, value_chars: Mapping[str, int]) -> int:
        """The rendered prompt's length, known before rendering: the template's text plus each
        input's length (0 where `value_chars` has none) times its occurrences."""
        return self.text_chars + sum(count * value_chars.get(name, 0)
                                     for name, count in self.input_occurrences.items())

    def render(self, values: Mapping[str, str]) -> str:
        """Fill every placeholder from `values` (the baseline client renders prompts itself)."""
        return "".join(seg.text if isinstance(seg, Text) else values[seg.name]
                       for seg in self.segments)


# Parsed templates of up to this many characters are kept (the last 1,024): a semantic function
# sends the same template with every call, and a Template never changes once parsed. Shared
# by all tenants: a hit saves microseconds, far below one request's jitter, and a probe for
# another tenant's template caches it, so it can be timed once.
CACHED_TEMPLATE_CHARS = 4096


def parse_template(source: str) -> Template:
    """Parse a template; raises TemplateSyntaxError with the position of the problem."""
    if isinstance(source, str) and len(source) <= CACHED_TEMPLATE_CHARS:
        return _parse_cached(source)
    return _parse(source)


@lru_cache(maxsize=1024)
def _parse_cached(source: str) -> Template:
    return _parse(source)


def _parse(source: str) -> Template:
    if not isinstance(source, str):
        raise TemplateSyntaxError(f"prompt must be a string, got {type(source).__name__}")
    if len(source) > MAX_TEMPLATE_CHARS:
        raise TemplateSyntaxError(f"prompt has {len(source)} characters; at most "
                                  f"{MAX_TEMPLATE_CHARS} are allowed")
    segments: list[Segment] = []
    outputs: set[str] = set()
    inputs: set[str] = set()
    pos = 0
    text_start = 0
    num_placeholders = 0
    while True:
        match = _OPEN.search(source, pos)
        if match is None:
            break
        kind = match.group(1)
        close = source.find("}}", match.end())
        if close < 0:
            raise TemplateSyntaxError(f"unclosed placeholder at character {match.start()}: "
                                      f"{source[match.start():match.start() + 40]!r}")
        if kind not in KINDS:
            raise TemplateSyntaxError(
                f"unknown placeholder kind {kind!r} at character {match.start()}; "
                f"allowed: {list(KINDS)}")
        name = source[match.end():close].strip()
        if not _NAME.fullmatch(name):
            raise TemplateSyntaxError(
                f"invalid placeholder name {name!r} at character {match.start()}: "
                "names are identifiers ([A-Za-z_][A-Za-z0-9_]*)")
        if kind == "output":
            if name in outputs:
                raise TemplateSyntaxError(f"duplicate output placeholder {name!r}")
            outputs.add(name)
            if len(outputs) > MAX_OUTPUTS:
                raise TemplateSyntaxError(f"the prompt has more than {MAX_OUTPUTS} output "
                                          "placeholders; split it into several calls")
        else:
            inputs.add(name)
        if match.start() > text_start:
            segments.append(Text(source[text_start:match.start()]))
        segments.append(Placeholder(kind, name))  # type: ignore[arg-type]
        num_placeholders += 1
        if num_placeholders > MAX_PLACEHOLDERS:
            raise TemplateSyntaxError(f"the prompt has more than {MAX_PLACEHOLDERS} "
                                      "placeholders")
        pos = text_start = close + 2
    if text_start < len(source):
        segments.append(Text(source[text_start:]))
    both = inputs & outputs
    if both:
        raise TemplateSyntaxError(
            f"placeholder(s) {sorted(both)} are both input and output of one call (a cycle)")
    if not outputs:
        raise TemplateSyntaxError("a template needs at least one {{output:name}} placeholder")
    return Template(source, tuple(segments))
