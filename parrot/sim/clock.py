"""A virtual-clock asyncio event loop: simulated time jumps instead of passing.

`VirtualClockEventLoop` is asyncio's selector event loop with two changes:

* `time()` returns a virtual clock (seconds, starting at `start_time`, 0.0 by default);
* when nothing is ready, the loop's wait in `select(timeout)` does not sleep: it moves the
  virtual clock forward to the next timer's deadline and returns at once.

So `asyncio.sleep`, `call_later`/`call_at`, `wait_for` and `asyncio.timeout` all complete
instantly in wall time, at exact virtual timestamps (a sleep of `d` started at `t` wakes at
exactly `t + d`), and a run is deterministic: the order of events depends only on the program.
Tasks, Futures, Events, Queues and the other asyncio primitives work unchanged, since they are
built on the loop's callbacks and timers.

Rules of the simulation:

* **No real I/O.** Sockets, pipes and subprocesses would run in wall time while the clock jumps;
  registering any file descriptor with the loop raises `RuntimeError` (only the loop's own
  wake-up socket is allowed). Simulated engines and the in-process transport talk through
  asyncio objects instead.
* **Threads take no virtual time.** While work started with `run_in_executor` /
  `asyncio.to_thread` is in flight, the virtual clock stands still and the loop waits for real
  for the thread to hand back its result. A thread must not wait on the loop's timers.
* **A deadlock is an error.** If no callback is ready, no timer is pending and no executor work
  is in flight, nothing can ever wake the loop: `VirtualClockDeadlockError` is raised instead of
  hanging (a real loop would block forever).
"""

from __future__ import annotations

import asyncio
import selectors
import socket
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import Executor
from typing import Any, TypeVar, TypeVarTuple

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class VirtualClockDeadlockError(RuntimeError):
    """Every task waits on something no timer, callback or thread will ever deliver."""


class _VirtualSelector(selectors.BaseSelector):
    """Wraps a real selector (for the loop's wake-up socket) and turns waits into clock jumps."""

    def __init__(self) -> None:
        self._real = selectors.DefaultSelector()
        self._loop: VirtualClockEventLoop | None = None

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._real.get_map()

    def close(self) -> None:
        self._real.close()

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = self._real.select(0)
        if ready or timeout == 0:
            return ready
        loop = self._loop
        assert loop is not None, "the selector is bound to its loop at construction"
        if loop._num_threads_in_flight:
            # Executor work takes no virtual time: wait for real until a thread reports back.
            return self._real.select(None)
        if timeout is None:
            raise VirtualClockDeadlockError(
                "virtual clock: nothing is ready, no timer is pending and no executor work is in "
                "flight, so no task can ever be woken")
        loop._advance(timeout)
        return []


class VirtualClockEventLoop(asyncio.SelectorEventLoop):
    """An asyncio event loop whose `time()` is virtual and whose idle waits jump the clock."""

    # Set by asyncio's own __init__ (the timer heap, the wake-up socket) and read below;
    # typeshed leaves the base loop's private attributes out, so they are declared here.
    _scheduled: list[asyncio.TimerHandle]
    _ssock: socket.socket

    def __init__(self, start_time: float = 0.0) -> None:
        self._virtual_now = float(start_time)
        self._num_threads_in_flight = 0
        selector = _VirtualSelector()
        super().__init__(selector)
        selector._loop = self

    def time(self) -> float:
        return self._virtual_now

    def _advance(self, timeout: float) -> None:
        """Move the clock forward by `timeout`, the loop's wait until its next timer."""
        target = self._virtual_now + timeout
        if self._scheduled:
            # Land exactly on the next deadline (now + (when - now) may miss it by an ulp);
            # a wait shorter than that (asyncio caps one wait at a day) just moves forward.
            when = self._scheduled[0].when()
            if when <= target:
                target = when
        self._virtual_now = max(self._virtual_now, target)

    # --- threads: tracked so the clock stands still while they run -----------------------

    def run_in_executor(self, executor: Executor | None, func: Callable[[*Ts], T],
                        *args: *Ts) -> asyncio.Future[T]:
        future = super().run_in_executor(executor, func, *args)
        self._num_threads_in_flight += 1
        future.add_done_callback(self._thread_done)
        return future

    def _thread_done(self, _future: asyncio.Future[Any]) -> None:
        self._num_threads_in_flight -= 1

    async def shutdown_default_executor(self, *args: Any, **kwargs: Any) -> None:
        # The base class joins the executor in a helper thread that wakes the loop when done.
        self._num_threads_in_flight += 1
        try:
            await super().shutdown_default_executor(*args, **kwargs)
        finally:
            self._num_threads_in_flight -= 1

    # --- no real I/O ---------------------------------------------------------------------

    def _add_reader(self, fd: Any, callback: Callable[..., Any], *args: Any) -> Any:
        if fd != self._ssock.fileno():
            raise RuntimeError("VirtualClockEventLoop does no real I/O (time is simulated); "
                               f"cannot watch file descriptor {fd!r}")
        # _add_reader is the selector loop's private hook (CPython's selector_events.py),
        # absent from typeshed's stub of the base class.
        return super()._add_reader(fd, callback, *args)  # type: ignore[misc]

    def _add_writer(self, fd: Any, callback: Callable[..., Any], *args: Any) -> Any:
        raise RuntimeError("VirtualClockEventLoop does no real I/O (time is simulated); "
                           f"cannot watch file descriptor {fd!r}")


def run_virtual(main: Coroutine[Any, Any, T], *, start_time: float = 0.0,
                debug: bool | None = None) -> T:
    """Like `asyncio.run`, on a fresh `VirtualClockEventLoop` starting at `start_time`."""
    with asyncio.Runner(debug=debug,
                        loop_factory=lambda: VirtualClockEventLoop(start_time)) as runner:
        return runner.run(main)
