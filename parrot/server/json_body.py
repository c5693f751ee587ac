"""Parsing a request body into JSON values the manager can trust: every bad body is a 400.

`json.loads` alone lets through, or crashes on, things a hostile client sends on purpose:
nesting deep enough to exhaust the parser's recursion (RecursionError), integer literals past
Python's digit limit (ValueError), `NaN`/`Infinity` (not JSON), and `\\ud800`-style escapes that
decode to lone surrogates — strings that cannot be encoded as UTF-8 again, so they would fail
later, far from the request (prefix hashing, the engine, the reply). All of them are rejected
here, at the edge, with a message that says which.
"""

from __future__ import annotations

import json
import re
from typing import Any

from parrot.errors import InvalidRequestError

# A surrogate can only come from a `\uD800`-`\uDFFF` escape: valid UTF-8 bytes never decode to
# one, and json joins a escaped high+low pair into one code point. So bodies without such an
# escape (nearly all) skip the walk.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")
_SURROGATE = re.compile("[\ud800-\udfff]")


# No field of any request needs more digits than this (the widest is a 63-bit seed: 19), and
# a longer literal is a 400 however it is used: Python would parse 4,300 digits and then fail
# or overflow wherever the number went (a 4,000-digit `timeout` was a 500, a `top_k` a 200).
MAX_INT_DIGITS = 20


def _reject_constant(name: str) -> Any:
    raise InvalidRequestError(f"request body is not valid JSON: {name} is not a JSON number")


def _bounded_int(literal: str) -> int:
    if len(literal.lstrip("-")) > MAX_INT_DIGITS:
        raise InvalidRequestError(f"request body has an integer of {len(literal)} characters; "
                                  f"integers have at most {MAX_INT_DIGITS} digits")
    return int(literal)


def _finite_float(literal: str) -> float:
    value = float(literal)
    if value in (float("inf"), float("-inf")):  # 1e999: not a number any field can take
        raise InvalidRequestError(f"request body has a number out of range: {literal[:40]}")
    return value


# One decoder for every body (json.loads with these hooks would build one per call); like
# json's own default decoder, it holds no state between calls and is shared by threads.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_int=_bounded_int,
                            parse_float=_finite_float)


def parse_json_body(raw: bytes) -> Any:
    """The JSON value of `raw` (None for an empty body), or InvalidRequestError."""
    if not raw.strip():
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequestError(f"request body is not UTF-8: {exc.reason} at byte "
                                  f"{exc.start}") from None
    try:
        if text.startswith("\ufeff"):  # what json.loads refuses before decoding
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        value = _DECODER.decode(text)
    except RecursionError:
        raise InvalidRequestError("request body is nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, and int literals over the digit limit
        raise InvalidRequestError(f"request body is not valid JSON: {exc}") from None
    if _SURROGATE_ESCAPE.search(raw):
        _reject_surrogates(value)
    return value


def _reject_surrogates(value: Any) -> None:
    """Walk the decoded value (iteratively: its depth is whatever the parser allowed)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                raise InvalidRequestError("request body has a lone surrogate (\\ud800-\\udfff) "
                                          "in a string; text must be valid Unicode")
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
