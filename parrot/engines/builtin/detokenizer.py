"""Generated tokens -> streamed text: incremental detokenization and stop strings.

Detokenizing token by token breaks on multi-byte characters split across tokens and on
tokenizers whose decoding of a piece depends on its left neighbour, so each step decodes a short
window (a few earlier tokens + the new ones) and emits only the text past the window's known
part, and nothing while the tail is an incomplete character (U+FFFD). Text that could be the
start of a stop string is held back until it is clearly not one; a stop string (and what
follows) is never emitted.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

_CONTEXT_TOKENS = 4  # earlier tokens decoded with the new ones, for correct spacing
_REPLACEMENT = "\ufffd"


def decoder(tokenizer: Any) -> Callable[[list[int]], str]:
    """`tokenizer.decode(ids, skip_special_tokens=True)`, through the Rust tokenizer of a fast
    transformers tokenizer when that gives the same text (it does unless the tokenizer
    cleans up tokenization spaces afterwards): a stream decodes twice a token, and at 250
    rows a step transformers' Python around each call (~3 us of ~4.4 on the 2-core VM) was
    most of an H200 engine's ~7 ms of post-processing."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and getattr(tokenizer, "clean_up_tokenization_spaces", True) is False:
        return functools.partial(backend.decode, skip_special_tokens=True)
    return functools.partial(tokenizer.decode, skip_special_tokens=True)


class TextStream:
    def __init__(self, tokenizer: Any | None, context_ids: list[int],
                 stop: tuple[str, ...] = ()) -> None:
        self._tokenizer = tokenizer
        self._decode = decoder(tokenizer) if tokenizer is not None else _no_text
        self._ids = list(context_ids[-_CONTEXT_TOKENS:])
        self._prefix_offset = 0
        self._read_offset = len(self._ids)
        self._stop = stop
        self._held = ""

    def push(self, token_id: int) -> tuple[str, bool]:
        """Add one generated token; returns (text safe to emit now, a stop string was hit)."""
        if self._tokenizer is None:
            return "", False
        self._ids.append(token_id)
        known = self._decode(self._ids[self._prefix_offset:self._read_offset])
        full = self._decode(self._ids[self._prefix_offset:])
        delta = ""
        if len(full) > len(known) and not full.endswith(_REPLACEMENT):
            delta = full[len(known):]
            self._prefix_offset = max(self._read_offset - _CONTEXT_TOKENS, 0)
            self._read_offset = len(self._ids)
        return self._apply_stop(delta)

    def flush(self) -> str:
        """The text held back for a possible stop string (call when finishing otherwise)."""
        held, self._held = self._held, ""
        return held

    def _apply_stop(self, delta: str) -> tuple[str, bool]:
        text = self._held + delta
        if not self._stop:
            self._held = ""
            return text, False
        hits = [i for i in (text.find(s) for s in self._stop) if i >= 0]
        if hits:
            self._held = ""
            return text[:min(hits)], True
        keep = _longest_stop_prefix_suffix(text, self._stop)
        self._held = text[len(text) - keep:] if keep else ""
        return text[:len(text) - keep], False


def _no_text(ids: list[int]) -> str:
    return ""


def _longest_stop_prefix_suffix(text: str, stops: tuple[str, ...]) -> int:
    """Length of the longest suffix of text that is a proper prefix of some stop string."""
    best = 0
    for stop in stops:
        for n in range(min(len(stop) - 1, len(text)), best, -1):
            if text.endswith(stop[:n]):
                best = n
                break
    return best
