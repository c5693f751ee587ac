"""What a placement costs: an engine's speed profile and the estimated finish time of new work.

The profile has the shape of the simulated engine's latency profiles (configs/profiles/, see
parrot/engines/latency_model.py): prompt tokens are prefilled at a fixed cost per token, and one
decode iteration (one output token for every running sequence) costs a piecewise-linear function
of the batch's context tokens. A policy reads it from `EngineView.profile`; the manager fills it
from the engine's profile where one is configured, else from the one the engine reports in its
info (measured by parrot/engines/speed_probe.py), else `DEFAULT_PROFILE`. It sits below both
the engines and the policies (it imports nothing of the project), since an engine reports one
and a policy reads one.

The estimate is deliberately simple — it only has to rank engines, not predict wall time:

    finish(engine, work) = (prefill_ms × (queued prompt tokens + work's prompt tokens)
                            + work's output tokens × decode_ms(engine load + work's tokens)) / speed

An idle engine finishes new work sooner than a loaded one, and a group split over k engines
runs k smaller batches in parallel, so the estimate spreads work while engines are idle and
keeps it together when splitting does not shorten it.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class ProfileError(ValueError):
    """A speed profile has an invalid value; the message names it."""


@dataclass(frozen=True)
class SpeedProfile:
    """How fast an engine prefills and decodes (milliseconds, at speed 1)."""

    prefill_ms_per_token: float
    # ((batch context tokens, ms per decode iteration), ...), strictly increasing tokens;
    # extrapolated past the last point with the last segment's slope.
    decode_points: tuple[tuple[int, float], ...]

    def __post_init__(self) -> None:
        if not (isinstance(self.prefill_ms_per_token, (int, float))
                and math.isfinite(self.prefill_ms_per_token) and self.prefill_ms_per_token >= 0):
            raise ProfileError(f"prefill_ms_per_token: {self.prefill_ms_per_token!r} must be a "
                               "finite number >= 0")
        xs = [x for x, _ in self.decode_points]
        if len(xs) < 2 or xs != sorted(set(xs)) or any(
                not math.isfinite(ms) or ms < 0 for _, ms in self.decode_points):
            raise ProfileError(f"decode_points: {self.decode_points!r} needs >= 2 points with "
                               "strictly increasing tokens and finite ms >= 0")
        object.__setattr__(self, "_xs", tuple(xs))
        # (x, ms, slope) of each segment's left point: the slope is the division decode_ms
        # would repeat per call (the policy prices every queued call on every engine)
        object.__setattr__(self, "_segments", tuple(
            (lo[0], lo[1], (hi[1] - lo[1]) / (hi[0] - lo[0]))
            for lo, hi in zip(self.decode_points, self.decode_points[1:])))

    def decode_ms(self, batch_tokens: int) -> float:
        # `_xs` and `_segments` are caches __post_init__ sets, not fields: declaring them would
        # add them to the dataclass's fields (asdict, replace) of a frozen value type.
        i = bisect.bisect_right(self._xs, batch_tokens)  # type: ignore[attr-defined]
        if i == 0:
            return self.decode_points[0][1]
        segments = self._segments  # type: ignore[attr-defined]
        # past the last point: the last segment, extrapolated
        x, ms, slope = segments[i - 1] if i <= len(segments) else segments[-1]
        return ms + slope * (batch_tokens - x)

    def finish_ms(self, *, prefill_tokens: int, output_tokens: int, batch_tokens: int,
                  speed: float = 1.0) -> float:
        """Estimated time until work with `output_tokens` decode steps finishes on an engine
        that must first prefill `prefill_tokens` and then decodes a batch of `batch_tokens`."""
        decode = self.decode_ms(batch_tokens) * output_tokens if output_tokens else 0.0
        return (self.prefill_ms_per_token * prefill_tokens + decode) / speed

    def max_batch_tokens(self, decode_ms: float) -> int:
        """The most batch tokens whose decode iteration takes at most `decode_ms` (0 when even
        an empty batch is slower). Used to calibrate an engine's token capacities."""
        if self.decode_ms(0) > decode_ms:
            return 0
        low, high = 0, 1
        while self.decode_ms(high) <= decode_ms and high < 1 << 30:
            low, high = high, high * 2
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (mid, high) if self.decode_ms(mid) <= decode_ms else (low, mid)
        return low

    def tokens_at_slowdown(self, ratio: float, *, round_to: int = 1024) -> int:
        """The batch tokens at which a decode iteration takes `ratio` x the empty batch's,
        rounded down to `round_to` (at least `round_to`)."""
        tokens = self.max_batch_tokens(ratio * self.decode_ms(0))
        return max(round_to, tokens // round_to * round_to)

    def to_latency_profile(self) -> dict[str, Any]:
        """The profile in the simulator's keys (`from_latency_profile` reads it back): how an
        engine reports the profile it measured (EngineInfo.speed_profile, JSON)."""
        return {"prefill_per_token_ms": self.prefill_ms_per_token,
                "decode_table": [[x, ms] for x, ms in self.decode_points]}

    @classmethod
    def from_latency_profile(cls, data: Mapping[str, Any]) -> SpeedProfile:
        """From a simulator profile's keys (configs/profiles/*.yaml): `prefill_per_token_ms` and
        either `decode_table` or the `decode_base_ms`/`decode_per_token_ms` formula."""
        prefill = float(data.get("prefill_per_token_ms", DEFAULT_PROFILE.prefill_ms_per_token))
        table = data.get("decode_table")
        if table is not None:
            points = tuple((int(x), float(ms)) for x, ms in table)
        elif "decode_base_ms" in data or "decode_per_token_ms" in data:
            base = float(data.get("decode_base_ms", 22.0))
            slope = float(data.get("decode_per_token_ms", 0.003))
            points = ((0, base), (1 << 16, base + slope * (1 << 16)))
        else:
            points = DEFAULT_PROFILE.decode_points
        return cls(prefill, points)


# LLaMA-13B on an A100-80GB (configs/profiles/a100_llama13b.yaml): the paper's setting. Only
# the shape matters for ranking engines (a fixed weight-read cost per iteration plus a cost per
# context token), so it stands in for engines that report no profile of their own.
DEFAULT_PROFILE = SpeedProfile(
    prefill_ms_per_token=0.15,
    decode_points=((0, 22.0), (1024, 25.0), (2048, 28.0), (4096, 34.0), (6144, 40.0),
                   (8192, 47.0), (12288, 63.0), (16384, 82.0), (24576, 125.0),
                   (32768, 172.0), (49152, 280.0)))


# The paper keeps a latency engine at ~6,144 tokens, where one decode iteration of its A100
# LLaMA-13B takes ~40 ms: 40 / 22 = 1.82x the empty batch's. The same slowdown on another
# engine's profile is its latency capacity (`latency_capacity: auto`).
PAPER_LATENCY_STEP_RATIO = 40.0 / 22.0


def calibrated_latency_capacity(profile: SpeedProfile) -> int:
    """The latency capacity the paper's rule gives an engine of `profile`: the batch tokens at
    which a decode iteration takes PAPER_LATENCY_STEP_RATIO x the empty batch's, rounded down
    to 1024 (6,144 on the paper's A100 LLaMA-13B, DEFAULT_PROFILE; 20,480 on
    configs/profiles/h200_llama7b.yaml)."""
    return profile.tokens_at_slowdown(PAPER_LATENCY_STEP_RATIO)
