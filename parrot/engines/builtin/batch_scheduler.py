"""Continuous batching: each iteration picks decode steps and prefill chunks under budgets.

Order of an iteration (`schedule`):
1. apply deferred frees, drop finished (done, failed, abandoned) work;
2. start waiting work whose parent is idle (fork the parent's blocks, append the fill's tokens);
3. decodes first (one token per Generate that is caught up), then prefill chunks (Fills, and
   Generates whose context must be (re)computed), each by priority (the protocol's: lower
   first), then oldest first, within max_batch_tokens and max_num_seqs; the prefill chunks
   beside decodes also within the step budget (step_budget.py: chunked prefill, so a long
   prompt is split over several steps instead of stalling the running streams); with
   prefix caching (block_manager.py), a context that starts, or restarts after losing its
   blocks, first takes its longest cached prefix, and every block a step completes is
   offered to the cache; past `max_mixed_decode_rows` decode rows, decodes and prefill take
   turns (a step of each) instead of mixing;
4. KV blocks: a chunk that does not fit first takes free blocks only the prefix cache still
   names (least recently released first), then evicts idle contexts (LRU), then preempts
   the newest running work of the lowest priority not in this batch (its KV is recomputed
   later); if nothing can be freed the chunk waits. Work that can never be served fails
   with OutOfKVCacheError.
`postprocess` applies a step's result: computed counts, sampled tokens, finished work.

`schedule(decode_only=True)` (the engine asks for it while a decode step launched ahead is in
flight, lookahead.py) leaves steps 2 and the prefill chunks of 3 for the next iteration when
there are decodes to run: the launched step is then this step, used instead of wasted.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from parrot.engines.builtin.block_manager import BlockManager
from parrot.engines.builtin.context import Context, Work
from parrot.engines.builtin.detokenizer import TextStream
from parrot.engines.builtin.outputs import process_token
from parrot.engines.builtin.step_budget import StepBudget
from parrot.engines.protocol import FillResult
from parrot.errors import (InvalidRequestError, OutOfKVCacheError, PromptTooLongError,
                           UnknownContextError)


@dataclass
class ScheduledChunk:
    work: Work
    start: int                  # positions [start, end) of the context are computed
    end: int
    token_ids: list[int]        # the context's tokens at those positions
    block_table: list[int]      # snapshot covering [0, end)
    sample: bool                # sample the next token from the last position


@dataclass
class Batch:
    chunks: list[ScheduledChunk]            # decodes (one token each) first, then prefills
    copies: list[tuple[int, int]]           # fork copies to run before the forward pass
    decode_rows: int = 0                    # how many of `chunks` are decodes (the first)
    decode_kv_tokens: int = 0               # the context tokens those decodes attend

    @property
    def prefill_tokens(self) -> int:
        """Tokens of the prefill chunks (the chunks after the decodes)."""
        return sum(c.end - c.start for c in self.chunks[self.decode_rows:])

    @property
    def is_mixed(self) -> bool:
        """Decode rows and prefill chunks in one step (what the step budget prices)."""
        return 0 < self.decode_rows < len(self.chunks)

    @property
    def num_tokens(self) -> int:
        return sum(c.end - c.start for c in self.chunks)


def _by_priority(work: Work) -> int:
    return work.priority


class BatchScheduler:
    def __init__(self, blocks: BlockManager, *, max_batch_tokens: int, max_num_seqs: int,
                 max_context_len: int, eos_token_ids: tuple[int, ...],
                 reserve_next_block: bool = False, step_budget: StepBudget | None = None,
                 max_mixed_decode_rows: int | None = None) -> None:
        self.blocks = blocks
        # With decode launch-ahead (lookahead.py): a decode chunk also gets the block of the
        # context's next position when one is free, so the predicted step can cross into it.
        self.reserve_next_block = reserve_next_block
        self.max_batch_tokens = max_batch_tokens
        # How much prefill joins the decodes of a step (step_budget.py); the engine prices it
        # with its speed profile once measured (`step_budget.with_profile`).
        self.step_budget = step_budget or StepBudget(max_batch_tokens)
        self.max_num_seqs = max_num_seqs
        # Past this many decode rows a step carries no prefill: the decodes run alone (a
        # decode graph) and the prefill they would have carried runs in the next step, alone
        # (None: always mixed). A mixed step of many rows costs more than the two apart
        # (docs/ENGINE.md, "Mixed steps": 240 rows, 26.1 ms mixed against 11.6 + 7.5).
        self.max_mixed_decode_rows = max_mixed_decode_rows
        self._prefill_turn = False      # the decodes ran alone last step: prefill's turn
        self.max_context_len = max_context_len
        self.eos_token_ids = frozenset(eos_token_ids)
        # admitted and unfinished, by priority, then first come first served (kept so on
        # insertion: every step walks it in this order)
        self.works: list[Work] = []
        self.contexts: dict[str, Context] = {}  # live (not freed) contexts by id
        self._freed: list[Context] = []          # freed, blocks not yet released
        self._iteration = 0

    # -- admission and freeing (called by the engine, on the loop) --------------------------

    def add(self, work: Work) -> None:
        work.context.owner = work
        bisect.insort(self.works, work, key=_by_priority)   # after those of equal priority

    def free(self, ctx: Context, *, defer: bool) -> Work | None:
        """Forget ctx now; release its blocks now, or at the next iteration when a step that
        may use them is in flight. The work in progress on it fails: that work, if any."""
        del self.contexts[ctx.context_id]
        ctx.is_freed = True
        if ctx.fork_from is not None:  # never started: it no longer pins its parent's blocks
            ctx.fork_from.num_waiting_children -= 1
            ctx.fork_from = None
        failed = ctx.owner
        if failed is not None and not failed.fail(UnknownContextError(
                f"context {ctx.context_id!r} was freed while a request was using it")):
            failed = None
        self._freed.append(ctx)
        if not defer:
            self._release_freed()
        return failed

    def check_invariants(self) -> None:
        """Allocator invariants, and every block's reference count equals the number of block
        tables (live or freed-but-pinned contexts) and pending fork copies holding it."""
        alloc = self.blocks.allocator
        alloc.check_invariants()
        holders = [0] * alloc.num_blocks_total
        for ctx in list(self.contexts.values()) + self._freed:
            for b in ctx.block_table:
                holders[b] += 1
        for src in self.blocks.pending_copy_sources():
            holders[src] += 1
        for b, count in enumerate(holders):
            assert alloc.ref_count(b) == count, (
                f"block {b}: ref count {alloc.ref_count(b)}, held {count} times")

    @property
    def num_running(self) -> int:
        return sum(1 for w in self.works if w.is_started)

    @property
    def num_waiting(self) -> int:
        return sum(1 for w in self.works if not w.is_started)

    # -- one iteration ------------------------------------------------------------------------

    @property
    def has_prefill_work(self) -> bool:
        """Work that the next iteration could start or prefill: a Fill, or a Generate whose
        context is not computed up to its pending token, unless it is a fork waiting for a
        busy parent, or the decodes take every seat (max_num_seqs)."""
        return self.prefill_waits_after(None)

    def prefill_waits_after(self, batch: Batch | None) -> bool:
        """`has_prefill_work` once `batch` has run: a Fill whose last chunk the batch carries
        is done by then (it never decodes), so it holds nothing back (lookahead.py: the
        decode step after a mixed step that ends a Fill can be launched ahead)."""
        ending = () if batch is None else {
            id(c.work) for c in batch.chunks[batch.decode_rows:]
            if c.work.is_fill and c.end >= c.work.context.target_computed}
        decoding, could_join = 0, False
        for w in self.works:     # one pass: the engine asks after every schedule
            if w.state.is_finished or id(w) in ending:
                continue
            if w.is_decoding:
                decoding += 1
            elif not could_join:
                parent = w.context.fork_from
                could_join = w.is_started or parent is None or not parent.is_busy
        return could_join and decoding < self.max_num_seqs

    def schedule(self, *, decode_only: bool = False) -> Batch | None:
        """The next step's batch (None: nothing to run). decode_only: only the decodes, when
        there are any (nothing is started, no prefill chunk, no fork copy)."""
        self._iteration += 1
        self._release_freed()
        self.works = [w for w in self.works if not w.state.is_finished]
        if decode_only and any(w.is_decoding for w in self.works):
            chunks, rows, kv = self._pick_chunks(decodes_only=True)
            if chunks:
                return Batch(chunks, [], rows, kv)
        for work in list(self.works):
            if not work.is_started:
                self._start(work)
        self.works = [w for w in self.works if not w.state.is_finished]
        chunks, rows, kv = self._pick_chunks()
        copies = self.blocks.take_copies()
        if not chunks:
            stuck = [w for w in self.works if w.is_started]
            if stuck and not copies:
                # Nothing runs and nothing will free blocks: the oldest work can never fit.
                stuck[0].fail(OutOfKVCacheError(
                    f"context {stuck[0].context.context_id!r} needs more KV blocks than the "
                    f"engine can free ({self.blocks.allocator.num_blocks_total} in total)"))
                self.works.remove(stuck[0])
            if not copies:
                return None
        return Batch(chunks, copies, rows, kv)

    def _release_freed(self) -> None:
        still: list[Context] = []
        for ctx in self._freed:
            if ctx.num_waiting_children:
                still.append(ctx)   # a waiting fork still needs its blocks
            else:
                self.blocks.release(ctx)
        self._freed = still

    def _start(self, work: Work) -> None:
        """Fork from the parent once it is idle and append the fill's tokens."""
        ctx = work.context
        parent = ctx.fork_from
        if parent is not None:
            if parent.is_busy:
                return
            ctx.token_ids = list(parent.token_ids)
            ctx.block_digests = list(parent.block_digests)   # the same leading tokens
            self.blocks.fork(parent, ctx)
            ctx.fork_from = None
            parent.num_waiting_children -= 1
            if parent.is_freed:
                self._release_freed()
        work.is_started = True
        ctx.last_used = self._iteration
        new_len = len(ctx.token_ids) + len(work.new_tokens)
        if new_len > self.max_context_len:  # the parent grew while this fork waited
            work.fail(PromptTooLongError(
                f"context {ctx.context_id!r} would hold {new_len} tokens; "
                f"max_context_len is {self.max_context_len}"))
            return
        ctx.token_ids.extend(work.new_tokens)
        if work.reports_prompt_len:
            work.prompt_len = len(ctx.token_ids)
        self.blocks.reuse_cached(ctx)   # prefix caching: a new context's cached prefix
        if work.is_fill:
            if ctx.num_computed >= ctx.target_computed:
                self._complete_fill(work)
        elif not ctx.token_ids:
            work.fail(InvalidRequestError(
                f"generate on context {ctx.context_id!r}, which holds no tokens"))
        elif len(ctx.token_ids) >= self.max_context_len:
            work.fail(PromptTooLongError(
                f"context {ctx.context_id!r} already fills max_context_len "
                f"{self.max_context_len}; nothing can be generated"))
        else:
            work.stream = TextStream(work.tokenizer, ctx.token_ids, work.sampling.stop)

    def _pick_chunks(self, *, decodes_only: bool = False
                     ) -> tuple[list[ScheduledChunk], int, int]:
        """Decodes first (one token each, within max_batch_tokens and max_num_seqs), then
        prefill chunks within what the step budget leaves beside those decodes: (the chunks,
        how many are decodes, the context tokens those attend). Past max_mixed_decode_rows
        the two take turns instead: the decodes alone, then their prefill alone."""
        chunks: list[ScheduledChunk] = []
        protected: set[int] = set()
        started: list[Work] = []
        decoding: list[Work] = []
        waiting: list[Work] = []
        for w in self.works:   # one pass: every row of every step comes through here
            if w.is_started:
                started.append(w)
                (decoding if w.is_decoding else waiting).append(w)
        apart = (not decodes_only and self.max_mixed_decode_rows is not None and waiting
                 and min(len(decoding), self.max_num_seqs) > self.max_mixed_decode_rows)
        if apart and self._prefill_turn:
            # The prefill the decodes of the step before would have carried, alone: priced
            # as beside them (the streams wait for both steps), seats as they leave.
            self._prefill_turn = False
            rows = min(len(decoding), self.max_num_seqs)
            kv = sum(len(w.context.token_ids) for w in decoding[:rows])
            budget = min(self.max_batch_tokens - rows, self.step_budget.prefill_tokens(rows, kv))
            self._take(waiting, budget, self.max_num_seqs - rows, chunks, protected)
            if chunks:
                return chunks, 0, 0
        seats = self._take(decoding, self.max_batch_tokens, self.max_num_seqs, chunks,
                           protected, decodes=True)
        rows, kv = len(chunks), sum(c.end for c in chunks)
        if not decodes_only:
            self._prefill_turn = bool(apart)   # the decodes alone now: the prefill next step
        if not apart and not decodes_only:
            budget = min(self.max_batch_tokens - rows, self.step_budget.prefill_tokens(rows, kv))
            # listed again, not `waiting`: a decode preempted by the decode pass waits now
            self._take([w for w in started if not w.is_decoding], budget, seats, chunks,
                       protected)
        return chunks, rows, kv

    def _take(self, works: list[Work], budget: int, seats: int, chunks: list[ScheduledChunk],
              protected: set[int], *, decodes: bool = False) -> int:
        """Append each work's next chunk to `chunks` while `budget` tokens and `seats` last
        (a chunk the budget cuts short continues in a later step); the seats left.

        One chunk per context a step: a decode whose blocks an earlier row of this step took
        (preempted before its turn) is no decode any more and waits for the prefill pass,
        which must not give a context with a chunk a second one (two chunks of one context
        would compute its positions twice and sample twice from one)."""
        for work in works:
            if budget == 0 or seats == 0:
                break
            ctx = work.context
            if id(ctx) in protected or (decodes and not work.is_decoding):
                continue
            if (self.blocks.prefix_caching and not ctx.block_table
                    and self.blocks.reuse_cached(ctx) and work.is_fill
                    and ctx.num_computed >= ctx.target_computed):
                self._complete_fill(work)   # evicted, and found whole in the prefix cache
                continue
            start = ctx.num_computed
            end = min(work.chunk_end(), start + budget)
            if end <= start:
                continue
            end = self._fit(ctx, start, end, protected)
            if end <= start:
                continue
            sample = not work.is_fill and end == len(ctx.token_ids)
            if (self.reserve_next_block and sample and end - start == 1
                    and end < self.max_context_len
                    and end + 1 > len(ctx.block_table) * self.blocks.block_size
                    and self.blocks.can_grow(ctx, end + 1)):
                self.blocks.grow(ctx, end + 1)   # never evicts for it
            chunks.append(ScheduledChunk(work, start, end, ctx.token_ids[start:end],
                                         list(ctx.block_table), sample))
            protected.add(id(ctx))
            ctx.last_used = self._iteration
            budget -= end - start
            seats -= 1
        return seats

    def _fit(self, ctx: Context, start: int, end: int, protected: set[int]) -> int:
        """Grow ctx's blocks to cover [0, end), evicting if needed; returns the end that fits."""
        if end <= len(ctx.block_table) * self.blocks.block_size:
            return end                      # covered already: most decode rows
        if self.blocks.can_grow(ctx, end):  # the common case: no eviction, no set copy
            self.blocks.grow(ctx, end)
            return end
        protected = protected | {id(ctx)}
        while not self.blocks.can_grow(ctx, end):
            if self._evict_one(protected):
                continue
            # Take what fits in the blocks we have plus the free ones.
            bs = self.blocks.block_size
            capacity = (len(ctx.block_table) + self.blocks.allocator.num_free_blocks) * bs
            end = min(end, capacity)
            break
        if end > start:
            self.blocks.grow(ctx, end)
        return end

    def _evict_one(self, protected: set[int]) -> bool:
        """Release the blocks of one idle context (LRU), else of the newest running work."""
        alloc = self.blocks.allocator
        idle = [c for c in self.contexts.values()
                if not c.is_busy and c.block_table and id(c) not in protected]
        if idle:
            owning = [c for c in idle if any(alloc.ref_count(b) == 1 for b in c.block_table)]
            victim = min(owning or idle, key=lambda c: c.last_used)
            self.blocks.release(victim)
            return True
        for work in reversed(self.works):
            ctx = work.context
            if work.is_started and ctx.block_table and id(ctx) not in protected:
                self.blocks.release(ctx)
                return True
        return False

    # -- applying a step's result -----------------------------------------------------------

    def postprocess(self, batch: Batch, sampled: list[int | None]) -> None:
        """sampled[i] is the token drawn for batch.chunks[i] (None where not sampling)."""
        self.blocks.copies_done(batch.copies)
        for chunk, token in zip(batch.chunks, sampled):
            work, ctx = chunk.work, chunk.work.context
            if ctx.is_freed:
                continue
            live = not work.state.is_finished
            if chunk.sample and token is not None and live:
                work.emit(process_token(work, token, self.eos_token_ids, self.max_context_len))
            ctx.num_computed = min(chunk.end, ctx.target_computed)
            if self.blocks.prefix_caching:
                self.blocks.register_computed(ctx)
            if live and work.is_fill and ctx.num_computed >= ctx.target_computed:
                self._complete_fill(work)

    def fail_batch(self, batch: Batch, exc: BaseException) -> None:
        """A step raised: its work fails, its contexts keep only what was computed before."""
        self.blocks.copies_done(batch.copies)
        for chunk in batch.chunks:
            chunk.work.fail(exc)

    def _complete_fill(self, work: Work) -> None:
        ctx = work.context
        work.complete_fill(FillResult(ctx.context_id, len(work.new_tokens), len(ctx.token_ids)))
