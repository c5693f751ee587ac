"""Pacing a simulated engine's iterations on a real clock: back-to-back iterations are timed
from where the previous one ended on paper, so the few hundred microseconds a timer wakes up
late never add up over a run; a longer delay is a stall, which a real engine would not make
up either. On a virtual clock no timer is late and every sleep is the iteration's own time."""

from __future__ import annotations

# A real-clock timer wakes up to this much late (the loop's timeout granularity is 1 ms;
# measured 0.75 ms per 4.5-ms sleep on the 2-core VM): the next iteration makes it up; a
# longer delay is a stall, not made up.
LATE_TIMER_S = 0.002


class StepPacer:
    def __init__(self) -> None:
        self.step_end = 0.0     # loop time at which the last iteration ends on paper

    def idle(self, now: float) -> None:
        """The engine waited for work: the next iteration starts from `now`, not late."""
        self.step_end = now

    def sleep_for(self, seconds: float, now: float) -> float:
        """How long to sleep at loop time `now` for an iteration of `seconds`: from where the
        previous one ended on paper when that timer woke up to LATE_TIMER_S late (the lateness
        is made up), else from now (on time; the first iteration after idling; a stall)."""
        if now - LATE_TIMER_S <= self.step_end < now:
            self.step_end += seconds
            return max(0.0, self.step_end - now)
        self.step_end = now + seconds
        return seconds
