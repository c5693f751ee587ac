"""How many calls run their requests on one engine process at once (`manager.engine_max_calls`).

A call holds one slot from its first request to its last (prefix contexts, Fill, Generate,
the free of its context); the others wait here, in the manager, the lowest engine priority
(latency-critical) first, then in the order they came. The bound is the engine's batch (the
`max_num_seqs` it reports) unless configured: more calls in flight than an engine runs at once
only queue in the engine, while each costs the manager's loop its in-flight request (measured
against two zero-latency engine processes running 4,096 calls: 1,024 requests in flight made
every loop iteration carry ~800 callbacks, and `/healthz` wait 0.25 s; bench/healthz_stall.py).
An engine in the manager's process has no requests in flight on a wire: it is not bounded.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from types import TracebackType


class CallSlots:
    """At most `limit` holders at once (None: no bound); waiters by (priority, arrival)."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = limit
        self.num_held = 0
        self._waiting: list[tuple[int, int, asyncio.Future[None]]] = []
        self._arrivals = itertools.count()

    @property
    def num_waiting(self) -> int:
        return sum(1 for _, _, f in self._waiting if not f.done())

    def set_limit(self, limit: int | None) -> None:
        """A new bound (the engine came back with other serving limits): waiters it makes
        room for go at once."""
        self.limit = limit
        while self._waiting and self._has_room():
            if self._hand_over():
                self.num_held += 1

    def held(self, priority: int) -> _Held:
        """A slot for the body of `async with` (waiting for one if all are held)."""
        return _Held(self, priority)

    async def acquire(self, priority: int) -> None:
        """Take a slot, waiting for one if all are held; `release()` gives it back."""
        if self._has_room() and not self._waiting:
            self.num_held += 1
            return
        granted = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (priority, next(self._arrivals), granted))
        try:
            await granted   # a releaser hands its slot over: num_held stays
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self.release()   # handed over just as the waiter was cancelled
            raise

    def _has_room(self) -> bool:
        return self.limit is None or self.num_held < self.limit

    def _hand_over(self) -> bool:
        """Give a slot to the first live waiter; whether there was one."""
        while self._waiting:
            _, _, granted = heapq.heappop(self._waiting)
            if not granted.done():
                granted.set_result(None)
                return True
        return False

    def release(self) -> None:
        """Give a held slot back: to the first live waiter, else to the pool."""
        if self.limit is not None and self.num_held > self.limit or not self._hand_over():
            self.num_held -= 1


class _Held:
    """`async with slots.held(priority)`: a class, not `asynccontextmanager` (whose generator
    and wrapper every call paid for on its way to an engine)."""

    __slots__ = ("_slots", "_priority")

    def __init__(self, slots: CallSlots, priority: int) -> None:
        self._slots, self._priority = slots, priority

    async def __aenter__(self) -> None:
        await self._slots.acquire(self._priority)

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        traceback: TracebackType | None) -> None:
        self._slots.release()
