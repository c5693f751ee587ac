"""The simulated engine's stand-in tokenizer and its KV space over the shared block allocator.

Tokens: ceil(len(text) / 4) per text (the manager estimates the same way); generated tokens are
4-character word-like pieces chosen by a hash, so output is deterministic filler. Blocks: the
reference-counted allocator the builtin engine uses too (block_allocator.py), shared by forks
like a real paged KV cache. A context whose KV was evicted keeps its tokens (its length) and
recomputes the KV when it is used again, as the builtin engine does.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field
from collections.abc import Collection, Iterable
from typing import NamedTuple

from parrot.engines.block_allocator import BlockAllocator
from parrot.types import estimate_num_tokens

# 2000 four-character pieces: " " + consonant + vowel + consonant.
_VOCAB = tuple(f" {a}{b}{c}" for a in "bcdfghjklmnprstvwxyz" for b in "aeiou"
               for c in "bcdfghjklmnprstvwxyz")


def count_tokens(text: str) -> int:
    """The simulated tokenizer: the project's shared estimate (4 characters per token)."""
    return estimate_num_tokens(text)


_VOCAB_SIZE = len(_VOCAB)
_piece = _VOCAB.__getitem__
_unsigned_64 = struct.Struct("<Q").unpack   # int.from_bytes(8 bytes, "little"), faster


