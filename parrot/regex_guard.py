"""Regex patterns bounded before they are compiled: a pattern's cost, and a request's.

The `regex` compiler unrolls counted repeats: `(?:(?:a{1000}){1000}){1000}` asks for 10^9
nodes and takes the process's memory. So a pattern is *parsed* first (by `regex`'s own
parser, which unrolls nothing) and refused when its counted repeats multiply past
`MAX_REGEX_EXPANSION`; inside `regex_quota()` (one wire request) the distinct patterns and
their expansion together are bounded too. Checked patterns are compiled into a small cache of
our own. The transforms that run them are `parrot/transforms.py`.
"""

from __future__ import annotations

import contextvars
import functools
from typing import Any

import regex

from parrot.errors import InvalidRequestError

# The `regex` compiler unrolls counted repeats: what a pattern costs to compile grows with the
# product of its nested counts (measured: 4,096 units compile in ~10 ms into ~2 MB; 10^6 take
# 0.7 s and 260 MB; 10^12 exhaust the host). A pattern's expansion (its atoms, each times the
# counts of the repeats around it) is computed on the parsed pattern, before any compile.
MAX_REGEX_EXPANSION = 4096
# One request (a submit, a batch, an OpenAI body) compiles at most this many distinct patterns
# and this much expansion in all, so a body full of patterns at the cap stays cheap too.
MAX_REGEX_PATTERNS_PER_REQUEST = 256
MAX_REGEX_EXPANSION_PER_REQUEST = 16_384  # ~0.2 s of parsing and compiling at worst


class RegexQuota:
    """The regex patterns one request may compile (distinct patterns, total expansion).
    Active inside `regex_quota()`; outside one, each pattern is held to its own caps only."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.expansion = 0

    def admit(self, pattern: str, expansion: int, where: str) -> None:
        if pattern in self.seen:
            return
        if len(self.seen) >= MAX_REGEX_PATTERNS_PER_REQUEST:
            raise InvalidRequestError(f"{where}: more than {MAX_REGEX_PATTERNS_PER_REQUEST} "
                                      "distinct regex patterns in one request")
        if self.expansion + expansion > MAX_REGEX_EXPANSION_PER_REQUEST:
            raise InvalidRequestError(f"{where}: the request's regex patterns expand to more "
                                      f"than {MAX_REGEX_EXPANSION_PER_REQUEST} units in all")
        self.seen.add(pattern)
        self.expansion += expansion


_QUOTA: contextvars.ContextVar[RegexQuota | None] = contextvars.ContextVar("regex_quota",
                                                                          default=None)


class regex_quota:  # noqa: N801 - used as a function: `with regex_quota():`
    """Hold the patterns parsed inside the block (one request's) to one `RegexQuota`. A class,
    not a generator context manager: every wire request enters one, and this costs a third."""

    __slots__ = ("_token",)

    def __enter__(self) -> RegexQuota:
        quota = RegexQuota()
        self._token = _QUOTA.set(quota)
        return quota

    def __exit__(self, *exc_info: object) -> None:
        _QUOTA.reset(self._token)


def check_and_compile(pattern: str, where: str) -> Any:
    """`pattern` compiled, or InvalidRequestError naming `where`: refused past its own
    expansion cap, or past the request's quota inside `regex_quota()`."""
    try:
        expansion = regex_expansion(pattern)
    except (regex.error, ValueError, OverflowError, RecursionError) as exc:
        raise InvalidRequestError(f"{where}: invalid regex {pattern!r}: {exc}") from None
    if expansion > MAX_REGEX_EXPANSION:
        raise InvalidRequestError(
            f"{where}: regex {_clip_pattern(pattern)} expands to {_clip_int(expansion)} units (its "
            f"counted repeats multiplied); at most {MAX_REGEX_EXPANSION} are allowed")
    quota = _QUOTA.get()
    if quota is not None:
        quota.admit(pattern, expansion, where)
    try:
        return compiled(pattern)
    except (regex.error, ValueError, OverflowError, RecursionError) as exc:
        raise InvalidRequestError(f"{where}: invalid regex {pattern!r}: {exc}") from None


@functools.lru_cache(maxsize=64)
def compiled(pattern: str) -> Any:
    """A checked pattern, compiled. Our own small cache (not `regex`'s 500-entry one, which
    would hold 500 patterns at the expansion cap: ~1 GB)."""
    return regex.compile(pattern, regex.DOTALL, cache_pattern=False)


def _clip_int(n: int) -> str:
    return str(n) if n < 10**12 else f"~10^{len(str(n)) - 1}"


# Parsed once per pattern (an int per entry): a body may name one pattern hundreds of times.
@functools.lru_cache(maxsize=256)
def regex_expansion(pattern: str) -> int:
    """How many units compiling `pattern` unrolls: every atom counts 1, times the count of each
    repeat around it (`{m,n}` counts n, `{m,}` m + 1, `*`/`+`/`?` 1); alternatives add up. The
    pattern is parsed by `regex`'s own parser (the same syntax, flags and verbose mode as the
    compile), which is linear in the pattern and unrolls nothing. Should that internal API be
    missing, a cruder bound is used: the pattern's length times every count in it."""
    try:
        from regex import _regex_core as core
        parsed = _parse_regex(core, pattern)
    except (ImportError, AttributeError, TypeError):  # pragma: no cover - internals moved
        return _crude_expansion(pattern)
    return _expansion_of(core, parsed)


def _parse_regex(core: Any, pattern: str) -> Any:
    flags = regex.DOTALL
    while True:  # as regex.compile does: an inline global flag restarts the parse
        source = core.Source(pattern)
        info = core.Info(flags, source.char_type, {})
        info.guess_encoding = regex.UNICODE
        source.ignore_space = bool(info.flags & regex.VERBOSE)
        try:
            parsed = core._parse_pattern(source, info)
        except core._UnscopedFlagSet:
            flags = info.global_flags
            continue
        if not source.at_end():
            raise regex.error("unbalanced parenthesis", pattern, source.pos)
        return parsed


def _expansion_of(core: Any, node: Any) -> int:
    repeats = (core.GreedyRepeat, core.LazyRepeat, core.PossessiveRepeat)
    if isinstance(node, repeats):
        count = node.max_count if node.max_count is not None else node.min_count + 1
        count = max(int(count), 1)
        inner = _expansion_of(core, node.subpattern)
        return inner * count
    total, children = 0, False
    for value in vars(node).values():
        items = value if isinstance(value, (list, tuple)) else (value,)
        for item in items:
            if isinstance(item, core.RegexBase):
                total += _expansion_of(core, item)
                children = True
    return total if children else 1


_COUNT = regex.compile(r"\{(\d+)(?:,(\d*))?\}")


def _crude_expansion(pattern: str) -> int:
    product = max(len(pattern), 1)
    for match in _COUNT.finditer(pattern):
        product *= max(int(match.group(2) or match.group(1)) + 1, 1)
    return product


def _clip_pattern(pattern: str, limit: int = 80) -> str:
    return repr(pattern if len(pattern) <= limit else pattern[:limit] + "...")
