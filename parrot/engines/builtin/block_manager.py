"""KV blocks: the per-context operations on block tables, over the shared reference-counted
allocator (`parrot.engines.block_allocator`, the simulated engine's too).

A context's block table covers its computed tokens, densely packed: token i lives in block
table[i // block_size] at offset i % block_size. A fork shares the parent's *full* computed
blocks (reference +1) and copies its partial last block into a fresh block, so a context only
ever writes into blocks it owns alone.

With `prefix_caching` (automatic prefix caching, as vLLM's APC and SGLang's radix cache): every
full computed block of a context is named by a chain digest of its tokens and of the tokens
before it (`register_computed`), and a context that starts with an empty table takes the
longest run of its leading blocks some earlier context computed (`reuse_cached`), shared and
reference counted like a fork's. A named block outlives its contexts as free-but-cached until
an allocation needs it (block_allocator.py), so a request that repeats a prompt's prefix skips
its prefill even after the request that computed it is gone.
"""

from __future__ import annotations

import hashlib
from array import array
from typing import Protocol

from parrot.engines.block_allocator import BlockAllocator


class HasBlocks(Protocol):
    block_table: list[int]
    num_computed: int
    num_registered: int          # leading blocks of block_table offered to the prefix cache
    # leading tokens counted in cache_query_tokens while the context holds no blocks (a miss
    # is looked up again at its turn, where a twin computed meanwhile may hit; it counts once)
    num_queried: int


class HasTokens(HasBlocks, Protocol):
    """A context as the prefix cache sees it: its tokens, and their digests so far."""

    token_ids: list[int]
    block_digests: list[bytes]   # chain digest of each full block of token_ids, first first


def extend_digests(digests: list[bytes], token_ids: list[int], block_size: int,
                   num_blocks: int) -> None:
    """Extend `digests` (the chain digests of token_ids' leading full blocks) to `num_blocks`.

    A block's digest covers its tokens and, through the previous digest, every token before
    it, so equal digests mean equal prefixes (blake2b, 128 bits: no collision is expected in
    a cache's lifetime; Python's hash() would be 64 bits and seeded per process)."""
    previous = digests[-1] if digests else b""
    for j in range(len(digests), num_blocks):
        block = array("q", token_ids[j * block_size:(j + 1) * block_size]).tobytes()
        previous = hashlib.blake2b(previous + block, digest_size=16).digest()
        digests.append(previous)


class BlockManager:
    """Block-table operations for contexts; pending fork copies wait for the next step."""

    def __init__(self, num_blocks: int, block_size: int, *, prefix_caching: bool = False
                 ) -> None:
        self.allocator = BlockAllocator(num_blocks)
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self.cache_query_tokens = 0   # prompt tokens looked up in the prefix cache
        self.cache_hit_tokens = 0     # ... of which were found computed
        self._pending_copies: list[tuple[int, int]] = []  # (src, dst); src holds an extra ref
        self._running_copies: list[tuple[int, int]] = []  # taken by a step, not yet done

    def blocks_needed(self, ctx: HasBlocks, num_tokens: int) -> int:
        """Blocks ctx must gain so that its table covers num_tokens tokens."""
        return max(0, -(-num_tokens // self.block_size) - len(ctx.block_table))

    def can_grow(self, ctx: HasBlocks, num_tokens: int) -> bool:
        return self.allocator.can_allocate(self.blocks_needed(ctx, num_tokens))

    def grow(self, ctx: HasBlocks, num_tokens: int) -> None:
        needed = self.blocks_needed(ctx, num_tokens)
        if needed:
            ctx.block_table.extend(self.allocator.allocate(needed))

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
        # tail first: a cached prefix's last blocks are the first evicted
        self.allocator.release(reversed(ctx.block_table))
        ctx.block_table = []
        ctx.num_computed = 0
        ctx.num_registered = 0
        ctx.num_queried = 0
        return self.allocator.num_free_blocks - before

    # -- automatic prefix caching (prefix_caching) -------------------------------------------

    def reuse_cached(self, ctx: HasTokens) -> int:
        """Give ctx (no blocks yet) the cached blocks of its longest computed prefix; the tokens
        it no longer needs to compute. The block of its pending (last) token is never reused:
        the step that computes that token writes into a block of its own."""
        if not self.prefix_caching or ctx.block_table:
            return 0
        usable = max(len(ctx.token_ids) - 1, 0) // self.block_size
        if usable == 0:
            return 0
        extend_digests(ctx.block_digests, ctx.token_ids, self.block_size, usable)
        blocks = self.allocator.lookup(ctx.block_digests[:usable])
        self.cache_query_tokens += max(usable * self.block_size - ctx.num_queried, 0)
        ctx.num_queried = max(ctx.num_queried, usable * self.block_size)
        if not blocks:
            return 0
        self.allocator.share(blocks)
        ctx.block_table = blocks
        ctx.num_computed = len(blocks) * self.block_size
        ctx.num_registered = len(blocks)
        self.cache_hit_tokens += ctx.num_computed
        return ctx.num_computed

    def register_computed(self, ctx: HasTokens) -> None:
        """Name ctx's full computed blocks not yet offered to the cache (a block with the same
        content already cached keeps its place; ctx's copy stays private)."""
        full = min(ctx.num_computed // self.block_size, len(ctx.block_table))
        if not self.prefix_caching or full <= ctx.num_registered:
            return
        extend_digests(ctx.block_digests, ctx.token_ids, self.block_size, full)
        for j in range(ctx.num_registered, full):
            self.allocator.cache_block(ctx.block_table[j], ctx.block_digests[j])
        ctx.num_registered = full

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
