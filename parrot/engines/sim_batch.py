"""The simulated engine's batching loop (simulated.py is the protocol in front of it): the
waiting and running requests, admission into the KV space, and the iterations.

Each iteration decodes one token for every running Generate and prefills a chunk of the running
Fills (and Generates' prompts) under a token budget (`max_num_batched_tokens`, decodes count one
token each), then sleeps for the time the latency model gives. Requests are admitted, and
prefilled, by priority (the protocol's, lower first), then first come, first served; a request
reserves every block it will need when admitted, so admitted requests never stall; one that
does not fit waits while requests run, and when none runs the KV of idle contexts is evicted
(cached prefixes first). The engine's module docstring says what each of these models.
"""

from __future__ import annotations

import asyncio
import logging

from parrot.engines.aborted import AbortedGenerates
from parrot.engines.latency_model import SimulatedEngineConfig
from parrot.engines.sim_blocks import KVSpace, SimContext
from parrot.engines.sim_pacing import StepPacer
from parrot.engines.sim_prefix_cache import CachedPrefixes
from parrot.engines.sim_requests import SimRequest, SimRequestKind, enqueue
from parrot.errors import (ContextExistsError, EngineError, EngineUnavailableError,
                           InvalidRequestError, OutOfKVCacheError, PromptTooLongError,
                           UnknownContextError)

log = logging.getLogger(__name__)


