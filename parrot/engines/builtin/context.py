"""Contexts (named KV sequences) and the work items (one Fill or Generate) that run on them.

A context holds its tokens and how many of them are in the KV cache (`num_computed`). Between
operations every token but the last is computed; the last one is *pending* and is the input of
the next decode step (a Generate's first step samples from it; a Fill computes it as part of
its chunk). So a Fill never has to keep logits around, and a fork inherits the pending token.
A context that lost its blocks (evicted or preempted) simply has num_computed = 0 and is
recomputed from its tokens when next used.
"""

from __future__ import annotations

import asyncio
import enum
import random
from dataclasses import dataclass, field
from typing import Any

from parrot.engines.builtin.channel import Channel
from parrot.engines.builtin.detokenizer import TextStream
from parrot.engines.protocol import GenerateChunk
from parrot.sampling import SamplingParams


@dataclass(eq=False)
class Context:
    context_id: str
    parent_id: str | None                 # as created; a later request naming another fails
    token_ids: list[int] = field(default_factory=list)
    num_computed: int = 0
    block_table: list[int] = field(default_factory=list)
    owner: Work | None = None           # the operation in progress (the context is busy)
    fork_from: Context | None = None    # parent to fork from when the first work starts
    num_waiting_children: int = 0         # forks that still need this context's blocks
    is_freed: bool = False
    last_used: int = 0                    # iteration counter, for LRU eviction
    # prefix caching (block_manager.py): digests of token_ids' full blocks, computed as
    # needed (a pure function of the tokens, so never stale), and how many leading blocks of
    # block_table were offered to the cache
    block_digests: list[bytes] = field(default_factory=list)
    num_registered: int = 0
    num_queried: int = 0                  # tokens counted as looked up while it held no blocks

    @property
    def is_busy(self) -> bool:
        return self.owner is not None

    @property
    def target_computed(self) -> int:
        """Tokens that must be in KV for the context to be at rest (all but the pending one)."""
        return max(len(self.token_ids) - 1, 0)


class WorkKind(enum.Enum):
    FILL = "fill"
    GENERATE = "generate"


class WorkState(enum.Enum):
    WAITING = "waiting"     # queued: parent busy, or not yet scheduled
    RUNNING = "running"     # has been scheduled at least once
    DONE = "done"
    FAILED = "failed"

    # DONE or FAILED: a plain attribute of each member (set below), as CallState's, not a
    # property: the batch scheduler asks it of every work several times a step.
    is_finished: bool


for _state in WorkState:
    _state.is_finished = _state in (WorkState.DONE, WorkState.FAILED)


@dataclass(eq=False)
class Work:
    kind: WorkKind
    context: Context
    seq: int                                      # admission order (FCFS)
    priority: int = 0                             # lower first (the protocol's priority)
    # appended to the context when it starts (a Fill's, or a Generate's prompt)
    new_tokens: list[int] = field(default_factory=list)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    generator: random.Random | None = None     # a sampled request's (sampler.py)
    grammar: Any = None                           # a constrained Generate's SequenceGrammar
    eos_after: int | None = None                  # random weights: a hidden stop (engine.py)
    tokenizer: Any = None                         # for the text stream (None: ids only)
    stream: TextStream | None = None              # made when a Generate starts
    num_generated: int = 0
    # A Generate that carried a prompt: its first chunk reports the context's length after
    # it (set when the work starts and its tokens are appended)
    reports_prompt_len: bool = False
    prompt_len: int | None = None
    state: WorkState = WorkState.WAITING
    is_started: bool = False                      # fork done and new tokens appended
    fill_result: asyncio.Future[Any] | None = None
    chunks: Channel[GenerateChunk | BaseException] | None = None
    # kind is FILL: an attribute, not a property, since the scheduler asks several times per
    # row of every step
    is_fill: bool = field(init=False)

    def __post_init__(self) -> None:
        self.is_fill = self.kind is WorkKind.FILL

    @property
    def is_decoding(self) -> bool:
        """A Generate whose context is computed up to its pending token (one token per step)."""
        ctx = self.context
        return (not self.is_fill and self.is_started
                and ctx.num_computed == len(ctx.token_ids) - 1)

    def chunk_end(self) -> int:
        """Where this work's next chunk of computation ends (exclusive), before budgets."""
        ctx = self.context
        return ctx.target_computed if self.is_fill else len(ctx.token_ids)

    # -- delivery to the caller (all on the event loop) -------------------------------------

    def emit(self, chunk: GenerateChunk) -> None:
        assert self.chunks is not None
        self.chunks.put(chunk)
        if chunk.is_finished:
            self._finish(WorkState.DONE)

    def complete_fill(self, result: Any) -> None:
        assert self.fill_result is not None
        if not self.fill_result.done():
            self.fill_result.set_result(result)
        self._finish(WorkState.DONE)

    def fail(self, exc: BaseException) -> bool:
        """Fail unfinished work with `exc`; whether it did (finished work stays as it ended,
        so a caller that counts what it failed counts it once)."""
        if self.state.is_finished:
            return False
        if self.fill_result is not None and not self.fill_result.done():
            self.fill_result.set_exception(exc)
        if self.chunks is not None:
            self.chunks.put(exc)
        self._finish(WorkState.FAILED)
        return True

    def _finish(self, state: WorkState) -> None:
        self.state = state
        if self.context.owner is self:
            self.context.owner = None
