"""KV blocks: the per-context operations on block tables, over the shared reference-counted
allocator (`parrot.engines.block_allocator`, the simulated engine's too).

A context's block table covers its computed tokens, densely packed: token i lives in block
table[i // block_size] at offset i % block_size. A fork shares the parent's *full* computed
blocks (reference +1) and copies its partial last block into a fresh block, so a context only
ever writes into blocks it owns alone.
"""

from __future__ import annotations

from typing import Protocol

from parrot.engines.block_allocator import BlockAllocator


class HasBlocks(Protocol):
    block_table: list[int]
    num_computed: int


class BlockManager:
    """Block-table operations for contexts; pending fork copies wait for the next step."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.allocator = BlockAllocator(num_blocks)
        self.block_size = block_size
        self._pending_copies: list[tuple[int, int]] = []  # (src, dst); src holds an extra ref
        self._running_copies: list[tuple[int, int]] = []  # taken by a step, not yet done

    def blocks_needed(self, ctx: HasBlocks, num_tokens: int) -> int:
        """Blocks ctx must gain so that its table covers num_tokens tokens."""
        return max(0, -(-num_tokens // self.block_size) - len(ctx.block_table))

    def can_grow(self, ctx: HasBlocks, num_tokens: int) -> bool:
        return self.allocator.can_allocate(self.blocks_needed(ctx, num_tokens))

    def grow(self, ctx: HasBlocks, num_tokens: int) -> None:
        ctx.block_table.extend(self.allocator.allocate(self.blocks_needed(ctx, num_tokens)))

    def fork(self, parent: HasBlocks, child: HasBlocks) -> None:
        """child (empty) takes parent's computed KV: full blocks shared, partial block copied.

        Without a free block for the copy, the child shares the full blocks only and will
        recompute the partial tail (a fork never fails for lack of memory)."""
        assert not child.block_table and child.num_computed == 0, "fork into a non-empty context"
        num_full = parent.num_computed // self.block_size
        shared = parent.block_table[:num_full]
        self.allocator.share(shared)
        child.block_table = list(shared)
        child.num_computed = num_full * self.block_size
        partial = parent.num_computed - child.num_computed
        if partial and self.allocator.can_allocate(1):
            src = parent.block_table[num_full]
            (dst,) = self.allocator.allocate(1)
            self.allocator.share((src,))  # keep src alive until the copy has run
            self._pending_copies.append((src, dst))
            child.block_table.append(dst)
            child.num_computed = parent.num_computed

    def release(self, ctx: HasBlocks) -> int:
        """Drop ctx's blocks (its KV must be recomputed to be used again); returns how many
        blocks went back to the free pool."""
        before = self.allocator.num_free_blocks
        self.allocator.release(ctx.block_table)
        ctx.block_table = []
        ctx.num_computed = 0
        return self.allocator.num_free_blocks - before

    def take_copies(self) -> list[tuple[int, int]]:
        """The copies the next step must run before its forward pass."""
        copies, self._pending_copies = self._pending_copies, []
        self._running_copies.extend(copies)
        return copies

    def copies_done(self, copies: list[tuple[int, int]]) -> None:
        for pair in copies:
            self._running_copies.remove(pair)
            self.allocator.release((pair[0],))

    def pending_copy_sources(self) -> list[int]:
        """Blocks pinned as the source of a copy that has not run yet."""
        return [src for src, _dst in self._pending_copies + self._running_copies]
