"""PrefixHash: hashes of a call's rendered prompt at every variable boundary, and an index.

Two calls share a prefix exactly when their cumulative hashes at some boundary are equal; the
manager co-locates them and forks the engine context of that prefix instead of recomputing it.
Only the part of the prompt before the first output can be shared (later text depends on what
the call generates).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from parrot.template import Placeholder, Template, Text
from parrot.types import CHARS_PER_TOKEN

HASH_BYTES = 16


MAX_REMEMBERED_PREFIXES = 1 << 16


@dataclass(frozen=True)
class PrefixPiece:
    """A piece of prompt text that ends at a variable boundary, with the cumulative hash there."""

    text: str
    prefix_hash: str
    is_template_text: bool = False  # constant text of the template (not an input's value)
    # Estimated prompt tokens from the start of the prompt to the end of this piece (0 where
    # not computed: pieces merged for the engine).
    num_tokens: int = 0


@dataclass(frozen=True)
class PromptEstimate:
    """What the manager needs of a call's prompt before it runs, from one walk of it."""

    pieces: tuple[PrefixPiece, ...]   # the certain prefix before the first output
    num_tokens: int                   # estimated tokens of the whole prompt (outputs empty)


def estimate_prompt(template: Template, values: Mapping[str, str], salt: str = "",
                    token_counts: Mapping[str, int] | None = None) -> PromptEstimate:
    """The prompt's prefix pieces and its estimated tokens, in one walk of the template.

    Pieces: the prompt before the first output, split at every variable boundary. Each
    piece's hash covers the whole rendered prompt up to its end, so equal hashes mean equal
    prefixes. Empty pieces are dropped (they add no boundary worth a context). For a call
    whose inputs are not all known, the pieces stop at the first missing input: the prefix
    that is already certain. A `salt` (the session's tenant, unless it shares) starts every
    hash, so equal prompts of different tenants never share a context (docs/SECURITY.md).
    Each piece carries the estimated tokens up to its end.

    Tokens: every segment but the outputs (text after an output counts too); an input whose
    real count is known (`token_counts`, by name: an output a generation produced, whose
    tokens the engine counted) adds that count, other text its characters at
    CHARS_PER_TOKEN. Text produced by a model can be far from 4 characters per token
    (detokenized random-weight output is ~6.5), and a capacity decided on such an estimate
    holds calls back that would fit.
    """
    counts = token_counts or {}
    # (sums kept in locals: this walk runs for every call that becomes ready)
    known_tokens = other_chars = 0
    hasher = prefix_hasher(salt)
    pieces: list[PrefixPiece] = []
    prefix_done = False
    for seg in template.segments:
        if isinstance(seg, Placeholder):
            if seg.is_output:
                prefix_done = True
                continue
            # an input not known yet (a call still waiting) ends the certain prefix
            prefix_done = prefix_done or seg.name not in values
            text = values.get(seg.name, "")
            if (count := counts.get(seg.name)) is None:
                other_chars += len(text)
            else:
                known_tokens += count
        else:
            text = seg.text
            other_chars += len(text)
        if prefix_done or not text:
            continue
        data = text.encode("utf-8")   # add_piece, inlined
        hasher.update(len(data).to_bytes(8, "big"))
        hasher.update(data)
        pieces.append(PrefixPiece(text, hasher.copy().hexdigest(), isinstance(seg, Text),
                                  known_tokens + -(-other_chars // CHARS_PER_TOKEN)))
    return PromptEstimate(tuple(pieces), known_tokens + -(-other_chars // CHARS_PER_TOKEN))


def prefix_hasher(salt: str) -> Any:
    """The running hash of a prompt's prefix, started with the tenant's `salt`.

    The hashed bytes are an injective encoding of (salt, piece, piece, ...): the salt and every
    piece go in as an 8-byte length and then their UTF-8 bytes. So no choice of values can make
    two different piece sequences, or the same pieces under two different salts, hash alike
    (short of a BLAKE2b collision): a separator byte would not do, since a value may contain
    it (`'team-a\\x01' + doc` unsalted was tenant team-a's salted `doc`; the pieces `a | b`
    were the single piece `a\\x00b`). The boundaries are part of a prefix's identity because
    contexts are forked there. The salt is framed even when empty (tenants that share
    prefixes), so an unsalted stream never starts like a salted one.
    """
    hasher = hashlib.blake2b(digest_size=HASH_BYTES)
    _frame(hasher, salt.encode("utf-8"))
    return hasher


def add_piece(hasher: Any, text: str) -> None:
    """One more piece (one boundary) of the prefix."""
    _frame(hasher, text.encode("utf-8"))


def _frame(hasher: Any, data: bytes) -> None:
    hasher.update(len(data).to_bytes(8, "big"))
    hasher.update(data)


def prefix_hashes_of(pieces: Sequence[str], salt: str = "") -> tuple[str, ...]:
    """The cumulative hash at the end of each piece (what `estimate_prompt` computes)."""
    hasher, hashes = prefix_hasher(salt), []
    for text in pieces:
        add_piece(hasher, text)
        hashes.append(hasher.copy().hexdigest())
    return tuple(hashes)


def prefix_pieces(template: Template, values: Mapping[str, str], salt: str = "",
                  token_counts: Mapping[str, int] | None = None) -> tuple[PrefixPiece, ...]:
    """`estimate_prompt`'s pieces alone."""
    return estimate_prompt(template, values, salt, token_counts).pieces


class PrefixIndex:
    """How many calls recently had each prefix (bounded: the least recently seen prefix is
    forgotten first), so a prefix that recurs is worth a context of its own on the engine.
    Which *queued* calls share a prefix the scheduler counts per round (`_call_views`).
    """

    def __init__(self, max_remembered: int = MAX_REMEMBERED_PREFIXES) -> None:
        self._occurrences: OrderedDict[str, int] = OrderedDict()
        self._max_remembered = max_remembered

    def add(self, hashes: tuple[str, ...]) -> None:
        """One more call has these prefixes."""
        for h in hashes:
            self._occurrences[h] = self._occurrences.pop(h, 0) + 1
        while len(self._occurrences) > self._max_remembered:
            self._occurrences.popitem(last=False)

    def occurrences(self, prefix_hash: str) -> int:
        """How many calls (now or recently) had this prefix."""
        return self._occurrences.get(prefix_hash, 0)
    def __len__(self) -> int:
        return len(self._occurrences)
