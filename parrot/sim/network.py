"""The emulated client↔service network: a seeded delay for every message.

The paper emulates 200–300 ms of network latency per client↔service interaction. The
frontend's transports call `delay()` once per message (submit, get, variable, session); each
application gets its own `NetworkDelay`, seeded from (run seed, application id), so an
application sees the same delay sequence whatever the other applications do.
"""

from __future__ import annotations

import random


class NetworkDelay:
    """A `Delay` callable: uniform in [low_s, high_s] from its own seeded generator."""

    def __init__(self, low_s: float, high_s: float, seed: int | str) -> None:
        if not 0.0 <= low_s <= high_s:
            raise ValueError(f"network delay: need 0 <= low <= high, got {low_s}, {high_s}")
        self.low_s, self.high_s = low_s, high_s
        self._rng = random.Random(f"net|{seed}")  # str seeds hash the same in every process
        self._stopped = False
        self.total_s = 0.0
        self.num_messages = 0

    def __call__(self) -> float:
        if self._stopped:
            return 0.0
        seconds = self._rng.uniform(self.low_s, self.high_s) if self.high_s > 0 else 0.0
        self.total_s += seconds
        self.num_messages += 1
        return seconds

    def stop(self) -> None:
        """Later messages (benchmark bookkeeping after the app finished) cost nothing."""
        self._stopped = True
