"""Prefix contexts kept on one engine, keyed by PrefixHash, with reference counts and LRU eviction.

A call acquires the chain of contexts for its prompt's prefix pieces: it forks the deepest piece
that already has a context on the engine (waiting if that context is still being filled) and
fills the pieces after it as new contexts, each forking the previous one. When a call finishes
it releases what it holds; unreferenced contexts stay cached (system prompts, shared history)
until the engine needs the memory, and are then freed least recently used first.

Eviction works in any chain order: an engine keeps a child valid when its parent is freed (the
shared blocks are reference counted), and a call only needs the deepest context it forks. Using
a chain touches its contexts deepest first, so a shared ancestor is always at least as recent
as its descendants and LRU frees leaves before the system prompt they extend.

A context used by the calls of one session only is that session's: deleting the session frees
it at once. A context a second session used is shared cache and stays until evicted, and so
does one of a template's constant leading text (a system prompt holds no session's data; a
request-level engine with automatic prefix caching keeps it too, for the next request).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import OrderedDict
from dataclasses import dataclass, field

from parrot.manager.prefix import PrefixPiece
from parrot.engines.protocol import LATENCY_PRIORITY, Engine, FillRequest, FillResult
from parrot.errors import EngineError

log = logging.getLogger(__name__)

SHARED = ""  # owner of a context used by more than one session


@dataclass(eq=False)
class PrefixContext:
    prefix_hash: str
    context_id: str
    filled: asyncio.Future[None]
    owner: str                   # the one session whose calls used it, or SHARED
    num_tokens: int = 0          # tokens this context adds to its parent (known once filled)
    inherited_tokens: int = 0    # KV of freed ancestors this context still holds (shared blocks)
    refcount: int = 0
    parent: PrefixContext | None = None
    # Cached forks of this one (a dict: insertion-ordered, so runs are deterministic).
    children: dict[PrefixContext, None] = field(default_factory=dict)

    @property
    def is_evictable(self) -> bool:
        return self.refcount == 0 and self.filled.done()


@dataclass(eq=False)
class ContextChain:
    """The prefix contexts one call holds: while acquiring, the chain being filled; then only
    the deepest, the call's fork parent."""

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
        self._by_session: dict[str, dict[PrefixContext, None]] = {}     # owned contexts
        self._ids = itertools.count()
        self.num_hits = 0
        self.num_misses = 0
        # KV held by this cache's contexts, in tokens of whole blocks (kept current).
        self.num_cached_tokens = 0
        # Contexts a call references (refcount > 0): at most a few per running call, so the
        # KV they hold is summed over them, not over the whole cache.
        self._referenced: dict[PrefixContext, None] = {}
        # Contexts filled ahead for a call that has not forked them yet (prefill_ahead.py).
        self._ahead: dict[PrefixContext, None] = {}
        # Fills sent to the engine and not answered yet: prefill queued there.
        self.num_filling = 0

    @property
    def prefix_hashes(self) -> OrderedDict[str, PrefixContext]:
        """Live mapping (do not mutate) of the hashes with a context on this engine."""
        return self._by_hash

    def footprint(self, num_tokens: int) -> int:
        """KV a context of `num_tokens` own tokens holds: whole blocks, plus the partial block
        a fork copies from its parent."""
        return (-(-num_tokens // self._block_size) + 1) * self._block_size

    @property
    def num_idle_tokens(self) -> int:
        """KV held by contexts no running call forks from (refcount 0): what a running call's
        own accounting (its prompt, prefixes included) does not already count."""
        referenced = sum(self._held(c) for c in self._referenced if self._counted(c))
        return max(0, self.num_cached_tokens - referenced)

    @property
    def num_ahead_tokens(self) -> int:
        """KV held by contexts filled ahead for a waiting call that no call has forked yet:
        evicting one makes that call fill it again (stale contexts cost nothing to evict)."""
        return sum(self._held(c) for c in self._ahead if self._counted(c))

    def _counted(self, ctx: PrefixContext) -> bool:
        """ctx's KV is in num_cached_tokens: cached and filled."""
        return (self._by_hash.get(ctx.prefix_hash) is ctx and ctx.filled.done()
                and not ctx.filled.cancelled() and ctx.filled.exception() is None)

    def release_ahead(self, chain: ContextChain) -> None:
        """Release a chain filled ahead for a waiting call: its leaf counts as reserved for
        that call (num_ahead_tokens) until a call forks it or it is evicted."""
        if chain.contexts:
            self._ahead[chain.contexts[-1]] = None
        self.release(chain)

    def _reference(self, ctx: PrefixContext, delta: int) -> None:
        if delta > 0:
            self._ahead.pop(ctx, None)
        ctx.refcount += delta
        assert ctx.refcount >= 0, f"context {ctx.context_id} released twice"
        if ctx.refcount:
            self._referenced[ctx] = None
        else:
            self._referenced.pop(ctx, None)

    def _held(self, ctx: PrefixContext) -> int:
        return self.footprint(ctx.num_tokens) + ctx.inherited_tokens

    # --- acquiring and releasing ------------------------------------------------------------

    async def acquire(self, pieces: tuple[PrefixPiece, ...], session_id: str = SHARED,
                      priority: int = LATENCY_PRIORITY) -> ContextChain:
        """Reference the deepest cached context of `pieces` and create the ones after it,
        filled at the engine `priority` of the call that asks first."""
        chain = ContextChain()
        deepest = next((i for i in range(len(pieces) - 1, -1, -1)
                        if pieces[i].prefix_hash in self._by_hash), -1)
        for piece in reversed(pieces[:deepest + 1]):  # deepest first: ancestors end most recent
            if (ctx := self._by_hash.get(piece.prefix_hash)) is not None:
                self._by_hash.move_to_end(piece.prefix_hash)
                self._claim(ctx, session_id)
        self.num_hits += deepest + 1
        try:
            if deepest >= 0:
                ctx = self._by_hash[pieces[deepest].prefix_hash]
                self._reference(ctx, 1)
                chain.contexts.append(ctx)
                await asyncio.shield(ctx.filled)
            for piece in pieces[deepest + 1:]:
                ctx = self._by_hash.get(piece.prefix_hash)  # another call may have made it
                if ctx is None:
                    self.num_misses += 1
                    ctx = self._start_fill(piece, chain.contexts[-1] if chain.contexts else None,
                                           session_id, priority)
                else:
                    self.num_hits += 1
                    self._claim(ctx, session_id)
                self._reference(ctx, 1)
                chain.contexts.append(ctx)
                await asyncio.shield(ctx.filled)
        except BaseException:
            self.release(chain)
            raise
        # The forks are filled: the call needs only the deepest one (an engine keeps a child
        # valid when its parent goes), so its ancestors become evictable.
        for ctx in chain.contexts[:-1]:
            self._reference(ctx, -1)
        del chain.contexts[:-1]
        for piece in reversed(pieces):  # the new contexts too: ancestors end most recent
            if piece.prefix_hash in self._by_hash:
                self._by_hash.move_to_end(piece.prefix_hash)
        return chain

    def _claim(self, ctx: PrefixContext, session_id: str) -> None:
        if ctx.owner not in (session_id, SHARED):
            self._by_session.get(ctx.owner, {}).pop(ctx, None)
            ctx.owner = SHARED

    def _start_fill(self, piece: PrefixPiece, parent: PrefixContext | None,
                    session_id: str, priority: int) -> PrefixContext:
        context_id = f"p-{piece.prefix_hash}-{next(self._ids)}"
        if piece.is_template_text:
            session_id = SHARED     # the template's own text: shared cache from the start
        ctx = PrefixContext(piece.prefix_hash, context_id,
                            asyncio.get_running_loop().create_future(), session_id,
                            parent=parent)
        self._by_hash[piece.prefix_hash] = ctx
        if session_id != SHARED:
            self._by_session.setdefault(session_id, {})[ctx] = None
        if parent is not None:
            parent.children[ctx] = None
        request = FillRequest(context_id=context_id,
                              parent_context_id=parent.context_id if parent else None,
                              text=piece.text, priority=priority)
        task = asyncio.ensure_future(self._engine.fill(request))
        self.num_filling += 1
        task.add_done_callback(lambda t: self._on_filled(ctx, t))
        return ctx

    def _on_filled(self, ctx: PrefixContext, task: asyncio.Future[FillResult]) -> None:
        self.num_filling -= 1
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
        self._unlink(ctx)
        self._by_session.get(ctx.owner, {}).pop(ctx, None)
        ctx.filled.set_exception(error)
        ctx.filled.exception()  # mark retrieved: waiters that went away must not warn

    def release(self, chain: ContextChain) -> None:
        for ctx in chain.contexts:
            self._reference(ctx, -1)
        chain.contexts.clear()

    # --- freeing ------------------------------------------------------------------------------

    async def evict(self, num_tokens: int) -> int:
        """Free least-recently-used unreferenced contexts until `num_tokens` of KV are freed.

        Victims are chosen in one pass and leave the cache before the first engine round trip,
        so no call can acquire a context that is being freed."""
        victims: list[PrefixContext] = []
        freed = 0
        for ctx in self._by_hash.values():
            if freed >= num_tokens:
                break
            if ctx.is_evictable:
                victims.append(ctx)
                freed += self._forget(ctx)
        for ctx in victims:
            del self._by_hash[ctx.prefix_hash]
        await self._free_on_engine(victims)
        return freed

    async def evict_all(self) -> int:
        return await self.evict(1 << 62)

    async def release_session(self, session_id: str) -> int:
        """The session was deleted: free the contexts only its calls used. One still in use (a
        cancelled call that has not unwound yet) goes first in line for eviction instead."""
        owned = self._by_session.pop(session_id, {})
        victims = []
        for ctx in owned:
            ctx.owner = SHARED
            if self._by_hash.get(ctx.prefix_hash) is not ctx:
                continue
            if ctx.is_evictable:
                victims.append(ctx)
                self._forget(ctx)
                del self._by_hash[ctx.prefix_hash]
            else:
                self._by_hash.move_to_end(ctx.prefix_hash, last=False)
        await self._free_on_engine(victims)
        return len(victims)

    def _forget(self, ctx: PrefixContext) -> int:
        """Drop ctx from the bookkeeping; returns the KV (tokens) this frees on the engine. A
        context with cached children frees only its partial last block: the children keep its
        full blocks, so that KV is counted on one of them from now on."""
        held = self._held(ctx)
        freed = held
        if ctx.children:
            heir = next(iter(ctx.children))
            freed = min(held, self._block_size)
            heir.inherited_tokens += held - freed
        self.num_cached_tokens -= freed
        self._ahead.pop(ctx, None)
        self._by_session.get(ctx.owner, {}).pop(ctx, None)
        self._unlink(ctx)
        return freed

    def _unlink(self, ctx: PrefixContext) -> None:
        """Take ctx out of the chain: its children hang from its parent from now on."""
        parent = ctx.parent
        if parent is not None:
            parent.children.pop(ctx, None)
        for child in ctx.children:
            child.parent = parent
            if parent is not None:
                parent.children[child] = None
        ctx.children = {}
        ctx.parent = None

    async def _free_on_engine(self, victims: list[PrefixContext]) -> None:
        for ctx in victims:
            try:
                await self._engine.free_context(ctx.context_id)
            except EngineError as exc:  # the engine lost it already (restart): nothing to free
                log.debug("engine %s: freeing cached context %s: %s", self._engine_id,
                          ctx.context_id, exc)

    def forget_all(self) -> None:
        """The engine was lost: its contexts are gone with it."""
        self._by_hash.clear()
        self._by_session.clear()
        self._ahead.clear()
        self.num_cached_tokens = 0