class SimBatch:
    """One simulated engine's requests and its batching task. The engine submits requests
    (`submit`), aborts them (`abort`) and reads the queues (`waiting`, `running`, `claimed`);
    the task admits, plans and applies iterations and signals each request's collector."""

    def __init__(self, name: str, config: SimulatedEngineConfig, kv: KVSpace,
                 cache: CachedPrefixes | None) -> None:
        self.name = name
        self.config = config
        self._kv = kv
        self._contexts = kv.contexts  # by id (the same dict)
        self._cache = cache
        self.claimed: set[str] = set()  # context ids with a queued or running request
        self.waiting: list[SimRequest] = []
        self.running: list[SimRequest] = []
        self._idle: asyncio.Future[None] | None = None  # what an idle batching loop awaits
        self._task: asyncio.Task[None] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None  # the batching loop's, once started
        self.closed = False
        self._num_steps = self._prefill_tokens = self._decode_tokens = 0
        self._generated_tokens = 0   # decode_tokens and each prompted Generate's first
        self._step_s = 0.0
        self._pacer = StepPacer()  # real-clock timer lateness made up (sim_pacing.py)
        self.aborted = AbortedGenerates()  # decode work aborts threw away (aborted.py)

    def counters(self) -> dict[str, int]:
        """The loop's engine counters (EngineStats.counters; counters.py names them)."""
        step_ms = round(self._step_s * 1000)
        return {"num_steps": self._num_steps, "step_ms": step_ms, "loop_ms": step_ms,
                "prefill_tokens": self._prefill_tokens, "decode_tokens": self._decode_tokens,
                "generated_tokens": self._generated_tokens, **self.aborted.counters()}

    async def close(self, exc: BaseException) -> None:
        """Stop the loop; every queued or running request fails with `exc`."""
        self.closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self.fail_all(exc)

    # ---- the iterations --------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()   # (self.loop)
        latency = self.config.latency
        try:
            while True:
                if self.waiting:
                    self._admit()
                if not self.running:
                    self._idle = loop.create_future()   # until wake()
                    await self._idle
                    self._pacer.idle(loop.time())
                    continue
                decodes, prefills, prefill_tokens = self._plan()
                # zero latency: every iteration takes no time, whatever its KV reads
                seconds = 0.0 if latency.zero_latency else latency.iteration_seconds(
                    len(decodes), self._decode_kv_tokens(decodes), prefill_tokens)
                await asyncio.sleep(self._pacer.sleep_for(seconds, loop.time()))
                self._apply(decodes, prefills)
                # the counters a real engine reports (EngineStats.counters): model time, no
                # host time
                self._num_steps += 1
                self._step_s += seconds
                self._prefill_tokens += prefill_tokens
                self._decode_tokens += len(decodes)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug: make sure no waiter hangs
            log.exception("simulated engine %s: batching loop failed", self.name)
            self.closed = True
            self.fail_all(EngineError(f"engine {self.name!r} failed: {exc!r}"))

    def _plan(self) -> tuple[list[SimRequest], list[tuple[SimRequest, int]], int]:
        """(the decodes, the prefill chunks, their tokens) of the next iteration."""
        decodes: list[SimRequest] = []
        prefilling: list[SimRequest] = []
        for req in self.running:   # by priority, then admission order (see _admit)
            (prefilling if req.is_prefilling else decodes).append(req)
        budget = self.config.max_num_batched_tokens - len(decodes)
        prefills = []
        prefill_tokens = 0
        for req in prefilling:
            if budget <= 0:
                break
            left = req.num_recompute + (req.num_tokens - req.num_done if req.is_fill
                                        else req.num_prompt)
            chunk = min(budget, left)
            prefills.append((req, chunk))
            budget -= chunk
            prefill_tokens += chunk
        return decodes, prefills, prefill_tokens

    def _decode_kv_tokens(self, decodes: list[SimRequest]) -> int:
        """The KV the decodes read: a shared prefix once with `shared_prefix_decode`."""
        contexts = [r.held_context for r in decodes]
        return (self._kv.unique_tokens(contexts) if self.config.shared_prefix_decode
                else sum(ctx.length for ctx in contexts))

    def _apply(self, decodes: list[SimRequest], prefills: list[tuple[SimRequest, int]]) -> None:
        for req in decodes:
            if req.is_finished or req.error is not None or req.context is None:
                continue  # aborted during the iteration
            self._decode_token(req, req.context)
        for req, chunk in prefills:
            if req.is_finished or req.error is not None or req.context is None:
                continue
            recomputed = min(chunk, req.num_recompute)
            req.num_recompute -= recomputed
            if req.is_fill:
                req.context.length += chunk - recomputed
                req.num_done += chunk - recomputed
                if req.num_done == req.num_tokens and req.num_recompute == 0:
                    self._finish(req)
            elif req.num_prompt > 0 and chunk > recomputed:
                prompted = min(chunk - recomputed, req.num_prompt)
                req.context.length += prompted
                req.num_prompt -= prompted
                if req.num_prompt == 0 and req.num_recompute == 0:
                    # the step that computed the prompt's last token samples the first one
                    self._decode_token(req, req.context)

    def _decode_token(self, req: SimRequest, ctx: SimContext) -> None:
        """A Generate's next token, at the end of its context; it finishes or is signalled."""
        assert req.tokens is not None, "a Generate has its tokens"
        self._generated_tokens += 1
        req.new_token_ids.append(req.tokens.token(ctx.length))
        ctx.length += 1
        req.num_done += 1
        if req.num_done == 1:
            req.first_token_at = self._now()
        if req.num_done == req.num_tokens:
            self._finish(req)   # (which signals the token to the collector)
        elif req.eos_mean_tokens is not None and req.ends_turn(ctx.length,
                                                               req.eos_mean_tokens):
            req.finish_reason = "eos"
            self._finish(req)
            # the blocks reserved for the tokens it will not generate go back
            self._kv.cut_back(ctx, ctx.length, is_computed=True)
        elif not req.whole or (req.num_done == 1 and req.signal_first_token):
            req.signal()

    def _now(self) -> float:
        assert self.loop is not None, "the batching loop runs on it"
        return self.loop.time()

    def _admit(self) -> None:
        """Move waiting requests into the running batch, by priority, then first come first
        served for memory.
        The first one that does not fit waits for the running requests to finish (they hold all
        they need, so they always do); when none runs, it evicts idle KV to fit."""
        for req in list(self.waiting):
            if len(self.running) >= self.config.max_num_seqs:
                return
            ctx = self._contexts.get(req.context_id)
            parent = None
            if ctx is None and req.parent_id is not None:
                if req.parent_id in self.claimed:
                    continue  # the parent is still being filled: fork once it is done
                parent = self._contexts.get(req.parent_id)
                if parent is None:
                    self.abort(req, UnknownContextError(
                        f"unknown parent context {req.parent_id!r}"))
                    continue
            base_len = ctx.length if ctx else parent.length if parent else 0
            try:
                self._check_fits(req, base_len)
            except EngineError as exc:
                self.abort(req, exc)
                continue
            # With nothing running, nothing else would ever return blocks: evict idle KV.
            reservation = None
            if self._cache is not None:
                # Cached contexts never hold a request back: dropped, least recently used
                # first, before anything else is evicted.
                reservation = self._kv.reserve(req.context_id, parent, req.num_new_tokens,
                                               may_evict=False)
                while reservation is None and self._cache.evict_oldest():
                    reservation = self._kv.reserve(req.context_id, parent, req.num_new_tokens,
                                                   may_evict=False)
            if reservation is None:
                reservation = self._kv.reserve(req.context_id, parent, req.num_new_tokens,
                                               may_evict=not self.running)
            if reservation is None and self.running:
                return  # they hold every block they need: wait for them to finish
            if reservation is None:  # cannot happen after _check_fits; never wait forever
                self.abort(req, OutOfKVCacheError(
                    f"context {req.context_id!r} needs more KV blocks than can be freed"))
                continue
            req.context, req.created_context = reservation.context, reservation.created
            req.start_len, req.num_recompute = base_len, reservation.num_recompute
            self.waiting.remove(req)
            enqueue(self.running, req)
            if req.num_new_tokens == 0:
                self._finish(req)

    # ---- requests in and out ---------------------------------------------------------------

    def submit(self, req: SimRequest) -> SimRequest:
        if self.closed:
            raise EngineUnavailableError(f"engine {self.name!r} is closed")
        if self._task is None:
            self.ensure_started()
        if req.context_id in self.claimed:
            raise ContextExistsError(f"context {req.context_id!r} is busy with another request")
        ctx = self._contexts.get(req.context_id)
        if ctx is None and req.parent_id is not None:
            if req.parent_id == req.context_id:
                raise InvalidRequestError("a context cannot be its own parent")
            if req.parent_id not in self._contexts and req.parent_id not in self.claimed:
                raise UnknownContextError(f"unknown parent context {req.parent_id!r}")
        parent = self._contexts.get(req.parent_id) if req.parent_id is not None else None
        self._check_fits(req, ctx.length if ctx else parent.length if parent else 0)
        self.claimed.add(req.context_id)
        enqueue(self.waiting, req)
        self.wake()
        return req

    def _check_fits(self, req: SimRequest, base_len: int) -> None:
        c = self.config
        final_len = base_len + req.num_new_tokens
        if final_len > c.max_context_len:
            raise PromptTooLongError(
                f"context {req.context_id!r} would hold {final_len} tokens ({base_len} + "
                f"{req.num_new_tokens} to {req.kind.value}); max_context_len is "
                f"{c.max_context_len}")
        if -(-final_len // c.block_size) > c.num_blocks:
            raise OutOfKVCacheError(
                f"context {req.context_id!r} needs {final_len} tokens of KV cache; the engine "
                f"has only {c.num_blocks} blocks of {c.block_size}")

    def _finish(self, req: SimRequest) -> None:
        assert req.context is not None
        req.is_finished = True
        req.final_len = req.context.length
        self.running.remove(req)
        self.claimed.discard(req.context_id)
        req.signal()

    def abort(self, req: SimRequest, exc: BaseException | None = None, *,
               by_client: bool = False) -> None:
        """Take a request out of the engine. An aborted Fill leaves no trace (a context it
        created is dropped, one it appended to is cut back); an aborted Generate's context keeps
        the tokens already streamed. `by_client`: aborted by a client (its caller went away, or
        its context was freed), not failed by the engine; a Generate's decoded tokens then
        count as thrown away (once: a request already finished or failed is left alone)."""
        if req.is_finished or req.error is not None:
            return
        if by_client and req.kind is SimRequestKind.GENERATE:
            self.aborted.add(req.num_done)
        req.error = exc or EngineError("request aborted")
        if req in self.waiting:
            self.waiting.remove(req)
        if req in self.running:
            self.running.remove(req)
            ctx = req.context
            if ctx is not None and self._contexts.get(ctx.context_id) is ctx:
                if req.kind is SimRequestKind.FILL and req.created_context:
                    self._kv.free(ctx.context_id)
                else:
                    length = req.start_len if req.kind is SimRequestKind.FILL else ctx.length
                    self._kv.cut_back(ctx, length, is_computed=req.num_recompute == 0)
        self.claimed.discard(req.context_id)
        req.signal()
        self.wake()

    def fail_all(self, exc: BaseException) -> None:
        for req in self.waiting + self.running:
            self.abort(req, exc)

    def wake(self) -> None:
        """Wake the batching loop if it waits for work (a wake while it runs changes nothing:
        it looks for work before it waits again)."""
        idle = self._idle
        if idle is not None and not idle.done():
            idle.set_result(None)

    def ensure_started(self) -> None:
        if self.closed:
            raise EngineUnavailableError(f"engine {self.name!r} is closed")
        if self._task is None:
            self.loop = asyncio.get_running_loop()
            self._task = self.loop.create_task(
                self._run(), name=f"simulated-engine-{self.name}")
