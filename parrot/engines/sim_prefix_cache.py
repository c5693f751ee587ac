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

The engine keeps the text only while prefix caching is on (`prefix_caching: true`,
`CachedPrefixes`); the manager and policies never see any of it.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterator

from parrot.engines.sim_blocks import KVSpace
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


class CachedPrefixes:
    """The simulated engine's prefix caching over its KV space: each live context's text,
    the PrefixCache of their blocks, and the contexts it makes itself (a cached prefix forked
    for a request, a finished context kept cached), named `apc-…`."""

    def __init__(self, kv: KVSpace) -> None:
        self._kv = kv
        self._block_size = kv.block_size
        self._cache = PrefixCache(kv.block_size)
        self._texts: dict[str, str] = {}   # context id -> its text (what its blocks hold)
        self._own_ids = 0
        self._query_tokens = 0   # prompt tokens (whole blocks) looked up
        self._hit_tokens = 0     # of those, served from the cache

    def fork(self, text: str, num_tokens: int) -> tuple[str | None, int]:
        """For a new root context of `text` (`num_tokens`): (a context holding the cached
        leading blocks to fork, their tokens), or (None, 0). At least the last prompt token
        is prefilled, as a real engine does. The caller frees that context once its request
        has forked it."""
        bs = self._block_size
        self._query_tokens += max(num_tokens - 1, 0) // bs * bs
        found = self._cache.match(text)
        if found is None:
            return None, 0
        holder_id, num_blocks = found
        holder = self._kv.contexts.get(holder_id)
        if holder is None or not holder.is_resident:   # its KV was evicted meanwhile
            self.evict(holder_id)
            return None, 0
        num_blocks = min(num_blocks, (num_tokens - 1) // bs, holder.length // bs)
        if num_blocks <= 0:
            return None, 0
        self._own_ids += 1
        prefix_id = f"apc-prefix-{self._own_ids}"
        self._kv.fork_blocks(prefix_id, holder, num_blocks)
        self._hit_tokens += num_blocks * bs
        return prefix_id, num_blocks * bs

    def index(self, context_id: str, parent_id: str | None, appended: str,
              num_tokens: int) -> None:
        """The context's text is its base's (its own so far, or the parent's it forked) and
        what was appended (a Fill's text, a Generate's prompt or what it generated); its full
        blocks (of `num_tokens` in KV) become reusable."""
        base = context_id if context_id in self._texts else parent_id or context_id
        text = self._texts[context_id] = self._texts.get(base, "") + appended
        self._cache.index(context_id, text, num_tokens)

    def release(self, context_id: str, *, in_use: bool) -> None:
        """A context freed: kept by content (its blocks reused by later requests until one
        needs them) when it holds a text and a whole resident block and no request was using
        it, else its KV freed."""
        text = self._texts.pop(context_id, None)
        ctx = self._kv.contexts.get(context_id)
        if (text and ctx is not None and ctx.is_resident and not in_use
                and ctx.length >= self._block_size):
            self._own_ids += 1
            cached_id = f"apc-{self._own_ids}"
            self._kv.rename(context_id, cached_id)
            self._cache.keep(context_id, cached_id)
        else:
            self._cache.forget(context_id)
            self._kv.free(context_id)

    def evict_oldest(self) -> bool:
        """Drop the least recently used cached context; whether there was one."""
        oldest = self._cache.oldest()
        if oldest is None:
            return False
        self.evict(oldest)
        return True

    def evict(self, cached_id: str) -> None:
        self._cache.forget(cached_id)
        self._kv.free(cached_id)

    def reset(self) -> int:
        """Forget every cached context and every live context's blocks (they keep them):
        the cached blocks dropped."""
        finished = self._cache.finished()
        blocks = sum(self._cache.num_blocks(c) for c in finished)
        for cached_id in finished:
            self.evict(cached_id)
        self._cache.forget_live()
        return blocks

    def counters(self) -> dict[str, int]:
        return {"prefix_cache_query_tokens": self._query_tokens,
                "prefix_cache_hit_tokens": self._hit_tokens}
