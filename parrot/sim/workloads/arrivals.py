"""Open-loop arrivals fixed in time: a seeded Poisson schedule or a fixed interval, set
before the run starts.

Every variant of a comparison faces the same arrivals at the same offsets from the start of
the run, whatever the applications under test do meanwhile (a slower variant does not meet
more — or fewer — requests because its main application runs longer).
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def poisson_offsets(rng: random.Random, rate: float, *, horizon_s: float | None = None,
                    count: int | None = None) -> list[float]:
    """Arrival offsets (seconds from the start) of a Poisson process of `rate` per second,
    up to `horizon_s` or for `count` arrivals (whichever is given; both: the earlier)."""
    if rate <= 0 or (horizon_s is None and count is None):
        return []
    offsets: list[float] = []
    t = 0.0
    while count is None or len(offsets) < count:
        t += rng.expovariate(rate)
        if horizon_s is not None and t >= horizon_s:
            break
        offsets.append(t)
    return offsets


def uniform_offsets(rate: float, *, horizon_s: float) -> list[float]:
    """One arrival every 1/`rate` seconds from 0, before `horizon_s` (the paper's artifact
    sends its chats this way: a fixed interval, not a Poisson process)."""
    if rate <= 0:
        return []
    count = math.ceil(horizon_s * rate)
    return [i / rate for i in range(count) if i / rate < horizon_s]


class Arrivals(Generic[T]):
    """Starts `make(i)` at `offsets[i]` seconds after `start()`; `wait()` returns every
    result once all have arrived and finished (in arrival order)."""

    def __init__(self, offsets: Sequence[float], make: Callable[[int], Coroutine[Any, Any, T]],
                 name: str) -> None:
        self._offsets, self._make, self._name = list(offsets), make, name
        self._driver: asyncio.Task[None] | None = None
        self._tasks: list[asyncio.Task[T]] = []

    def start(self) -> None:
        self._driver = asyncio.create_task(self._drive(), name=f"{self._name}-arrivals")

    async def wait(self) -> list[T]:
        assert self._driver is not None, "start() first"
        await self._driver
        return list(await asyncio.gather(*self._tasks))

    async def run(self) -> list[T]:
        """start() then wait(); if waiting fails (or is cancelled), cancel what is left."""
        self.start()
        try:
            return await self.wait()
        except BaseException:
            await self.cancel()
            raise

    async def cancel(self) -> None:
        """Stop early (the run failed): no new arrivals, in-flight requests cancelled."""
        for task in (self._driver, *self._tasks):
            if task is not None:
                task.cancel()
        await asyncio.gather(*(t for t in (self._driver, *self._tasks) if t is not None),
                             return_exceptions=True)

    async def _drive(self) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        for i, offset in enumerate(self._offsets):
            delay = started + offset - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            self._tasks.append(asyncio.create_task(self._make(i), name=f"{self._name}-{i}"))
