"""The simulated engine's requests: one Fill or Generate with its collector's signal, and
the priority-ordered queues the batching loop keeps them in (simulated.py)."""

from __future__ import annotations

import asyncio
import bisect
import enum

from parrot.engines.sim_blocks import FillerTokens, SimContext


class SimRequestKind(enum.Enum):
    FILL = "fill"
    GENERATE = "generate"


class SimRequest:
    """One Fill or Generate inside the engine, with its collector's signal: `ready` and a
    future to wait on, an asyncio.Event's semantics (set, wait, clear) without its coroutine
    and waiter list per wait (a request has one collector). A plain class with slots: one is
    made per request, and the batching loop reads its fields every step."""

    __slots__ = ("kind", "is_fill", "context_id", "parent_id", "num_tokens", "num_prompt", "seed",
                 "eos_mean_tokens", "finish_reason", "priority", "num_done", "num_recompute",
                 "context", "new_token_ids", "start_len", "created_context", "final_len",
                 "is_finished", "error", "ready", "_waiter", "tokens", "_turn_ends", "whole",
                 "signal_first_token", "first_token_at")

    def __init__(self, kind: SimRequestKind, context_id: str, parent_id: str | None,
                 num_tokens: int, seed: int | None = None, *, priority: int = 0,
                 eos_mean_tokens: int | None = None, num_prompt: int = 0,
                 whole: bool = False, signal_first_token: bool = True) -> None:
        self.kind = kind
        self.is_fill = kind is SimRequestKind.FILL
        self.context_id = context_id
        self.parent_id = parent_id
        self.num_tokens = num_tokens  # fill: tokens to prefill; generate: tokens to produce
        # generate: its prompt's tokens, prefilled before it decodes (counted down as they are)
        self.num_prompt = num_prompt
        self.seed = seed
        self.eos_mean_tokens = eos_mean_tokens  # generate: may end early ("eos"), simulated.py
        self.finish_reason = "length"
        self.priority = priority  # lower first, for admission and prefill (the protocol's)
        self.num_done = 0
        self.num_recompute = 0  # evicted KV of its context to prefill again before its work
        self.context: SimContext | None = None
        self.new_token_ids: list[int] = []  # generated, not yet streamed
        self.start_len = 0
        self.created_context = False
        self.final_len = 0
        self.is_finished = False
        self.error: BaseException | None = None
        self.ready = False   # signalled since the collector last looked
        self._waiter: asyncio.Future[None] | None = None
        # A Generate's tokens: filler_token(context_id, seed, position), the hash's fixed
        # prefix hashed once (its context's id is its own: contexts are found by id).
        self.tokens = FillerTokens(context_id, seed) if kind is SimRequestKind.GENERATE else None
        self._turn_ends: FillerTokens | None = None   # made at its first end-of-turn draw
        # A Generate answered whole (generate_all): its collector is signalled when it ends,
        # not at every token, which nobody reads; and at its first token only with
        # `signal_first_token` (the prompt is in KV: what the prefix cache indexes then).
        self.whole = whole
        self.signal_first_token = signal_first_token
        # The loop time of a Generate's first token (set by the batching loop): a whole
        # Generate's time to first token without waking its collector for it.
        self.first_token_at: float | None = None

    @property
    def num_new_tokens(self) -> int:
        """The tokens it adds to its context: what admission reserves blocks for."""
        return self.num_tokens + self.num_prompt

    @property
    def is_prefilling(self) -> bool:
        """Its next step prefills (a Fill, evicted KV to compute again, a Generate's prompt)."""
        return self.is_fill or self.num_recompute > 0 or self.num_prompt > 0

    @property
    def held_context(self) -> SimContext:
        assert self.context is not None, "admission gives a running request its context"
        return self.context

    def signal(self) -> None:
        """Wake the collector (Event.set)."""
        self.ready = True
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():   # not cancelled with its collector
                waiter.set_result(None)

    def next_signal(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
        """What the collector awaits when not `ready` (Event.wait), on the engine's loop."""
        waiter = self._waiter = loop.create_future()
        return waiter

    def ends_turn(self, position: int, mean_tokens: int) -> bool:
        """Whether the Generate's token at `position` is the last of its turn: probability
        1 / mean_tokens, a hash of ("eos", context, seed, position), so a seeded request ends
        where it ended before."""
        if self._turn_ends is None:
            self._turn_ends = FillerTokens(self.context_id, self.seed, salt="eos")
        return self._turn_ends.digest(position) % mean_tokens == 0


def by_priority(req: SimRequest) -> int:
    return req.priority


def enqueue(queue: list[SimRequest], req: SimRequest) -> None:
    """Queue `req` by priority, then arrival: both queues stay so ordered (insort goes after
    equals). Most requests go last: appended without a search."""
    if queue and by_priority(req) < by_priority(queue[-1]):
        bisect.insort(queue, req, key=by_priority)
    else:
        queue.append(req)
