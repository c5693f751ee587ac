"""Where a model without content stops on its own: an end-of-sequence marker in the prompt.

A real model ends an answer when its content is done, and no service knows that length in
advance. The simulated engine and a random-weight builtin engine have no content, so a
workload writes the length a call's answer would have into the call's own input text as
`[[eos@N]]`: such an engine stops a Generate (without `ignore_eos`) after N tokens, or at
`max_tokens`, whichever comes first (`HiddenStops`: the marker a context's Fill carried; a
fork inherits its parent's; each is used once). The manager, the policies and the
request-level clients treat the marker as prompt text like any other; only the engine reads
it (parrot/engines/simulated.py, parrot/engines/builtin/engine.py).
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


class HiddenStops:
    """Each context's pending stop: where its next Generate ends on its own."""

    def __init__(self) -> None:
        self._at: dict[str, int] = {}

    def filled(self, context_id: str, parent_id: str | None, text: str | None) -> None:
        """A Fill of `text` into `context_id`: its last marker, else (a new fork) the
        parent's pending stop."""
        stop = find_eos(text) if text else None
        if stop is None and parent_id is not None:
            stop = self._at.get(parent_id)
        if stop is not None:
            self._at[context_id] = stop

    def take(self, context_id: str, parent_id: str | None) -> int | None:
        """The stop of a Generate into `context_id` (used up), else its parent's (kept for
        the parent's own Generate and its other forks); None: none."""
        stop = self._at.pop(context_id, None)
        if stop is None and parent_id is not None:
            stop = self._at.get(parent_id)
        return stop

    def forget(self, context_id: str) -> None:
        """The context was freed."""
        self._at.pop(context_id, None)
