"""The reference-counted KV block allocator that both the builtin and the simulated engine use.

Blocks are ids 0..num_blocks-1 (the builtin engine's are rows of its paged KV tensors, the
simulated engine's are only ids). A block is handed out with one reference; forks `share` it
(one more reference each) and every owner `release`s it; it is free again when its count drops
to zero. Allocation comes in check/act pairs (`can_allocate` then `allocate`), and every
operation keeps the invariants that `check_invariants` asserts: reference counts >= 0, a block
is free iff its count is 0, free + used = total.

Content caching (automatic prefix caching, used by the builtin engine's `prefix_caching`): a
full block whose KV is computed may be named by a digest of its content (`cache_block`). When
its last reference goes, a named block is free but keeps its content, evictable: `lookup`
finds it by digest and `share` takes it back. `allocate` hands out plain free blocks first,
then evicts named ones least recently released first (a freed block table is released tail
first, so a cached prefix loses its last blocks before its first). Free blocks, named or not,
count in `num_free_blocks`: a cache never holds back an allocation. With no block named, the
allocator behaves as if none of this existed.

No torch here: the simulator must not depend on it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence


class BlockAllocator:
    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        self.num_blocks_total = num_blocks
        self._ref_counts = [0] * num_blocks
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))  # pop() gives 0, 1, ...
        # content caching: digest <-> block, and the free named blocks, least recent first
        self._by_digest: dict[bytes, int] = {}
        self._digest_of: dict[int, bytes] = {}
        self._evictable: OrderedDict[int, None] = OrderedDict()
        self.num_cache_evictions = 0      # named blocks handed out again (content dropped)

    @property
    def num_free_blocks(self) -> int:
        return len(self._free) + len(self._evictable)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks_total - self.num_free_blocks

    @property
    def num_cached_blocks(self) -> int:
        """Blocks named by their content, in use or free."""
        return len(self._digest_of)

    def ref_count(self, block: int) -> int:
        return self._ref_counts[block]

    def can_allocate(self, n: int) -> bool:
        return n <= len(self._free) + len(self._evictable)

    def allocate(self, n: int) -> list[int]:
        """`n` free blocks, each with one reference (check `can_allocate(n)` first): plain free
        blocks first, then cached ones, least recently released first (their content is
        forgotten)."""
        assert self.can_allocate(n), f"allocate({n}) with {self.num_free_blocks} free blocks"
        plain = min(n, len(self._free))
        blocks = [self._free.pop() for _ in range(plain)]
        for _ in range(n - plain):
            b, _ = self._evictable.popitem(last=False)
            del self._by_digest[self._digest_of.pop(b)]
            self.num_cache_evictions += 1
            blocks.append(b)
        for b in blocks:
            assert self._ref_counts[b] == 0, f"free block {b} had ref count {self._ref_counts[b]}"
            self._ref_counts[b] = 1
        return blocks

    def share(self, blocks: Iterable[int]) -> None:
        """One more reference to each of `blocks` (in use, or free and found by `lookup`)."""
        for b in blocks:
            if self._ref_counts[b] == 0:
                assert b in self._evictable, f"share of free block {b}"
                del self._evictable[b]
            self._ref_counts[b] += 1

    def release(self, blocks: Iterable[int]) -> None:
        """Drop one reference to each of `blocks`; a block nobody holds is free again (a
        named one keeps its content until `allocate` needs it)."""
        for b in blocks:
            assert self._ref_counts[b] > 0, f"release of free block {b} (double free)"
            self._ref_counts[b] -= 1
            if self._ref_counts[b] == 0:
                if b in self._digest_of:
                    self._evictable[b] = None
                else:
                    self._free.append(b)

    def cache_block(self, block: int, digest: bytes) -> bool:
        """Name `block` (in use, full, computed) by `digest`; False when the digest already
        names a block or the block already has a name (the first one stays)."""
        assert self._ref_counts[block] > 0, f"cache_block of free block {block}"
        if digest in self._by_digest or block in self._digest_of:
            return False
        self._by_digest[digest] = block
        self._digest_of[block] = digest
        return True

    def lookup(self, digests: Sequence[bytes]) -> list[int]:
        """The blocks named by the leading run of `digests` (stops at the first unknown)."""
        found: list[int] = []
        for digest in digests:
            block = self._by_digest.get(digest)
            if block is None:
                break
            found.append(block)
        return found

    def forget_cached(self) -> int:
        """Drop every block's name: free cached blocks become plain free ones, named blocks in
        use stay as they are, unnamed. How many names were dropped."""
        forgotten = len(self._digest_of)
        self._free.extend(self._evictable)
        self._evictable.clear()
        self._by_digest.clear()
        self._digest_of.clear()
        return forgotten

    def check_invariants(self) -> None:
        free = set(self._free)
        assert len(free) == len(self._free), "a block is on the free list twice"
        assert not free & self._evictable.keys(), "a block is free twice (plain and cached)"
        free |= self._evictable.keys()
        assert all(c >= 0 for c in self._ref_counts), "negative reference count"
        for b, count in enumerate(self._ref_counts):
            assert (count == 0) == (b in free), f"block {b}: ref count {count}, free={b in free}"
        assert self.num_free_blocks + self.num_used_blocks == self.num_blocks_total
        assert all(b in self._digest_of for b in self._evictable), "an unnamed cached block"
        assert {d: b for b, d in self._digest_of.items()} == self._by_digest, "digest maps differ"
