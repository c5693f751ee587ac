"""Output lengths estimated online, per semantic function: what the scheduler costs a call's
decode steps (and its KV) with, instead of the `max_tokens` cap or a length no real service
knows.

Rule: an output's estimate is a high quantile (`quantile`, 0.9 by default) of the lengths the
same function's output (its template and output name) produced in its most recent `window`
calls, clipped to this call's `max_tokens`. An output that stopped at its cap (or was made to
run to it, `ignore_eos`) tells only that its natural length is at least the cap: it counts as
unbounded, so a function whose calls run to their caps is costed at the cap, as before any
estimate. Cold start: a function with fewer than `min_samples` observations borrows the
estimate of every function's recent outputs together, and with too few of those too, a call
is costed at its cap.

Why a high quantile: the estimate sizes the KV a call is counted with as well as its finish
time, and an estimate below the real length over-fills an engine; the mean would do so for
half the calls.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Hashable
from dataclasses import dataclass

from parrot.errors import ConfigError
from parrot.validation import Checks


@dataclass(frozen=True)
class LengthEstimateConfig:
    quantile: float = 0.9        # of the recent lengths of a function's output
    window: int = 128            # recent observations kept per function output
    min_samples: int = 4         # fewer: the all-functions estimate (then the cap)
    max_functions: int = 4096    # function outputs remembered (least recently used dropped)

    def __post_init__(self) -> None:
        check = Checks("output_lengths", ConfigError)
        check.fraction("quantile", self.quantile)
        for key in ("window", "min_samples", "max_functions"):
            check.positive_int(key, getattr(self, key))


class _Window:
    """The last `size` observed lengths (math.inf: reached its cap)."""

    def __init__(self, size: int) -> None:
        self.lengths: deque[float] = deque(maxlen=size)

    def quantile(self, q: float) -> float:
        ordered = sorted(self.lengths)
        return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


class OutputLengthEstimator:
    """Per function output (any hashable key, e.g. (template source, output name)): `estimate`
    before a call is costed, `observe` when its output is complete."""

    def __init__(self, config: LengthEstimateConfig | None = None) -> None:
        self.config = config or LengthEstimateConfig()
        self._functions: OrderedDict[Hashable, _Window] = OrderedDict()
        self._all = _Window(self.config.window)

    def estimate(self, key: Hashable, max_tokens: int) -> int:
        """Estimated tokens of the output `key` of a call capped at `max_tokens` (1..cap)."""
        window = self._functions.get(key)
        if window is None or len(window.lengths) < self.config.min_samples:
            window = self._all
        if len(window.lengths) < self.config.min_samples:
            return max_tokens
        q = window.quantile(self.config.quantile)
        return max_tokens if q >= max_tokens else max(1, math.ceil(q))

    def observe(self, key: Hashable, num_tokens: int, max_tokens: int) -> None:
        """The output `key` of a call capped at `max_tokens` produced `num_tokens` tokens."""
        length = math.inf if num_tokens >= max_tokens else float(num_tokens)
        window = self._functions.pop(key, None) or _Window(self.config.window)
        self._functions[key] = window          # most recently used last
        window.lengths.append(length)
        self._all.lengths.append(length)
        if len(self._functions) > self.config.max_functions:
            self._functions.popitem(last=False)
