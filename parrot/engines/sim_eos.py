"""Where the simulated model stops on its own: an end-of-sequence marker in the prompt text.

A real model ends an answer when its content is done, and no service knows that length in
advance. The simulated engine has no content, so a simulated workload writes the length a
call's answer would have into the call's own input text as `[[eos@N]]`: the simulated
engine stops a Generate (without `ignore_eos`) after N tokens, or at `max_tokens`, whichever
comes first. The manager, the policies and the request-level clients treat the marker as
prompt text like any other; only the engine reads it (parrot/engines/simulated.py).
"""

from __future__ import annotations

import re

_MARKER = re.compile(r"\[\[eos@(\d{1,9})\]\]")


def eos_marker(num_tokens: int) -> str:
    """The text that makes the simulated model stop after `num_tokens` tokens (>= 1)."""
    if num_tokens < 1:
        raise ValueError(f"num_tokens: {num_tokens} must be >= 1")
    return f"[[eos@{num_tokens}]]"


def find_eos(text: str) -> int | None:
    """The length the last marker in `text` asks for, or None without one."""
    if "[[eos@" not in text:   # most texts have none: no regex scan
        return None
    found = None
    for match in _MARKER.finditer(text):
        found = match
    return None if found is None else max(1, int(found.group(1)))
