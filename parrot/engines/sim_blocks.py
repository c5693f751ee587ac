"""The simulated engine's stand-ins for a tokenizer and a KV block allocator.

Tokens: ceil(len(text) / 4) per text (the manager estimates the same way); generated tokens are
4-character word-like pieces chosen by a hash, so output is deterministic filler. Blocks: ids
with reference counts, shared by forks like a real paged KV cache.
"""

from __future__ import annotations

import hashlib
from typing import Iterable

from parrot.types import estimate_num_tokens

# 2000 four-character pieces: " " + consonant + vowel + consonant.
_VOCAB = tuple(f" {a}{b}{c}" for a in "bcdfghjklmnprstvwxyz" for b in "aeiou"
               for c in "bcdfghjklmnprstvwxyz")


def count_tokens(text: str) -> int:
    """The simulated tokenizer: the project's shared estimate (4 characters per token)."""
    return estimate_num_tokens(text)


def filler_token(context_id: str, seed: int | None, position: int) -> int:
    digest = hashlib.blake2b(f"{context_id}|{seed}|{position}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % len(_VOCAB)


def detokenize(token_ids: Iterable[int]) -> str:
    return "".join(_VOCAB[t] for t in token_ids)


class BlockPool:
    """Reference-counted KV blocks (simulated: ids only)."""

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks_total = num_blocks
        self._free = list(range(num_blocks - 1, -1, -1))
        self._refs = [0] * num_blocks

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    def can_allocate(self, n: int) -> bool:
        return n <= len(self._free)

    def allocate(self, n: int) -> list[int]:
        assert self.can_allocate(n), (n, len(self._free))
        blocks = [self._free.pop() for _ in range(n)]
        for b in blocks:
            self._refs[b] = 1
        return blocks

    def share(self, blocks: Iterable[int]) -> None:
        for b in blocks:
            assert self._refs[b] > 0, b
            self._refs[b] += 1

    def release(self, blocks: Iterable[int]) -> None:
        for b in blocks:
            assert self._refs[b] > 0, b
            self._refs[b] -= 1
            if self._refs[b] == 0:
                self._free.append(b)
