"""Prefix contexts kept on one engine, keyed by PrefixHash, with reference counts and LRU eviction.

A call acquires the chain of contexts for its prompt's prefix pieces: pieces whose hash already
has a context on the engine are reused (waiting if that context is still being filled), the rest
are filled as new contexts, each forking the previous one. When a call finishes it releases its
chain; unreferenced contexts stay cached (system prompts, shared history) until the engine needs
the memory, and are then freed least recently used first.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import OrderedDict
from dataclasses import dataclass, field

from parrot.core.prefix import PrefixPiece
from parrot.engines.protocol import Engine, FillRequest
from parrot.errors import EngineError


@dataclass(eq=False)
class PrefixContext:
    prefix_hash: str
    context_id: str
    filled: asyncio.Future[None]
    num_tokens: int = 0          # tokens this context adds to its parent (known once filled)
    refcount: int = 0
    children: int = 0            # cached contexts forked from this one

    @property
    def is_evictable(self) -> bool:
        return self.refcount == 0 and self.children == 0 and self.filled.done()


@dataclass(eq=False)
class ContextChain:
    """The prefix contexts one call holds, shallowest first."""

    contexts: list[PrefixContext] = field(default_factory=list)

    @property
    def leaf_id(self) -> str | None:
        return self.contexts[-1].context_id if self.contexts else None


class EngineContexts:
    def __init__(self, engine: Engine, engine_id: str, block_size: int = 16) -> None:
        self._engine = engine
        self._engine_id = engine_id
        self._block_size = block_size
        self._by_hash: OrderedDict[str, PrefixContext] = OrderedDict()  # LRU order
        self._parent: dict[str, PrefixContext | None] = {}
        self._ids = itertools.count()
        self.num_hits = 0
        self.num_misses = 0
        # KV held by this cache's contexts, in tokens of whole blocks (kept current).
        self.num_cached_tokens = 0

    @property
    def prefix_hashes(self) -> "OrderedDict[str, PrefixContext]":
        """Live mapping (do not mutate) of the hashes with a context on this engine."""
        return self._by_hash

    def footprint(self, num_tokens: int) -> int:
        """KV a context of `num_tokens` own tokens holds: whole blocks, plus the partial block
        a fork copies from its parent."""
        return (-(-num_tokens // self._block_size) + 1) * self._block_size

    async def acquire(self, pieces: tuple[PrefixPiece, ...]) -> ContextChain:
        """Reference (creating where missing) the contexts of every piece, in order."""
        chain = ContextChain()
        try:
            for piece in pieces:
                ctx = self._by_hash.get(piece.prefix_hash)
                if ctx is None:
                    self.num_misses += 1
                    ctx = self._start_fill(piece, chain.contexts[-1] if chain.contexts else None)
                else:
                    self.num_hits += 1
                    self._by_hash.move_to_end(piece.prefix_hash)
                ctx.refcount += 1
                chain.contexts.append(ctx)
                await asyncio.shield(ctx.filled)
        except BaseException:
            self.release(chain)
            raise
        return chain

    def _start_fill(self, piece: PrefixPiece, parent: PrefixContext | None) -> PrefixContext:
        context_id = f"p-{piece.prefix_hash}-{next(self._ids)}"
        ctx = PrefixContext(piece.prefix_hash, context_id,
                            asyncio.get_running_loop().create_future())
        self._by_hash[piece.prefix_hash] = ctx
        self._parent[context_id] = parent
        if parent is not None:
            parent.children += 1
        request = FillRequest(context_id=context_id,
                              parent_context_id=parent.context_id if parent else None,
                              text=piece.text)
        task = asyncio.ensure_future(self._engine.fill(request))
        task.add_done_callback(lambda t: self._on_filled(ctx, t))
        return ctx

    def _on_filled(self, ctx: PrefixContext, task: asyncio.Task) -> None:
        if task.cancelled():
            error: BaseException | None = EngineError(f"fill of {ctx.context_id} was cancelled")
        else:
            error = task.exception()
        if error is None:
            ctx.num_tokens = task.result().num_filled_tokens
            self.num_cached_tokens += self.footprint(ctx.num_tokens)
            ctx.filled.set_result(None)
            return
        # A failed fill leaves no context behind; later calls with this prefix try again.
        if self._by_hash.get(ctx.prefix_hash) is ctx:
            del self._by_hash[ctx.prefix_hash]
        parent = self._parent.pop(ctx.context_id, None)
        if parent is not None:
            parent.children -= 1
        ctx.filled.set_exception(error)
        ctx.filled.exception()  # mark retrieved: waiters that went away must not warn

    def release(self, chain: ContextChain) -> None:
        for ctx in chain.contexts:
            ctx.refcount -= 1
            assert ctx.refcount >= 0, f"context {ctx.context_id} released twice"
        chain.contexts.clear()

    async def evict(self, num_tokens: int) -> int:
        """Free least-recently-used unreferenced contexts until `num_tokens` of KV are freed."""
        freed = 0
        while freed < num_tokens:
            victim = next((c for c in self._by_hash.values() if c.is_evictable), None)
            if victim is None:
                break
            freed += self.footprint(victim.num_tokens)
            await self._free(victim)
        return freed

    async def evict_all(self) -> int:
        return await self.evict(1 << 62)

    async def _free(self, ctx: PrefixContext) -> None:
        del self._by_hash[ctx.prefix_hash]
        self.num_cached_tokens -= self.footprint(ctx.num_tokens)
        parent = self._parent.pop(ctx.context_id, None)
        if parent is not None:
            parent.children -= 1
        try:
            await self._engine.free_context(ctx.context_id)
        except EngineError:
            pass  # the engine lost it already (restart); nothing left to free

    def forget_all(self) -> None:
        """The engine was lost: its contexts are gone with it."""
        self._by_hash.clear()
        self._parent.clear()
        self.num_cached_tokens = 0
