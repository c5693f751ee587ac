"""A Generate's chunks on their way from the engine's loop to the one coroutine reading them.

`asyncio.Queue` does more than this needs: every put and every waiting get checks the loop
it is bound to and walks a list of getters, and a step at 250 rows does that 250 times on
the loop that must also schedule the next step (~6% of the engine loop's busy time in a
py-spy profile of 256 streams on the 2-core VM). One reader, unbounded: a deque and at most
one waiting future.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Generic, TypeVar

T = TypeVar("T")


class Channel(Generic[T]):
    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: collections.deque[T] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: T) -> None:
        """Never blocks; wakes the reader if it waits."""
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def get(self) -> T:
        """The oldest item, waiting for one if there is none. One reader at a time."""
        while not self._items:
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                if self._waiter is waiter:   # cancelled while waiting
                    self._waiter = None
        return self._items.popleft()
