"""Automatic prefix caching for the simulated engine: what vLLM's APC and SGLang's radix cache
give a request-level client.

A context's text, once its request ends, is kept cached by content: full KV blocks, each named
by a chain hash of its text and of the blocks before it (block j holds tokens
[j·block_size, (j+1)·block_size), i.e. characters [4·j·block_size, 4·(j+1)·block_size) of the
simulated tokenizer). A new context filled from scratch looks up the longest run of its
leading blocks that some cached context holds and forks those blocks instead of prefilling
them (shared, reference counted, like a paged engine's prefix cache). Cached contexts are
evicted least recently used first whenever a request needs their blocks, so a cache never
holds back a request.

The engine keeps the text only while prefix caching is on (`prefix_caching: true`); the
manager and policies never see any of it.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterator

from parrot.types import CHARS_PER_TOKEN


def block_hashes(text: str, block_size: int) -> Iterator[str]:
    """The chain hash of every full block of `text`, first block first."""
    width = block_size * CHARS_PER_TOKEN
    digest = ""
    for start in range(0, len(text) - width + 1, width):
        digest = hashlib.blake2b(f"{digest}|{text[start:start + width]}".encode(),
                                 digest_size=12).hexdigest()
        yield digest


class PrefixCache:
    """Contexts by the chain hashes of their full blocks: live ones (a block is reusable once
    computed, as in vLLM) and finished ones kept cached, least recently used first. A block
    several contexts hold is found through the latest of them."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self._hashes: dict[str, list[str]] = {}                 # context id -> its blocks
        self._finished: OrderedDict[str, None] = OrderedDict()  # evictable, LRU first
        self._holder: dict[str, str] = {}       # block hash -> a context holding it
        self.num_query_tokens = 0               # prompt tokens (whole blocks) looked up
        self.num_hit_tokens = 0                 # prompt tokens served from the cache

    def __contains__(self, context_id: str) -> bool:
        return context_id in self._hashes

    def index(self, context_id: str, text: str, num_tokens: int) -> None:
        """`context_id` (`num_tokens` of KV) holds `text`: its full blocks become reusable."""
        hashes = list(block_hashes(text, self.block_size))[:num_tokens // self.block_size]
        self._hashes[context_id] = hashes
        for digest in hashes:
            self._holder[digest] = context_id

    def keep(self, context_id: str, cached_id: str) -> None:
        """The context finished and stays cached as `cached_id` (evictable)."""
        hashes = self._hashes.pop(context_id, [])
        self._hashes[cached_id] = hashes
        for digest in hashes:
            if self._holder.get(digest) in (context_id, None):
                self._holder[digest] = cached_id
        self._finished[cached_id] = None

    def match(self, text: str) -> tuple[str, int] | None:
        """The context holding the most leading blocks of `text`, and how many."""
        best: tuple[str, int] | None = None
        for count, digest in enumerate(block_hashes(text, self.block_size), 1):
            holder = self._holder.get(digest)
            if holder is None:
                break
            best = (holder, count)
        if best is not None and best[0] in self._finished:
            self._finished.move_to_end(best[0])
        return best

    def num_blocks(self, context_id: str) -> int:
        """The full blocks `context_id` is indexed with."""
        return len(self._hashes.get(context_id, ()))

    def finished(self) -> list[str]:
        """The finished contexts kept cached, least recently used first."""
        return list(self._finished)

    def forget_live(self) -> None:
        """No live context's blocks are found any more (they keep them)."""
        live = [c for c in self._hashes if c not in self._finished]
        for context_id in live:
            self.forget(context_id)
            self._hashes[context_id] = []

    def oldest(self) -> str | None:
        """The least recently used finished context (the next to evict)."""
        return next(iter(self._finished), None)

    def forget(self, context_id: str) -> None:
        self._finished.pop(context_id, None)
        for digest in self._hashes.pop(context_id, ()):
            if self._holder.get(digest) == context_id:
                del self._holder[digest]
