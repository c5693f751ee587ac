"""A simulated engine: real context/KV-block bookkeeping, a latency model instead of a model.

It emulates continuous batching: one batching task per engine runs iterations; each iteration
decodes one token for every running Generate and prefills a chunk of the running Fills under a
token budget (`max_num_batched_tokens`, decodes count one token each), then sleeps for the time
the latency model gives (see latency_model.py). All timing goes through the running asyncio loop
(`asyncio.sleep`, events), so the engine runs unchanged on a virtual-clock loop. On a real
clock (live mode) a timer wakes late (measured on the 2-core VM: 0.75 ms per 4.5-ms sleep,
1.4 s over a 1,675-step run), so back-to-back iterations are paced from where the previous
one ended on paper, not from when its timer fired: the lateness never adds up.

Tokens: the simulated tokenizer counts ceil(len(text) / 4) tokens for a text (the manager
estimates the same way). A Generate produces `max_tokens` tokens (stop strings are not
honoured) of deterministic filler: 4-character word-like pieces chosen by a hash of
(context_id, seed, position in the context) — fewer where the model stops on its own: without
`ignore_eos`, after the N tokens an `[[eos@N]]` marker in the context's text asks for
(sim_eos.py; the last filled into the context, or into the one it forked, used once). With
`eos_mean_tokens` set (configs/sim.yaml sets it), a Generate without `ignore_eos` may also end
early with finish_reason "eos", as a model ends its turn: each token is the last with
probability 1 / eos_mean_tokens (a hash of the same triple), a geometric length of that mean,
so a chat without max_tokens ends by itself.

A Generate that carries a prompt prefills it first, as a Fill of it would, and the step that
prefills its last token also produces the first generated one (a Fill and then a Generate take
a step more: the Generate's first token is a decode step of its own).

Memory: a request reserves every block it will need when it is admitted (fill: its tokens;
generate: its prompt and the tokens it will produce), so admitted requests never stall. Requests are
admitted, and prefilled, by priority (the protocol's, lower first), then first come, first
served; one that does not fit waits while requests run (they always finish). When none
runs, nothing else would ever return blocks, so the KV of idle contexts is evicted, least
recently used first: preemption by recompute, as the builtin engine does. Such a context keeps
its tokens, and the next request that uses it (or forks it) first prefills them again. So an
overloaded engine slows down and never wedges, and a run that never fills the cache is timed
exactly as without eviction. A request that could never fit (more blocks than the engine has)
fails with OutOfKVCacheError. A fork shares the parent's full blocks (reference counted) and
copies its partial last block; the inherited tokens are not prefilled again. With
`shared_prefix_decode` a decode batch reads a shared prefix once (the shared-prefix kernel);
otherwise once per sequence. With `prefix_caching` (sim_prefix_cache.py) a context filled
from scratch forks the cached leading blocks of its text, as vLLM's APC does.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator

from parrot.engines.aborted import AbortedGenerates
from parrot.engines.counters import engine_counters
# the configuration lives with the latency model; re-exported here as part of this module's API
from parrot.engines.latency_model import LatencyModel, SimulatedEngineConfig, load_profile
from parrot.engines.protocol import (Engine, EngineInfo, EngineStats, FillRequest, FillResult,
                                     GenerateChunk, GenerateRequest, ServingLimits)
from parrot.engines.tpot import TpotMeter
from parrot.engines.sim_values import sample_value
from parrot.engines.sim_blocks import (KVSpace, SimContext, count_tokens, detokenize,
                                       filler_token)
from parrot.engines.sim_eos import HiddenStops
from parrot.engines.sim_requests import SimRequest, SimRequestKind, enqueue
from parrot.engines.sim_pacing import StepPacer
from parrot.engines.sim_prefix_cache import CachedPrefixes
from parrot.errors import (ContextExistsError, EngineConfigError, EngineError,
                           EngineUnavailableError, InvalidRequestError, OutOfKVCacheError,
                           PromptTooLongError, UnknownContextError)

__all__ = ["SimulatedEngine", "SimulatedEngineConfig", "LatencyModel", "EngineConfigError",
           "load_profile", "count_tokens", "detokenize", "filler_token"]

log = logging.getLogger(__name__)

class SimulatedEngine(Engine):
    def __init__(self, name: str, config: SimulatedEngineConfig | None = None) -> None:
        self.name = name
        self.config = config or SimulatedEngineConfig()
        self._kv = KVSpace(self.config.num_blocks, self.config.block_size)
        self._contexts = self._kv.contexts  # by id (the same dict)
        self._claimed: set[str] = set()  # context ids with a queued or running request
        self._waiting: list[SimRequest] = []
        self._running: list[SimRequest] = []
        self._idle: asyncio.Future[None] | None = None  # what an idle batching loop awaits
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the batching loop's, once started
        self._closed = False
        self._num_steps = self._prefill_tokens = self._decode_tokens = 0
        self._generated_tokens = 0   # decode_tokens and each prompted Generate's first
        self._step_s = 0.0
        self._pacer = StepPacer()  # real-clock timer lateness made up (sim_pacing.py)
        self._tpot = TpotMeter()  # time per output token as Generates are handed over
        self._aborted = AbortedGenerates()  # decode work aborts threw away (aborted.py)
        # where each context's next Generate stops on its own (an [[eos@N]] marker filled)
        self._stops = HiddenStops()
        # With prefix caching: finished contexts cached by content (sim_prefix_cache.py)
        self._cache = CachedPrefixes(self._kv) if self.config.prefix_caching else None

    # ---- Engine protocol -------------------------------------------------------------------

    async def start(self) -> None:
        self._ensure_started()

    async def close(self) -> None:
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self._fail_all(EngineUnavailableError(f"engine {self.name!r} is closed"))

    async def info(self) -> EngineInfo:
        c = self.config
        return EngineInfo(self.name, "simulated", c.model, c.max_context_len, c.block_size,
                          c.num_blocks, speed_profile=c.latency.speed_profile(),
                          serving=ServingLimits(
                              max_num_seqs=c.max_num_seqs,
                              max_batch_tokens=c.max_num_batched_tokens,
                              kv_cache_tokens=c.num_blocks * c.block_size,
                              step_token_budget=f"{c.max_num_batched_tokens} tokens per step "
                                                "(decodes first)"),
                          takes_prompt_in_generate=c.prompt_in_generate)

    async def fill(self, request: FillRequest) -> FillResult:
        n, parent_id, cached = self._prompt(request)
        try:
            req = self._submit(SimRequest(SimRequestKind.FILL, request.context_id, parent_id,
                                          n - cached, priority=request.priority))
        except BaseException:
            self._drop_cached_prefix(parent_id, request.parent_context_id)
            raise
        self._stops.filled(request.context_id, request.parent_context_id, request.text)
        try:
            if not req.ready:
                assert self._loop is not None, "a submitted request started the engine"
                await req.next_signal(self._loop)
        except asyncio.CancelledError:
            self._abort(req, by_client=True)
            raise
        finally:
            if cached:   # (only a cached prefix is forked from a context of the engine's own)
                self._drop_cached_prefix(parent_id, request.parent_context_id)
        if req.error is not None:
            raise req.error
        if self._cache is not None:
            self._cache.index(request.context_id, request.parent_context_id,
                              request.text or "", req.final_len)
        return FillResult(request.context_id, n, req.final_len)

    def _prompt(self, request: FillRequest | GenerateRequest) -> tuple[int, str | None, int]:
        """A Fill's tokens or a Generate's prompt: (its tokens, the parent its context forks,
        of its tokens those a cached prefix gives). With prefix caching a new root context
        forks the cached leading blocks of its text, as vLLM's APC; the forked context is
        dropped once the request has forked it (`_drop_cached_prefix`)."""
        n = (len(request.token_ids) if request.token_ids is not None
             else count_tokens(request.text or ""))
        if (self._cache is not None and request.text and request.parent_context_id is None
                and request.context_id not in self._contexts):
            return (n, *self._cache.fork(request.text, n))
        return n, request.parent_context_id, 0

    def _drop_cached_prefix(self, parent_id: str | None, asked: str | None) -> None:
        """Free the cached-prefix context a fill forked (its blocks stay with the fork)."""
        if parent_id is not None and parent_id != asked:
            self._kv.free(parent_id)

    async def reset_prefix_cache(self) -> int:
        return 0 if self._cache is None else self._cache.reset()

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        sampling = request.sampling
        # A prompt in the request: prefilled first, as a Fill of it would be (a cached prefix
        # of it forked), its last chunk's step producing the first token.
        num_prompt, parent_id, cached = 0, request.parent_context_id, 0
        if request.has_prompt:
            num_prompt, parent_id, cached = self._prompt(request)
            self._stops.filled(request.context_id, request.parent_context_id, request.text)
        stop = self._stops.take(request.context_id, request.parent_context_id)
        num_tokens = (sampling.max_tokens if sampling.ignore_eos or stop is None
                      else min(sampling.max_tokens, stop))
        finish_reason = "length" if num_tokens == sampling.max_tokens else "stop"
        # A constrained output's text is a value sampled from its constraint (sim_values.py),
        # delivered whole with the last token (the timing stays that of max_tokens tokens).
        value = None if sampling.constraint is None else sample_value(
            sampling.constraint, random.Random(f"{request.context_id}|{sampling.seed}"))
        held: list[int] = []   # a constrained output's token ids, sent with its value
        try:
            req = self._submit(SimRequest(SimRequestKind.GENERATE, request.context_id,
                                          parent_id, num_tokens, sampling.seed,
                                          priority=request.priority,
                                          eos_mean_tokens=None if sampling.ignore_eos
                                          else self.config.eos_mean_tokens,
                                          num_prompt=num_prompt - cached))
        except BaseException:
            self._drop_cached_prefix(parent_id, request.parent_context_id)
            raise
        timer = self._tpot.timer()
        generated: list[str] = []
        # the first chunk says how long the context is after the prompt, known at its first
        # signal (its first token: the prompt is prefilled)
        prompt_len: int | None = None
        awaiting_prompt = request.has_prompt
        loop = self._loop
        assert loop is not None, "a submitted request started the engine"
        try:
            while True:
                if not req.ready:
                    await req.next_signal(loop)
                req.ready = False
                if req.error is not None:
                    raise req.error
                if awaiting_prompt:
                    awaiting_prompt = False
                    prompt_len = req.start_len + num_prompt - cached
                    self._drop_cached_prefix(parent_id, request.parent_context_id)
                    if self._cache is not None:
                        # (as after a Fill: later requests find the prompt while this decodes)
                        self._cache.index(request.context_id, request.parent_context_id,
                                          request.text or "", prompt_len)
                token_ids, req.new_token_ids = req.new_token_ids, []
                if value is not None:
                    held.extend(token_ids)
                    if req.is_finished:
                        chunk = GenerateChunk(value, tuple(held), "eos", prompt_len)
                        timer.observe(chunk)
                        yield chunk
                        return
                    continue
                if req.is_finished:
                    chunk = GenerateChunk(detokenize(token_ids), tuple(token_ids),
                                          "eos" if req.finish_reason == "eos"
                                          else finish_reason, prompt_len)
                    if self._cache is not None:
                        self._cache.index(request.context_id, request.parent_context_id,
                                          "".join(generated) + chunk.text, req.final_len)
                    timer.observe(chunk)
                    yield chunk
                    return
                if token_ids:
                    chunk = GenerateChunk(detokenize(token_ids), tuple(token_ids),
                                          prompt_len=prompt_len)
                    prompt_len = None
                    generated.append(chunk.text)
                    timer.observe(chunk)
                    yield chunk
        finally:
            if awaiting_prompt:   # failed or aborted before it was admitted
                self._drop_cached_prefix(parent_id, request.parent_context_id)
            if not req.is_finished:  # consumer went away (or the request failed): free the slot
                self._abort(req, by_client=True)

    async def free_context(self, context_id: str) -> None:
        # (a queued or running request claims its context: most frees find none to abort)
        pending = ([r for r in self._waiting + self._running if r.context_id == context_id]
                   if context_id in self._claimed else [])
        if context_id not in self._contexts and not pending:
            raise UnknownContextError(f"unknown context {context_id!r}")
        for req in pending:
            self._abort(req, UnknownContextError(
                f"context {context_id!r} was freed while in use"), by_client=True)
        self._stops.forget(context_id)
        if self._cache is not None:   # kept by content unless it was in use
            self._cache.release(context_id, in_use=bool(pending))
        else:
            self._kv.free(context_id)
        self._wake()

    def context_ids(self) -> list[str]:
        """The contexts this engine holds, by id (a snapshot)."""
        return list(self._contexts)

    def check_invariants(self) -> None:
        """Raises AssertionError unless the block pool's accounting is whole (every block free
        or used, none both): for tests after a run."""
        self._kv.pool.check_invariants()

    async def stats(self) -> EngineStats:
        return EngineStats(num_running=len(self._running), num_waiting=len(self._waiting),
                           num_blocks_total=self._kv.pool.num_blocks_total,
                           num_blocks_free=self._kv.pool.num_free_blocks,
                           block_size=self.config.block_size,
                           num_tokens_in_use=self._kv.unique_tokens(self._contexts.values()),
                           num_contexts=len(self._contexts),
                           counters=engine_counters(
                               num_steps=self._num_steps, step_ms=round(self._step_s * 1000),
                               loop_ms=round(self._step_s * 1000),
                               prefill_tokens=self._prefill_tokens,
                               decode_tokens=self._decode_tokens,
                               generated_tokens=self._generated_tokens,
                               **self._tpot.counters(),
                               **self._aborted.counters(),
                               **({} if self._cache is None else self._cache.counters())))

    async def healthz(self) -> bool:
        return not self._closed

    # ---- the batching loop -----------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()   # (self._loop)
        latency = self.config.latency
        try:
            while True:
                if self._waiting:
                    self._admit()
                if not self._running:
                    self._idle = loop.create_future()   # until _wake
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
            self._closed = True
            self._fail_all(EngineError(f"engine {self.name!r} failed: {exc!r}"))

    def _plan(self) -> tuple[list[SimRequest], list[tuple[SimRequest, int]], int]:
        """(the decodes, the prefill chunks, their tokens) of the next iteration."""
        decodes: list[SimRequest] = []
        prefilling: list[SimRequest] = []
        for req in self._running:   # by priority, then admission order (see _admit)
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
        if req.num_done == req.num_tokens:
            self._finish(req)   # (which signals the token to the collector)
        elif req.eos_mean_tokens is not None and req.ends_turn(ctx.length,
                                                               req.eos_mean_tokens):
            req.finish_reason = "eos"
            self._finish(req)
            # the blocks reserved for the tokens it will not generate go back
            self._kv.cut_back(ctx, ctx.length, is_computed=True)
        else:
            req.signal()

    def _admit(self) -> None:
        """Move waiting requests into the running batch, by priority, then first come first
        served for memory.
        The first one that does not fit waits for the running requests to finish (they hold all
        they need, so they always do); when none runs, it evicts idle KV to fit."""
        for req in list(self._waiting):
            if len(self._running) >= self.config.max_num_seqs:
                return
            ctx = self._contexts.get(req.context_id)
            parent = None
            if ctx is None and req.parent_id is not None:
                if req.parent_id in self._claimed:
                    continue  # the parent is still being filled: fork once it is done
                parent = self._contexts.get(req.parent_id)
                if parent is None:
                    self._abort(req, UnknownContextError(
                        f"unknown parent context {req.parent_id!r}"))
                    continue
            base_len = ctx.length if ctx else parent.length if parent else 0
            try:
                self._check_fits(req, base_len)
            except EngineError as exc:
                self._abort(req, exc)
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
                                               may_evict=not self._running)
            if reservation is None and self._running:
                return  # they hold every block they need: wait for them to finish
            if reservation is None:  # cannot happen after _check_fits; never wait forever
                self._abort(req, OutOfKVCacheError(
                    f"context {req.context_id!r} needs more KV blocks than can be freed"))
                continue
            req.context, req.created_context = reservation.context, reservation.created
            req.start_len, req.num_recompute = base_len, reservation.num_recompute
            self._waiting.remove(req)
            enqueue(self._running, req)
            if req.num_new_tokens == 0:
                self._finish(req)

    # ---- helpers ---------------------------------------------------------------------------

    def _submit(self, req: SimRequest) -> SimRequest:
        if self._closed:
            raise EngineUnavailableError(f"engine {self.name!r} is closed")
        if self._task is None:
            self._ensure_started()
        if req.context_id in self._claimed:
            raise ContextExistsError(f"context {req.context_id!r} is busy with another request")
        ctx = self._contexts.get(req.context_id)
        if ctx is None and req.parent_id is not None:
            if req.parent_id == req.context_id:
                raise InvalidRequestError("a context cannot be its own parent")
            if req.parent_id not in self._contexts and req.parent_id not in self._claimed:
                raise UnknownContextError(f"unknown parent context {req.parent_id!r}")
        parent = self._contexts.get(req.parent_id) if req.parent_id is not None else None
        self._check_fits(req, ctx.length if ctx else parent.length if parent else 0)
        self._claimed.add(req.context_id)
        enqueue(self._waiting, req)
        self._wake()
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
        self._running.remove(req)
        self._claimed.discard(req.context_id)
        req.signal()

    def _abort(self, req: SimRequest, exc: BaseException | None = None, *,
               by_client: bool = False) -> None:
        """Take a request out of the engine. An aborted Fill leaves no trace (a context it
        created is dropped, one it appended to is cut back); an aborted Generate's context keeps
        the tokens already streamed. `by_client`: aborted by a client (its caller went away, or
        its context was freed), not failed by the engine; a Generate's decoded tokens then
        count as thrown away (once: a request already finished or failed is left alone)."""
        if req.is_finished or req.error is not None:
            return
        if by_client and req.kind is SimRequestKind.GENERATE:
            self._aborted.add(req.num_done)
        req.error = exc or EngineError("request aborted")
        if req in self._waiting:
            self._waiting.remove(req)
        if req in self._running:
            self._running.remove(req)
            ctx = req.context
            if ctx is not None and self._contexts.get(ctx.context_id) is ctx:
                if req.kind is SimRequestKind.FILL and req.created_context:
                    self._kv.free(ctx.context_id)
                else:
                    length = req.start_len if req.kind is SimRequestKind.FILL else ctx.length
                    self._kv.cut_back(ctx, length, is_computed=req.num_recompute == 0)
        self._claimed.discard(req.context_id)
        req.signal()
        self._wake()

    def _fail_all(self, exc: BaseException) -> None:
        for req in self._waiting + self._running:
            self._abort(req, exc)

    def _wake(self) -> None:
        """Wake the batching loop if it waits for work (a wake while it runs changes nothing:
        it looks for work before it waits again)."""
        idle = self._idle
        if idle is not None and not idle.done():
            idle.set_result(None)

    def _ensure_started(self) -> None:
        if self._closed:
            raise EngineUnavailableError(f"engine {self.name!r} is closed")
        if self._task is None:
            self._loop = asyncio.get_running_loop()
            self._task = self._loop.create_task(
                self._run(), name=f"simulated-engine-{self.name}")
