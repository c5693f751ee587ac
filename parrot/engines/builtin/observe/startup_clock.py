"""The start-up log: what the engine is doing, how far it got, and how long each phase took.

A cold start on a fresh GPU (no Triton cache) takes a minute or more, most of it in a few
loops (graph captures, kernel compilations) that said nothing until they ended. `StartupClock`
logs each phase as it begins ("loading weights ...") and ends ("... done in 3.2 s"), progress
inside long loops at most every `PROGRESS_EVERY_S` ("capturing decode graphs: 40/111, 4.1
s"), and at the end one line with every phase's time, so a slow start says where it went:

    engine e0 start-up 21.4 s: load 9.0 s, convert 0.4 s, kv cache 0.1 s, linear choice 0.4 s,
    capture 5.1 s, compile 3.1 s, prefill 0.2 s, prefill graphs 0.3 s, probe 2.8 s

The clock reads `now` (injectable) and logs through `log`, so tests check its lines exactly.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

def process_age_s() -> float | None:
    """Seconds since this process started (Linux: /proc/self/stat against the boot clock);
    None elsewhere. What the start-up spent before its clock existed (interpreter, imports)."""
    try:
        with open("/proc/self/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        started_ticks = int(fields[19])     # field 22 of stat(5): starttime, in clock ticks
        return time.clock_gettime(time.CLOCK_BOOTTIME) - started_ticks / os.sysconf(
            "SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


# Progress inside a long phase at most this often: a minute-long cold compile says a dozen
# times how far it is, a warm start (each loop well under this) says nothing extra.
PROGRESS_EVERY_S = 5.0


@dataclass
class Progress:
    """Counts one phase's items; logs `done/total` when PROGRESS_EVERY_S passed since the
    phase began or the last progress line."""

    clock: StartupClock
    what: str
    total: int
    started: float
    done: int = 0
    _last: float = 0.0

    def __post_init__(self) -> None:
        self._last = self.started

    def step(self, n: int = 1) -> None:
        self.done += n
        now = self.clock.now()
        if now - self._last >= PROGRESS_EVERY_S and self.done < self.total:
            self._last = now
            self.clock.say("%s: %d/%d, %.1f s", self.what, self.done, self.total,
                           now - self.started)


@dataclass
class StartupClock:
    """One engine's start-up phases (see the module docstring). `quiet`: keep the times for
    the summary but log nothing per phase (a warm-up run outside an engine's start)."""

    engine: str
    now: Callable[[], float] = time.perf_counter
    quiet: bool = False
    phases: list[tuple[str, float]] = field(default_factory=list)
    started: float = 0.0

    def __post_init__(self) -> None:
        self.started = self.now()

    def say(self, message: str, *args: object) -> None:
        if not self.quiet:
            log.info("engine %s start-up: " + message, self.engine, *args)

    @contextmanager
    def phase(self, name: str, what: str, total: int = 0) -> Iterator[Progress]:
        """Time the block as phase `name` (summed if it recurs), logging `what` as it begins
        and ends; the Progress it yields counts the block's `total` items."""
        self.say("%s%s ...", what, f" ({total})" if total else "")
        began = self.now()
        progress = Progress(self, what, total, began)
        yield progress
        spent = self.now() - began
        self.add(name, spent)
        self.say("%s done in %.1f s", what, spent)

    def add(self, name: str, seconds: float) -> None:
        """Count `seconds` to phase `name` (a phase timed elsewhere)."""
        for i, (known, spent) in enumerate(self.phases):
            if known == name:
                self.phases[i] = (name, spent + seconds)
                return
        self.phases.append((name, seconds))

    def seconds(self, name: str) -> float:
        return sum(spent for known, spent in self.phases if known == name)

    def summary(self) -> str:
        """One line: the whole start-up so far and every phase's time, in order."""
        parts = ", ".join(f"{name} {spent:.1f} s" for name, spent in self.phases)
        return f"engine {self.engine} start-up {self.now() - self.started:.1f} s: {parts}"
