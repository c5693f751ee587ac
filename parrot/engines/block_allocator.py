"""The reference-counted KV block allocator that both the builtin and the simulated engine use.

Blocks are ids 0..num_blocks-1 (the builtin engine's are rows of its paged KV tensors, the
simulated engine's are only ids). A block is handed out with one reference; forks `share` it
(one more reference each) and every owner `release`s it; it is free again when its count drops
to zero. Allocation comes in check/act pairs (`can_allocate` then `allocate`), and every
operation keeps the invariants that `check_invariants` asserts: reference counts >= 0, a block
is free iff its count is 0, free + used = total.

No torch here: the simulator must not depend on it.
"""

from __future__ import annotations

from collections.abc import Iterable


class BlockAllocator:
    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        self.num_blocks_total = num_blocks
        self._ref_counts = [0] * num_blocks
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))  # pop() gives 0, 1, ...

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks_total - len(self._free)

    def ref_count(self, block: int) -> int:
        return self._ref_counts[block]

    def can_allocate(self, n: int) -> bool:
        return n <= len(self._free)

    def allocate(self, n: int) -> list[int]:
        """`n` free blocks, each with one reference (check `can_allocate(n)` first)."""
        assert self.can_allocate(n), f"allocate({n}) with {len(self._free)} free blocks"
        blocks = [self._free.pop() for _ in range(n)]
        for b in blocks:
            assert self._ref_counts[b] == 0, f"free block {b} had ref count {self._ref_counts[b]}"
            self._ref_counts[b] = 1
        return blocks

    def share(self, blocks: Iterable[int]) -> None:
        """One more reference to each of `blocks` (all in use)."""
        for b in blocks:
            assert self._ref_counts[b] > 0, f"share of free block {b}"
            self._ref_counts[b] += 1

    def release(self, blocks: Iterable[int]) -> None:
        """Drop one reference to each of `blocks`; a block nobody holds is free again."""
        for b in blocks:
            assert self._ref_counts[b] > 0, f"release of free block {b} (double free)"
            self._ref_counts[b] -= 1
            if self._ref_counts[b] == 0:
                self._free.append(b)

    def check_invariants(self) -> None:
        free = set(self._free)
        assert len(free) == len(self._free), "a block is on the free list twice"
        assert all(c >= 0 for c in self._ref_counts), "negative reference count"
        for b, count in enumerate(self._ref_counts):
            assert (count == 0) == (b in free), f"block {b}: ref count {count}, free={b in free}"
        assert self.num_free_blocks + self.num_used_blocks == self.num_blocks_total
