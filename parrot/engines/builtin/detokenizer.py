"""Generated tokens -> streamed text: incremental detokenization and stop strings.

Detokenizing token by token breaks on multi-byte characters split across tokens and on
tokenizers whose decoding of a piece depends on its left neighbour, so each step decodes a short
window (a few earlier tokens + the new ones) and emits only the text past the window's known
part, and nothing while the tail is an incomplete character (U+FFFD). Text that could be the
start of a stop string is held back until it is clearly not one; a stop string (and what
follows) is never emitted.

With a Rust tokenizer (`tokenizers`, which has `DecodeStream`, the same window rule in Rust),
each token is one Rust call instead of two decodes and the window's list slicing in Python:
0.7 against 3.1 us a token on the 2-core VM, at 250 rows ~0.6 ms of every step's
post-processing, which a mixed step cannot hide behind the GPU. It is used only where it gives
the Python rule's text (tests/engines/builtin/test_detokenizer.py compares them): byte-level
decoders (GPT-2, SmolLM2, LLaMA 3, Qwen), whose text is their tokens' bytes, and a prompt
whose last tokens decode to a whole character. A context that ends inside one (possible after
a Generate or with client token ids) keeps the Python rule, which drops the split character
where the Rust stream would emit the prompt's text; so do sentencepiece-style decoders
(byte fallback, a stripped leading space), on which the Rust stream rejects some invalid byte
sequences that the Python rule streams as U+FFFD.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


def _rust_stream_types() -> tuple[Any, Any] | None:
    """(tokenizers' ByteLevel decoder class, DecodeStream), or None without them (no Rust
    tokenizers, or one older than 0.21): the Python rule only."""
    try:
        from tokenizers.decoders import ByteLevel, DecodeStream
    except ImportError:
        return None
    return ByteLevel, DecodeStream


_RUST_STREAM = _rust_stream_types()

_CONTEXT_TOKENS = 4  # earlier tokens decoded with the new ones, for correct spacing
_REPLACEMENT = "\ufffd"


def rust_backend(tokenizer: Any) -> Any | None:
    """The Rust tokenizer under a fast transformers tokenizer (or parrot's FastTokenizer) when
    decoding through it gives the tokenizer's own text (it does unless the tokenizer cleans up
    tokenization spaces afterwards), else None."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and getattr(tokenizer, "clean_up_tokenization_spaces", True) is False:
        return backend
    return None


def decoder(tokenizer: Any, backend: Any | None) -> Callable[[list[int]], str]:
    """`tokenizer.decode(ids, skip_special_tokens=True)`, through `backend` (its Rust
    tokenizer: `rust_backend(tokenizer)`) where there is one: at 250 rows a step,
    transformers' Python around each call (~3 us of ~4.4 on the 2-core VM) was most of an
    H200 engine's ~7 ms of post-processing."""
    return functools.partial((tokenizer if backend is None else backend).decode,
                             skip_special_tokens=True)


class TextStream:
    def __init__(self, tokenizer: Any | None, context_ids: list[int],
                 stop: tuple[str, ...] = ()) -> None:
        self._tokenizer = tokenizer
        self._backend = None if tokenizer is None else rust_backend(tokenizer)
        self._decode = _no_text if tokenizer is None else decoder(tokenizer, self._backend)
        self._ids = list(context_ids[-_CONTEXT_TOKENS:])
        self._prefix_offset = 0
        self._read_offset = len(self._ids)
        self._stop = stop
        self._held = ""
        self._rust: Any | None = None
        if self._backend is not None and _RUST_STREAM is not None \
                and isinstance(self._backend.decoder, _RUST_STREAM[0]) and not (
                    self._ids and self._decode(self._ids).endswith(_REPLACEMENT)):
            self._rust = self._primed_rust_stream(_RUST_STREAM[1])

    def _primed_rust_stream(self, stream_type: Any) -> Any | None:
        """A Rust stream that has read the prompt's window (what the first token follows), or
        None where it fails: the Python rule then."""
        stream = stream_type(skip_special_tokens=True)
        try:
            for token_id in self._ids:
                stream.step(self._backend, token_id)
        except Exception as exc:  # noqa: BLE001 - any failure: the Python rule decides
            log.warning("incremental detokenization uses the Python rule for one stream: %r",
                        exc)
            return None
        return stream

    @property
    def in_rust(self) -> bool:
        """Whether tokens are decoded by the Rust stream (else by the Python rule)."""
        return self._rust is not None

    def push(self, token_id: int) -> tuple[str, bool]:
        """Add one generated token; returns (text safe to emit now, a stop string was hit)."""
        if self._tokenizer is None:
            return "", False
        if self._rust is not None:
            try:
                piece = self._rust.step(self._backend, token_id)
            except Exception as exc:  # noqa: BLE001 - its prefix check failed: Python from here
                log.warning("incremental detokenization falls back to the Python rule for one "
                            "stream: %r", exc)
                self._rust = None
                self._prefix_offset = max(len(self._ids) - _CONTEXT_TOKENS, 0)
                self._read_offset = len(self._ids)
            else:
                # the Python rule's window, should the Rust stream fail later: the last ids only
                self._ids.append(token_id)
                if len(self._ids) > 2 * _CONTEXT_TOKENS:
                    del self._ids[:-_CONTEXT_TOKENS]
                return self._apply_stop(piece or "")
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
