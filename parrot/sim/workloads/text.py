"""Deterministic synthetic text of a given length, cut from the stdlib documentation.

Workloads whose paper data is not shipped (system prompts, queries, code) use windows of
`documents.stdlib_document()`: real English prose, so a real tokenizer counts it like text,
chosen by a seeded offset so different salts give different text.
"""

from __future__ import annotations

import functools
import random

from parrot.sim.workloads.documents import CHARS_PER_TOKEN, stdlib_document


@functools.lru_cache(maxsize=1)
def _source() -> str:
    # "{{" would read as a placeholder inside a template (or a baseline's rendered prompt).
    text = stdlib_document()
    while "{{" in text or "}}" in text:
        text = text.replace("{{", "{ {").replace("}}", "} }")
    return text


def text_window(num_tokens: int, salt: str) -> str:
    """About `num_tokens` tokens (estimated at CHARS_PER_TOKEN characters each) of text, from
    an offset chosen by `salt`."""
    if num_tokens < 1:
        raise ValueError(f"num_tokens: {num_tokens!r} is not valid; allowed: integer >= 1")
    source = _source()
    width = num_tokens * CHARS_PER_TOKEN
    if width > len(source):
        raise ValueError(f"num_tokens: {num_tokens} is more than the source text "
                         f"(~{len(source) // CHARS_PER_TOKEN} tokens)")
    start = random.Random(f"text|{salt}").randrange(len(source) - width + 1)
    return source[start:start + width]
