"""BuiltinEngine: the Engine protocol in-process over a real model.

The protocol in front: requests are validated and admitted as work items (the batch
scheduler's), and hand results back through a future (Fill) or a channel of chunks (Generate);
the batching task that runs them is engine_loop.py's `EngineLoop`.

Context rules (the protocol docstring, made exact):
* Fill on an unknown id creates the context (forking `parent_context_id` if given); Generate
  on an unknown id needs a parent (else UnknownContextError) and forks it.
* A parent that does not exist (never created, or freed) -> UnknownContextError. A fork of a
  parent that is busy (being filled or generated into) waits until it is idle.
* A request naming an existing context with a *different* parent_context_id, or a Fill/Generate
  on a context that already has a request in progress -> ContextExistsError. Naming the same
  parent again (or none) just appends to the existing context.
* FreeContext of an unknown id -> UnknownContextError; freeing a busy context fails the request
  in progress with UnknownContextError. Children keep the blocks they share.
* A random-weight model (`tiny`, `llama-7b`, ...: no text in what it generates, so it never
  ends an answer on its own) stops where the workload says its answer would: an `[[eos@N]]`
  marker in a Fill's text (`sim_eos.HiddenStops`, as the simulated engine reads it) ends the
  context's next Generate without `ignore_eos` after N tokens with "eos" (a fork inherits its
  parent's stop; each is used once). Nothing but the engine reads it: to the manager and
  every policy it is prompt text, so a live run has output lengths no scheduler knows.
* A context longer than max_context_len -> PromptTooLongError; Generate stops with "length"
  when the context window is full. Token ids outside the vocabulary, or stop strings without a
  tokenizer -> InvalidRequestError.

While the batch scheduler raises (a bug: engine_loop.py), the engine is unhealthy (`healthz`
False) and refuses new requests with EngineUnavailableError, so the manager re-dispatches them
elsewhere.
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any
from collections.abc import AsyncIterator

from parrot.chat import ChatTemplate
from parrot.engines.aborted import AbortedGenerates
from parrot.engines.builtin.channel import Channel
from parrot.engines.builtin.context import Context, Work, WorkKind
from parrot.engines.builtin.observe.host_pauses import PauseMonitor, pause_monitor
from parrot.engines.builtin.runner import ModelRunner
from parrot.engines.builtin.grammar import GrammarCache, SequenceGrammar
from parrot.engines.builtin.sampler import make_generator
from parrot.engines.builtin.batch_scheduler import BatchScheduler
from parrot.engines.builtin.engine_loop import EngineLoop
from parrot.engines.builtin.sizing import batch_buckets
from parrot.engines.builtin.observe.startup_clock import StartupClock
from parrot.engines.builtin.observe.startup_probe import StartupProbe
from parrot.engines.builtin.observe.step_trace import StepTrace
from parrot.engines.counters import engine_counters
from parrot.engines.protocol import (Engine, EngineInfo, EngineStats, FillRequest, FillResult,
                                     GenerateChunk, GenerateRequest, ServingLimits)
from parrot.engines.sim_eos import HiddenStops
from parrot.engines.tpot import TpotMeter
from parrot.errors import (ContextExistsError, EngineError, EngineUnavailableError,
                           InvalidRequestError, PromptTooLongError, UnknownContextError)
from parrot.constraints import Constraint
from parrot.speed_profile import SpeedProfile

log = logging.getLogger(__name__)

_TOKENIZE_INLINE_CHARS = 4096  # longer texts are tokenized in a worker thread


class BuiltinEngine(Engine):
    def __init__(self, name: str, model_name: str, runner: ModelRunner, scheduler: BatchScheduler,
                 tokenizer: Any | None, vocab_size: int, seed: int,
                 trace: StepTrace | None = None, pauses: PauseMonitor | None = None,
                 speed_probe: StartupProbe | None = None,
                 startup_clock: StartupClock | None = None, hidden_stops: bool = False,
                 prompt_in_generate: bool = True) -> None:
        self._name, self._model_name = name, model_name
        self._prompt_in_generate = prompt_in_generate   # said in info() (config.py)
        self._trace = trace             # one line per step (step_trace.py), when configured
        # compilations and collections from here on are the serving's (build.py makes the
        # engine after its warm-up)
        self._pauses = pauses if pauses is not None else pause_monitor(triton=False)
        self._pauses_at_start = self._pauses.totals()
        self._runner, self._scheduler = runner, scheduler
        # the batching task (engine_loop.py), started by the first start()
        self._batching = EngineLoop(name, runner, scheduler, self._pauses, trace)
        self._tpot = TpotMeter()        # time per output token as Generates are handed over
        self._aborted = AbortedGenerates()  # decode work aborts threw away (aborted.py)
        self._tokenizer = tokenizer
        self._vocab_size = vocab_size
        self._grammars: GrammarCache | None = None   # made by the first constrained Generate
        self._rng = random.Random(seed)
        self._seq = 0
        # measured once by the first start() (startup_probe.py); reported in info()
        self._speed_probe = speed_probe
        self._startup_clock = startup_clock   # the probe is start-up's last phase
        self._speed_profile: SpeedProfile | None = None
        bos = getattr(tokenizer, "bos_token_id", None)
        self._bos: int | None = (bos if tokenizer is not None and bos is not None
                                 and tokenizer("x").input_ids[:1] == [bos] else None)
        # random weights: where each context's next Generate stops (an [[eos@N]] marker)
        self._stops: HiddenStops | None = HiddenStops() if hidden_stops else None

    # -- the parts it was built from (build.build_engine), for inspection --------------------

    @property
    def runner(self) -> ModelRunner:
        return self._runner

    @property
    def scheduler(self) -> BatchScheduler:
        return self._scheduler

    @property
    def grammar_compiles(self) -> int:
        """Grammars compiled for constrained Generates so far (a repeated constraint hits the
        cache and compiles nothing)."""
        return 0 if self._grammars is None else self._grammars.compiles

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._batching.closing:
            raise EngineUnavailableError(f"engine {self._name!r} is closed")
        if not self._batching.started:
            self._batching.start()
            if self._speed_probe is not None:
                # Its Fills call start() again, which returns at once: the task exists.
                clock = self._startup_clock or StartupClock(self._name, quiet=True)
                self._batching.probing = True
                try:
                    with clock.phase("probe", "measuring the speed profile"):
                        self._speed_profile = await self._speed_probe.run(self, self._name)
                finally:
                    self._batching.probing = False
                    self._batching.wake.set()    # the deferred captures may start
                log.info("%s", clock.summary())
                self.use_speed_profile(self._speed_profile)

    def use_speed_profile(self, profile: SpeedProfile | None) -> None:
        """Price the step budget with `profile` (step_budget.py: under `step_token_budget:
        auto` the prefill beside decodes is what keeps a step under the ITL target; without a
        profile, max_batch_tokens) and log the rule. `start` calls it with the profile its
        probe measured; a test or a benchmark may set another."""
        self._scheduler.step_budget = self._scheduler.step_budget.with_profile(profile)
        log.info("engine %s: %s", self._name, self._scheduler.step_budget.describe())

    async def close(self) -> None:
        await self._batching.close()  # finishes the step in flight, then returns
        for work in self._scheduler.works:
            work.fail(EngineUnavailableError(f"engine {self._name!r} closed"))
        self._scheduler.works.clear()
        if self._trace is not None:
            self._trace.close()

    async def info(self) -> EngineInfo:
        blocks = self._scheduler.blocks
        return EngineInfo(name=self._name, kind="builtin", model=self._model_name,
                          max_context_len=self._scheduler.max_context_len,
                          block_size=blocks.block_size,
                          num_blocks_total=blocks.allocator.num_blocks_total,
                          chat_template=ChatTemplate.from_tokenizer(self._tokenizer),
                          speed_profile=self._speed_profile, serving=self.serving_limits(),
                          takes_prompt_in_generate=self._prompt_in_generate)

    def serving_limits(self) -> ServingLimits:
        """What this engine serves with (sizing.py chose what the config left `auto`)."""
        s, graphs = self._scheduler, self._runner.graphs
        return ServingLimits(
            max_num_seqs=s.max_num_seqs, max_batch_tokens=s.max_batch_tokens,
            kv_cache_tokens=s.blocks.allocator.num_blocks_total * s.blocks.block_size,
            graph_batch_sizes=() if graphs is None else tuple(batch_buckets(graphs.max_batch)),
            step_token_budget=s.step_budget.describe())

    async def stats(self) -> EngineStats:
        s = self._scheduler
        alloc = s.blocks.allocator
        graphs = self._runner.graphs
        captured = [g for g in (graphs, self._runner.prefill_graphs) if g is not None]
        pauses = self._pauses.totals() - self._pauses_at_start
        counters = engine_counters(
            graph_captures_at_runtime=sum(g.runtime_captures for g in captured),
            graph_capture_ms_at_runtime=round(1000 * sum(g.runtime_capture_s for g in captured)),
            graph_captures_while_idle=0 if graphs is None else graphs.idle_captures,
            num_graph_steps=self._runner.num_graph_steps,
            num_piecewise_steps=self._runner.num_piecewise_steps,
            ahead_hits=0 if graphs is None else graphs.num_ahead_hits,
            ahead_misses=0 if graphs is None else graphs.num_ahead_misses,
            graph_stopgap_steps=0 if graphs is None else graphs.num_stopgap_replays,
            prefix_cache_query_tokens=s.blocks.cache_query_tokens,
            prefix_cache_hit_tokens=s.blocks.cache_hit_tokens,
            **self._batching.counters.counters(), **pauses.counters(), **self._tpot.counters(),
            **self._aborted.counters())
        return EngineStats(num_running=s.num_running, num_waiting=s.num_waiting,
                           num_blocks_total=alloc.num_blocks_total,
                           num_blocks_free=alloc.num_free_blocks, block_size=s.blocks.block_size,
                           num_tokens_in_use=sum(len(c.token_ids) for c in s.contexts.values()),
                           num_contexts=len(s.contexts), counters=counters)

    async def reset_prefix_cache(self) -> int:
        # Blocks in use keep their KV (the contexts holding them go on); they are only no
        # longer found by content. A context's own count of registered blocks may run ahead
        # of what is named now: its blocks are just not offered again, which is safe.
        return self._scheduler.blocks.allocator.forget_cached()

    async def healthz(self) -> bool:
        return not self._batching.closing and self._batching.unhealthy is None \
            and self._batching.alive

    def check_invariants(self) -> None:
        """Assert the KV blocks' bookkeeping is consistent (every block's reference count is
        the number of block tables and pending copies holding it). For tests and debugging."""
        self._scheduler.check_invariants()

    def block_table(self, context_id: str) -> tuple[int, ...]:
        """The KV blocks a live context uses, in position order (for tests and debugging)."""
        ctx = self._scheduler.contexts.get(context_id)
        if ctx is None:
            raise UnknownContextError(f"unknown context {context_id!r}")
        return tuple(ctx.block_table)

    # -- the protocol ---------------------------------------------------------------------------

    async def fill(self, request: FillRequest) -> FillResult:
        await self.start()
        tokens = await self._prompt_tokens(request)
        work = self._admit(WorkKind.FILL, request.context_id, request.parent_context_id, tokens,
                           request.priority)
        if self._stops is not None:
            self._stops.filled(request.context_id, request.parent_context_id, request.text)
        work.fill_result = asyncio.get_running_loop().create_future()
        self._scheduler.add(work)
        self._batching.wake.set()
        try:
            return await work.fill_result
        finally:
            if not work.state.is_finished:  # cancelled: the context keeps what was computed
                work.fail(EngineError("fill abandoned by its caller"))
                self._batching.wake.set()

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        await self.start()
        params = request.sampling
        if params.stop and self._tokenizer is None:
            raise InvalidRequestError("stop strings need a tokenizer; this model has none")
        self._check_token_ids(params.stop_token_ids, "sampling.stop_token_ids")
        # A prompt in the request is appended when the work starts, as a Fill's tokens; the
        # step that computes its last token samples the first generated one.
        tokens = await self._prompt_tokens(request) if request.has_prompt else []
        # compiled before admission: a constraint that fails leaves no work behind
        grammar = (None if params.constraint is None
                   else await self._start_grammar(params.constraint))
        work = self._admit(WorkKind.GENERATE, request.context_id, request.parent_context_id,
                           tokens, request.priority, has_prompt=request.has_prompt)
        if request.has_prompt and self._stops is not None:
            self._stops.filled(request.context_id, request.parent_context_id, request.text)
        work.sampling = params
        work.grammar = grammar
        if self._stops is not None:
            stop = self._stops.take(request.context_id, request.parent_context_id)
            work.eos_after = None if params.ignore_eos else stop
        if not params.is_greedy:
            seed = params.seed if params.seed is not None else self._rng.getrandbits(63)
            work.generator = make_generator(seed)
        work.chunks = Channel()
        self._scheduler.add(work)
        self._batching.wake.set()
        timer = self._tpot.timer()
        try:
            while True:
                item = await work.chunks.get()
                if isinstance(item, BaseException):
                    raise item
                timer.observe(item)
                yield item
                if item.is_finished:
                    return
        finally:
            # the caller stopped reading: abort (fail is False once it finished or failed)
            if work.fail(EngineError("generate abandoned by its caller")):
                self._count_abort(work)
                self._batching.wake.set()

    async def _start_grammar(self, constraint: Constraint) -> SequenceGrammar:
        """A new sequence's matcher; the tokenizer bridge and each new grammar are built off
        the loop (a large schema compiles for tens of milliseconds)."""
        if self._grammars is None:
            self._grammars = await asyncio.to_thread(
                GrammarCache, self._tokenizer, self._vocab_size,
                parallel=self._runner.device.type == "cuda",
                eos_token_ids=sorted(self._scheduler.eos_token_ids))
        return await asyncio.to_thread(self._grammars.start, constraint)

    async def free_context(self, context_id: str) -> None:
        ctx = self._scheduler.contexts.get(context_id)
        if ctx is None:
            raise UnknownContextError(f"unknown context {context_id!r}")
        if self._stops is not None:
            self._stops.forget(context_id)
        self._count_abort(self._scheduler.free(ctx, defer=self._batching.step_in_flight))
        self._batching.wake.set()

    def _count_abort(self, work: Work | None) -> None:
        """A client aborted `work` (its caller went away, or its context was freed under
        it): a Generate's decoded tokens were decoded for nobody. Each caller passes only work
        it failed itself, so a Generate counts once however the aborts race."""
        if work is not None and not work.is_fill:
            self._aborted.add(work.num_generated)

    # -- admission ------------------------------------------------------------------------------

    async def _prompt_tokens(self, request: FillRequest | GenerateRequest) -> list[int]:
        """A Fill's tokens, or a Generate's prompt: its token ids, or its text tokenized, with
        BOS first where it starts a new root context (for tokenizers that add one)."""
        if request.token_ids is not None:
            tokens = list(request.token_ids)
        else:
            assert request.text is not None
            tokens = await self._tokenize(request.text)
        if self._bos is not None and request.parent_context_id is None \
                and request.context_id not in self._scheduler.contexts:
            tokens.insert(0, self._bos)
        return tokens

    def _admit(self, kind: WorkKind, context_id: str, parent_id: str | None,
               tokens: list[int], priority: int = 0, *, has_prompt: bool = False) -> Work:
        """Validate a request against the engine's state and make its work item; `has_prompt`:
        a Generate with a prompt, which may start a new root context as a Fill does and
        reports the prompt's length on its first chunk."""
        if self._batching.closing:
            raise EngineUnavailableError(f"engine {self._name!r} is closed")
        if self._batching.unhealthy is not None:
            raise EngineUnavailableError(
                f"engine {self._name!r} is unhealthy: {self._batching.unhealthy}")
        self._check_token_ids(tokens, "token_ids")
        contexts = self._scheduler.contexts
        ctx = contexts.get(context_id)
        if ctx is not None:
            if parent_id is not None and parent_id != ctx.parent_id:
                raise ContextExistsError(
                    f"context {context_id!r} exists with parent {ctx.parent_id!r}, "
                    f"not {parent_id!r}")
            if ctx.owner is not None:
                raise ContextExistsError(
                    f"context {context_id!r} is busy with a {ctx.owner.kind.value}")
            base_len = len(ctx.token_ids)
            parent = None
        else:
            if parent_id is None and kind is WorkKind.GENERATE and not has_prompt:
                raise UnknownContextError(
                    f"unknown context {context_id!r} (generate needs an existing context, "
                    "a parent_context_id or a prompt)")
            parent = contexts.get(parent_id) if parent_id is not None else None
            if parent_id is not None and parent is None:
                raise UnknownContextError(f"unknown parent context {parent_id!r}")
            base_len = len(parent.token_ids) if parent is not None else 0
        limit = self._scheduler.max_context_len
        if base_len + len(tokens) > limit:
            raise PromptTooLongError(
                f"context {context_id!r} would hold {base_len + len(tokens)} tokens; "
                f"max_context_len is {limit}")
        if ctx is None:
            ctx = Context(context_id, parent_id, fork_from=parent)
            if parent is not None:
                parent.num_waiting_children += 1
            contexts[context_id] = ctx
        self._seq += 1
        return Work(kind, ctx, self._seq, priority, new_tokens=tokens,
                    tokenizer=self._tokenizer, reports_prompt_len=has_prompt)

    def _check_token_ids(self, tokens: Any, what: str) -> None:
        bad = [t for t in tokens if t >= self._vocab_size]
        if bad:
            raise InvalidRequestError(
                f"{what} {bad[:5]} outside the vocabulary of {self._vocab_size} tokens")

    async def _tokenize(self, text: str) -> list[int]:
        if self._tokenizer is None:
            raise InvalidRequestError("this model has no tokenizer; send token_ids")
        if len(text) <= _TOKENIZE_INLINE_CHARS:
            return self._encode(text)
        return await asyncio.to_thread(self._encode, text)

    def _encode(self, text: str) -> list[int]:
        assert self._tokenizer is not None
        return list(self._tokenizer(text, add_special_tokens=False).input_ids)