def filler_token(context_id: str, seed: int | None, position: int) -> int:
    digest = hashlib.blake2b(f"{context_id}|{seed}|{position}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % _VOCAB_SIZE


class FillerTokens:
    """`filler_token(context_id, seed, position)` for one (context, seed): the same hash, with
    the fixed prefix of its input hashed once per request instead of once per token (hashing
    "a" then "b" is hashing "ab")."""

    __slots__ = ("_prefix",)

    def __init__(self, context_id: str, seed: int | None, salt: str = "") -> None:
        # `salt`: a leading "<salt>|" field, for other hashes of the same triple (sim EOS)
        head = f"{salt}|{context_id}|{seed}|" if salt else f"{context_id}|{seed}|"
        self._prefix = hashlib.blake2b(head.encode(), digest_size=8)

    def digest(self, position: int) -> int:
        """The hash of (context, seed, `position`) as an unsigned 64-bit integer."""
        hasher = self._prefix.copy()
        hasher.update(b"%d" % position)   # f"{position}", encoded
        value: int = _unsigned_64(hasher.digest())[0]
        return value

    def token(self, position: int) -> int:
        """filler_token(context_id, seed, `position`) (digest's body inlined: once a token)."""
        hasher = self._prefix.copy()
        hasher.update(b"%d" % position)
        value: int = _unsigned_64(hasher.digest())[0]
        return value % _VOCAB_SIZE


def detokenize(token_ids: Iterable[int]) -> str:
    return "".join(map(_piece, token_ids))


@dataclass(eq=False, slots=True)
class SimContext:
    context_id: str
    length: int = 0
    blocks: list[int] = field(default_factory=list)  # shared full prefix blocks first
    is_resident: bool = True   # False once its KV was evicted: recomputed before its next use
    last_used: int = 0         # reservation sequence number of the last request that used it


class Reservation(NamedTuple):
    context: SimContext
    created: bool        # the context was made for this request (a new context or a fork)
    num_recompute: int   # evicted tokens to prefill again before the request's own work


class KVSpace:
    """The simulated engine's contexts and their blocks: reservation, eviction, recompute."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.pool = BlockAllocator(num_blocks)
        self.block_size = block_size
        self.contexts: dict[str, SimContext] = {}
        self._num_reserved = 0  # the contexts' LRU clock

    def reserve(self, context_id: str, parent: SimContext | None, num_tokens: int, *,
                may_evict: bool) -> Reservation | None:
        """Every block a request on `context_id` (forking `parent` if the context is new) needs
        to add `num_tokens`, or None if they are not free. With `may_evict` (nothing else would
        ever return blocks), idle contexts' KV is evicted to make room, the request's own
        context and parent last; the caller has checked that the request fits an empty engine.
        """
        ctx = self.contexts.get(context_id)
        parent = parent if ctx is None else None
        source = ctx if ctx is not None else parent
        base_len = source.length if source is not None else 0
        # Adding nothing needs no KV: an evicted source then stays evicted.
        recompute = source is not None and not source.is_resident and num_tokens > 0
        reuse = source is not None and source.is_resident
        bs = self.block_size
        shared = parent.blocks[:parent.length // bs] if parent is not None and reuse else []
        held = len(ctx.blocks) if ctx is not None and reuse else len(shared)
        final_blocks = -(-(base_len + num_tokens) // bs) \
            if reuse or recompute or source is None else 0
        need = final_blocks - held
        if not self.pool.can_allocate(need):
            if not may_evict:
                return None
            keep = {context_id} | ({parent.context_id} if parent is not None else set())
            evict_idle(self.pool, self.contexts.values(), need, keep)
            if not self.pool.can_allocate(need) and parent is not None and parent.blocks:
                evict_idle(self.pool, [parent], final_blocks, ())  # fork from recomputed KV
                return self.reserve(context_id, parent, num_tokens, may_evict=True)
            if not self.pool.can_allocate(need):
                return None
        created = ctx is None
        if ctx is None:
            self.pool.share(shared)
            ctx = self.contexts[context_id] = SimContext(
                context_id, base_len, list(shared), is_resident=source is None or reuse)
        if need > 0:   # most Generates fit the context's last block: nothing to allocate
            ctx.blocks.extend(self.pool.allocate(need))
        if recompute:
            ctx.is_resident = True
        self._num_reserved += 1
        ctx.last_used = self._num_reserved
        if parent is not None:
            parent.last_used = self._num_reserved
        return Reservation(ctx, created, base_len if recompute else 0)

    def fork_blocks(self, context_id: str, source: SimContext, num_blocks: int) -> SimContext:
        """A new context holding the first `num_blocks` (full) blocks of `source`, shared: a
        cached prefix to fork (the simulated engine's prefix caching)."""
        assert source.is_resident and num_blocks <= source.length // self.block_size
        blocks = source.blocks[:num_blocks]
        self.pool.share(blocks)
        self._num_reserved += 1
        source.last_used = self._num_reserved
        ctx = self.contexts[context_id] = SimContext(context_id, num_blocks * self.block_size,
                                                     list(blocks), last_used=self._num_reserved)
        return ctx

    def rename(self, context_id: str, new_id: str) -> SimContext:
        ctx = self.contexts.pop(context_id)
        ctx.context_id = new_id
        self.contexts[new_id] = ctx
        return ctx

    def cut_back(self, ctx: SimContext, length: int, *, is_computed: bool) -> None:
        """An aborted request leaves `ctx` at `length` tokens; its unused blocks go back, all
        of them when the KV was still being recomputed (it is evicted then)."""
        ctx.length = length
        keep = -(-length // self.block_size) if is_computed else 0
        self.pool.release(ctx.blocks[keep:])
        del ctx.blocks[keep:]
        ctx.is_resident = bool(ctx.blocks) or length == 0

    def free(self, context_id: str) -> None:
        ctx = self.contexts.pop(context_id, None)
        if ctx is not None:
            self.pool.release(ctx.blocks)

    def unique_tokens(self, contexts: Iterable[SimContext]) -> int:
        """Tokens of KV held by `contexts`, a shared (always full) block counted once."""
        bs = self.block_size
        full_blocks: set[int] = set()
        partial = 0
        for ctx in contexts:
            if ctx.is_resident:
                full_blocks.update(ctx.blocks[:ctx.length // bs])
                partial += ctx.length % bs
        return len(full_blocks) * bs + partial


def evict_idle(pool: BlockAllocator, contexts: Iterable[SimContext], num_blocks: int,
               busy: Collection[str]) -> None:
    """Drop the KV of contexts not in `busy` until `num_blocks` blocks are free: least recently
    used first, those that own a block outright before those whose blocks are all shared with
    other contexts (freeing those returns nothing until the sharers go too)."""
    idle = [c for c in contexts if c.blocks and c.context_id not in busy]
    idle.sort(key=lambda c: (not any(pool.ref_count(b) == 1 for b in c.blocks), c.last_used))
    for victim in idle:
        if pool.can_allocate(num_blocks):
            return
        pool.release(victim.blocks)
        victim.blocks = []
        victim.is_resident = victim.length == 0
