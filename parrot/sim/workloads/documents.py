"""A long real-text document without network access, and a chunker for it.

Source: CPython's own documentation as shipped in the standard library module
`pydoc_data.topics` (the text `help("topic")` prints: the language reference sections on
statements, expressions, the data model, ...). It is English prose with code samples, part of
every CPython install, and stable for a given Python version (about 465k characters, roughly
110k tokens, on 3.11). `stdlib_document()` joins all topics in sorted order, so the text is the
same on every run; `long_document(min_tokens)` takes a prefix of it.

Chunking follows the map-reduce / chain-summary apps of the paper: the document is split into
pieces of `chunk_tokens` tokens, counted by the model's tokenizer when one is given, otherwise
estimated at 4 characters per token. Tokenizing a long document is blocking work: call these
functions off the event loop (`asyncio.to_thread`) when a loop is running.
"""

from __future__ import annotations

from typing import Any, Protocol
from collections.abc import Sequence

from parrot.types import CHARS_PER_TOKEN, estimate_num_tokens  # re-exported: the shared rule



class Tokenizer(Protocol):
    """What the chunker needs of a (HuggingFace-style) tokenizer."""

    def encode(self, text: str, *args: Any, **kwargs: Any) -> list[int]: ...

    def decode(self, token_ids: Sequence[int], *args: Any, **kwargs: Any) -> str: ...


def stdlib_document() -> str:
    """Every topic of `pydoc_data.topics`, in sorted order, separated by blank lines."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[name].strip() for name in sorted(topics)) + "\n"


def long_document(min_tokens: int = 20_000, tokenizer: Tokenizer | None = None) -> str:
    """The shortest prefix of `stdlib_document()` that ends at a paragraph break and has at
    least `min_tokens` tokens, counted by `tokenizer` or else estimated."""
    _check_positive("min_tokens", min_tokens)
    document = stdlib_document()
    target_chars = min_tokens * CHARS_PER_TOKEN
    while True:
        end = document.find("\n\n", target_chars)
        prefix = document if end < 0 else document[:end + 1]
        num_tokens = (estimate_num_tokens(prefix) if tokenizer is None
                      else len(_encode(tokenizer, prefix)))
        if num_tokens >= min_tokens:
            return prefix
        if end < 0:
            raise ValueError(f"min_tokens: {min_tokens} is more than the whole document "
                             f"({num_tokens} tokens)")
        # The estimate was short of the tokenizer's count: grow by the deficit and recount.
        target_chars = len(prefix) + (min_tokens - num_tokens) * CHARS_PER_TOKEN


def chunk_document(text: str, chunk_tokens: int,
                   tokenizer: Tokenizer | None = None) -> list[str]:
    """Split `text` into consecutive chunks of at most `chunk_tokens` tokens.

    With a tokenizer, chunks are decoded from consecutive slices of its token ids (only the
    last chunk is shorter). Without one, a chunk holds at most `chunk_tokens * CHARS_PER_TOKEN`
    characters, cut after the last whitespace in that window when there is one in its second
    half (words stay whole); the chunks then join back to exactly `text`.
    """
    _check_positive("chunk_tokens", chunk_tokens)
    if tokenizer is not None:
        ids = _encode(tokenizer, text)
        return [tokenizer.decode(ids[i:i + chunk_tokens]) for i in range(0, len(ids), chunk_tokens)]
    width = chunk_tokens * CHARS_PER_TOKEN
    chunks, start = [], 0
    while start < len(text):
        end = min(start + width, len(text))
        if end < len(text):
            cut = max(text.rfind(" ", start, end), text.rfind("\n", start, end))
            if cut >= start + width // 2:
                end = cut + 1  # keep the whitespace with the chunk it ends
        chunks.append(text[start:end])
        start = end
    return chunks


def _encode(tokenizer: Tokenizer, text: str) -> list[int]:
    # HuggingFace tokenizers add BOS/EOS by default; a chunk is a piece of a prompt, not one.
    try:
        return list(tokenizer.encode(text, add_special_tokens=False))
    except TypeError:  # a minimal tokenizer without that keyword
        return list(tokenizer.encode(text))


def _check_positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: {value!r} is not valid; allowed: integer >= 1")
