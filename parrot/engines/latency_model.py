"""The simulated engine's latency model: how long one continuous-batching iteration takes.

One iteration runs a decode step for every generating sequence plus a chunk of prefill:

    iteration_s = decode_s(num_decode_seqs, decode_kv_tokens) + prefill_per_token_ms * prefill_tokens

`decode_kv_tokens` is the total context length of the decoding sequences (the KV cache every
decode step reads). Decode time is either the formula

    decode_base_ms + decode_per_seq_ms * num_decode_seqs + decode_per_token_ms * decode_kv_tokens

(the base is the weight read, paid once per iteration) or, when `decode_table` is given, a
piecewise-linear interpolation of measured (batch tokens, ms) points, extrapolated past the last
point with the last segment's slope. An iteration without decodes pays no decode time.
`zero_latency` makes every iteration take no time (benchmarks of the manager).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Any

from parrot.errors import InvalidRequestError


class EngineConfigError(InvalidRequestError):
    """An engine's configuration has an unknown key or an invalid value."""


def _number(owner: str, key: str, value: Any, *, positive: bool = False) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (positive and value == 0):
        bound = "> 0" if positive else ">= 0"
        raise EngineConfigError(f"{owner}.{key}: {value!r} must be a finite number {bound}")
    return float(value)


@dataclass(frozen=True)
class LatencyModel:
    prefill_per_token_ms: float = 0.15
    decode_base_ms: float = 22.0
    decode_per_seq_ms: float = 0.0
    decode_per_token_ms: float = 0.003
    # ((batch_tokens, decode_ms), ...) sorted by batch_tokens; replaces the decode formula.
    decode_table: tuple[tuple[int, float], ...] | None = None
    zero_latency: bool = False

    def __post_init__(self) -> None:
        for key in ("prefill_per_token_ms", "decode_base_ms", "decode_per_seq_ms",
                    "decode_per_token_ms"):
            _number("LatencyModel", key, getattr(self, key))
        if not isinstance(self.zero_latency, bool):
            raise EngineConfigError(f"zero_latency: {self.zero_latency!r} must be a boolean")
        if self.decode_table is not None:
            table = self.decode_table
            if len(table) < 2:
                raise EngineConfigError(
                    f"decode_table: {table!r} needs at least two (batch_tokens, ms) points")
            xs = [x for x, _ in table]
            if xs != sorted(set(xs)):
                raise EngineConfigError(
                    f"decode_table: batch_tokens {xs} must be strictly increasing")

    @classmethod
    def parse_table(cls, value: Any) -> tuple[tuple[int, float], ...]:
        """Wire/YAML form: a list of [batch_tokens, ms] pairs."""
        if not isinstance(value, (list, tuple)):
            raise EngineConfigError(f"decode_table: {value!r} must be a list of [tokens, ms]")
        points = []
        for point in value:
            if not isinstance(point, (list, tuple)) or len(point) != 2 or \
                    not isinstance(point[0], int) or isinstance(point[0], bool) or point[0] < 0:
                raise EngineConfigError(
                    f"decode_table: point {point!r} must be [batch_tokens >= 0, ms]")
            points.append((point[0], _number("decode_table", str(point[0]), point[1])))
        return tuple(points)

    def decode_ms(self, num_decode_seqs: int, decode_kv_tokens: int) -> float:
        if num_decode_seqs == 0 or self.zero_latency:
            return 0.0
        if self.decode_table is None:
            return (self.decode_base_ms + self.decode_per_seq_ms * num_decode_seqs
                    + self.decode_per_token_ms * decode_kv_tokens)
        return _interpolate(self.decode_table, decode_kv_tokens)

    def iteration_seconds(self, num_decode_seqs: int, decode_kv_tokens: int,
                          prefill_tokens: int) -> float:
        if self.zero_latency:
            return 0.0
        ms = (self.decode_ms(num_decode_seqs, decode_kv_tokens)
              + self.prefill_per_token_ms * prefill_tokens)
        return ms / 1000.0


def _interpolate(table: tuple[tuple[int, float], ...], x: int) -> float:
    xs = [p[0] for p in table]
    i = bisect.bisect_right(xs, x)
    if i == 0:
        return table[0][1]  # below the first point: flat
    # interpolate inside [i-1, i]; past the end extrapolate with the last segment
    lo, hi = (table[i - 1], table[i]) if i < len(table) else (table[-2], table[-1])
    slope = (hi[1] - lo[1]) / (hi[0] - lo[0])
    return lo[1] + slope * (x - lo[0])
