"""A minimal virtual-clock event loop for tests: when nothing is ready, time jumps to the next
timer instead of waiting. (The project's own virtual clock lives elsewhere; this one only
proves the simulated engine keeps all its timing on the loop.)"""

from __future__ import annotations

import asyncio
import selectors
from typing import Any, Awaitable, Callable, TypeVar

T = TypeVar("T")


class _JumpingSelector:
    def __init__(self) -> None:
        self._selector = selectors.DefaultSelector()
        self.loop: VirtualClockLoop | None = None

    def select(self, timeout: float | None = None) -> list[Any]:
        events = self._selector.select(0)
        if events or timeout == 0:
            return events
        assert self.loop is not None
        scheduled = self.loop._scheduled  # type: ignore[attr-defined]
        if not scheduled:
            raise RuntimeError("virtual clock: deadlock (nothing ready, no timers)")
        self.loop.now = max(self.loop.now, scheduled[0].when())
        return []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._selector, name)


class VirtualClockLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self.now = 0.0
        selector = _JumpingSelector()
        super().__init__(selector)  # type: ignore[arg-type]
        selector.loop = self

    def time(self) -> float:
        return self.now


def run_virtual(main: Callable[[], Awaitable[T]]) -> T:
    with asyncio.Runner(loop_factory=VirtualClockLoop) as runner:
        return runner.run(main())  # type: ignore[arg-type]
