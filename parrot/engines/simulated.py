"""A simulated engine: real context/KV-block bookkeeping, a latency model instead of a model.
This module is the engine protocol in front (requests in, chunks out, stats); its requests and
the batching loop are sim_batch.py's `SimBatch`.

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
import random
from collections.abc import AsyncIterator

from parrot.engines.counters import engine_counters
# the configuration lives with the latency model; re-exported here as part of this module's API
from parrot.engines.latency_model import LatencyModel, SimulatedEngineConfig, load_profile
from parrot.engines.protocol import (Engine, EngineInfo, EngineStats, FillRequest, FillResult,
                                     GenerateChunk, GenerateRequest, GenerateResult,
                                     ServingLimits, collect_generate)
from parrot.engines.tpot import TpotMeter
from parrot.engines.sim_batch import SimBatch
from parrot.engines.sim_values import sample_value
from parrot.engines.sim_blocks import KVSpace, count_tokens, detokenize, filler_token
from parrot.engines.sim_eos import HiddenStops
from parrot.engines.sim_requests import SimRequest, SimRequestKind
from parrot.engines.sim_prefix_cache import CachedPrefixes
from parrot.errors import EngineConfigError, EngineUnavailableError, UnknownContextError

__all__ = ["SimulatedEngine", "SimulatedEngineConfig", "LatencyModel", "EngineConfigError",
           "load_profile", "count_tokens", "detokenize", "filler_token"]


class SimulatedEngine(Engine):
    def __init__(self, name: str, config: SimulatedEngineConfig | None = None) -> None:
        self.name = name
        self.config = config or SimulatedEngineConfig()
        self._kv = KVSpace(self.config.num_blocks, self.config.block_size)
        self._contexts = self._kv.contexts  # by id (the same dict)
        self._tpot = TpotMeter()  # time per output token as Generates are handed over
        # where each context's next Generate stops on its own (an [[eos@N]] marker filled)
        self._stops = HiddenStops()
        # With prefix caching: finished contexts cached by content (sim_prefix_cache.py)
        self._cache = CachedPrefixes(self._kv) if self.config.prefix_caching else None
        # the requests and the batching loop (sim_batch.py)
        self._batch = SimBatch(name, self.config, self._kv, self._cache)

    # ---- Engine protocol -------------------------------------------------------------------

    async def start(self) -> None:
        self._batch.ensure_started()

    async def close(self) -> None:
        await self._batch.close(EngineUnavailableError(f"engine {self.name!r} is closed"))

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
            req = self._batch.submit(SimRequest(SimRequestKind.FILL, request.context_id, parent_id,
                                          n - cached, priority=request.priority))
        except BaseException:
            self._drop_cached_prefix(parent_id, request.parent_context_id)
            raise
        self._stops.filled(request.context_id, request.parent_context_id, request.text)
        try:
            if not req.ready:
                assert self._batch.loop is not None, "a submitted request started the engine"
                await req.next_signal(self._batch.loop)
        except asyncio.CancelledError:
            self._batch.abort(req, by_client=True)
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

    def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        return self._chunks(request, whole=False)

    async def generate_all(self, request: GenerateRequest) -> GenerateResult:
        """One answer, as an engine process gives a non-streamed Generate: its request
        signals its end only (SimRequest.whole; and its first token where the prefix cache
        indexes the prompt then), so the caller's loop is woken once, not once a token
        (measured in-process, bench_manager's HTTP workloads: 4-13% more calls a second).
        Its time to first token is the batching loop's (SimRequest.first_token_at)."""
        started = asyncio.get_running_loop().time()
        first = _FirstToken()
        result = await collect_generate(self._chunks(request, whole=True, first=first))
        if first.at is None:
            return result
        # (built directly: dataclasses.replace walks the fields, ~2 us a call)
        return GenerateResult(result.text, result.token_ids, result.finish_reason,
                              result.prompt_len, first.at - started)

    async def _chunks(self, request: GenerateRequest, *, whole: bool,
                      first: _FirstToken | None = None) -> AsyncIterator[GenerateChunk]:
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
            req = self._batch.submit(SimRequest(SimRequestKind.GENERATE, request.context_id,
                                          parent_id, num_tokens, sampling.seed,
                                          priority=request.priority,
                                          eos_mean_tokens=None if sampling.ignore_eos
                                          else self.config.eos_mean_tokens,
                                          num_prompt=num_prompt - cached, whole=whole,
                                          signal_first_token=self._cache is not None))
        except BaseException:
            self._drop_cached_prefix(parent_id, request.parent_context_id)
            raise
        timer = self._tpot.timer()
        generated: list[str] = []
        # the first chunk says how long the context is after the prompt, known at its first
        # signal (its first token: the prompt is prefilled)
        prompt_len: int | None = None
        awaiting_prompt = request.has_prompt
        loop = self._batch.loop
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
                    if first is not None and not generated and req.first_token_at is not None:
                        # Nothing handed over yet: its first token's time is the loop's
                        # (SimRequest.signal_first_token off), for TTFT and TPOT alike.
                        first.at = req.first_token_at
                        timer.first_token(first.at)
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
                self._batch.abort(req, by_client=True)

    async def free_context(self, context_id: str) -> None:
        # (a queued or running request claims its context: most frees find none to abort)
        batch = self._batch
        pending = ([r for r in batch.waiting + batch.running if r.context_id == context_id]
                   if context_id in batch.claimed else [])
        if context_id not in self._contexts and not pending:
            raise UnknownContextError(f"unknown context {context_id!r}")
        for req in pending:
            self._batch.abort(req, UnknownContextError(
                f"context {context_id!r} was freed while in use"), by_client=True)
        self._stops.forget(context_id)
        if self._cache is not None:   # kept by content unless it was in use
            self._cache.release(context_id, in_use=bool(pending))
        else:
            self._kv.free(context_id)
        batch.wake()

    def context_ids(self) -> list[str]:
        """The contexts this engine holds, by id (a snapshot)."""
        return list(self._contexts)

    def check_invariants(self) -> None:
        """Raises AssertionError unless the block pool's accounting is whole (every block free
        or used, none both): for tests after a run."""
        self._kv.pool.check_invariants()

    async def stats(self) -> EngineStats:
        return EngineStats(num_running=len(self._batch.running),
                           num_waiting=len(self._batch.waiting),
                           num_blocks_total=self._kv.pool.num_blocks_total,
                           num_blocks_free=self._kv.pool.num_free_blocks,
                           block_size=self.config.block_size,
                           num_tokens_in_use=self._kv.unique_tokens(self._contexts.values()),
                           num_contexts=len(self._contexts),
                           counters=engine_counters(
                               **self._batch.counters(), **self._tpot.counters(),
                               **({} if self._cache is None else self._cache.counters())))

    async def healthz(self) -> bool:
        return not self._batch.closed


class _FirstToken:
    """Where a whole Generate's reader leaves the loop time of its first token (its collector
    is not woken for it: SimRequest.signal_first_token)."""

    __slots__ = ("at",)

    def __init__(self) -> None:
        self.at: float | None = None
