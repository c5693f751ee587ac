"""Measure an engine's speed profile through the engine protocol (Fill / Generate / Free).

The manager ranks engines and calibrates `latency_capacity: auto` with a `SpeedProfile`
(parrot/speed_profile.py): a cost per prefilled token and the time of one decode iteration as a
function of the batch's context tokens. A simulated engine knows its own; a real engine measures
it here, once at start-up (the builtin engine's `speed_probe` setting), and reports it in
`EngineInfo.speed_profile`. `bench/record_profile.py` records the simulator's profiles with the
same measurements.

* **prefill**: Fill contexts of a few lengths (each once untimed: a length's first Fill pays
  first-use costs that a serving engine pays once, not per request), then the best of the
  repeats; the least-squares line of time against tokens gives a fixed cost per prefill-only
  step (its intercept) and the cost per token (its slope).
* **decode**: Fill the largest batch's contexts once; for each batch size B, B Generates of
  S tokens run concurrently on the first B contexts (one batch), and one iteration is the
  elapsed time / S at `batch tokens` = the B contexts' mean length over the S steps, summed.
  The contexts are reused (they grow by S each time), so the probe prefills only the largest
  batch's tokens once.

Times come from the running loop's clock: wall time on a real loop, virtual time on the
simulation's (so the probe recovers a simulated engine's profile exactly).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from parrot.engines.protocol import Engine, EngineInfo, FillRequest, GenerateRequest
from parrot.speed_profile import SpeedProfile
from parrot.sampling import SamplingParams

Timer = Callable[[Awaitable[Any]], Awaitable[float]]

# Part of the key a kept profile is found by (the builtin engine's start cache): raised when a
# change makes earlier measurements wrong, so every engine measures itself again. 2: each Fill
# has tokens of its own (version 1's Fills shared one sequence, and an engine with prefix
# caching served them from its cache).
PROBE_VERSION = 2


@dataclass(frozen=True)
class ProbePlan:
    """What to measure: prefill lengths, decode batch sizes over contexts of `context_len`
    tokens, `decode_steps` per timed Generate, each point the best of `repeats`."""

    prefill_lens: tuple[int, ...]
    batch_sizes: tuple[int, ...]
    context_len: int
    decode_steps: int
    repeats: int

    def __post_init__(self) -> None:
        if len(set(self.prefill_lens)) < 2 or min(self.prefill_lens) < 1:
            raise ValueError(f"prefill_lens {self.prefill_lens}: two distinct lengths >= 1")
        if len(set(self.batch_sizes)) < 2 or min(self.batch_sizes) < 1 \
                or list(self.batch_sizes) != sorted(self.batch_sizes):
            raise ValueError(f"batch_sizes {self.batch_sizes}: two or more, increasing, >= 1")
        if self.context_len < 1 or self.decode_steps < 2 or self.repeats < 1:
            raise ValueError("context_len >= 1, decode_steps >= 2 and repeats >= 1")

    @property
    def max_context_tokens(self) -> int:
        """The longest context the decode measurement grows (it must fit the engine)."""
        return self.context_len + self.repeats * len(self.batch_sizes) * self.decode_steps

    @classmethod
    def for_engine(cls, info: EngineInfo, max_num_seqs: int, *, quick: bool = False
                   ) -> ProbePlan:
        """A plan that fits `info`'s KV cache and context window. The full plan spans batches
        of 1 to 64 sequences up to half the cache or 32,768 tokens, whichever is less: past the
        load where a latency engine is kept (the paper's rule lands at ~20k tokens on an H200
        with LLaMA-7B), so `latency_capacity: auto` interpolates instead of extrapolating.
        `quick`: a few small batches (a CPU engine; seconds, not minutes)."""
        kv_tokens = info.num_blocks_total * info.block_size
        window = info.max_context_len
        batches: tuple[int, ...]
        if quick:
            batches, steps, repeats, target = (1, 2, 4), 4, 1, 256
            lens = [32, 96]
        else:
            batches, steps, repeats, target = (1, 4, 16, 64), 16, 2, 32768
            lens = [256, 1024, 2048]
        # the largest batch the engine runs at once ends the list (two at least: an engine of
        # one sequence at a time is measured as if it batched two)
        largest = max(2, min(max_num_seqs, batches[-1]))
        batches = tuple(b for b in batches if b < largest) + (largest,)
        target = min(target, kv_tokens // 2)
        growth = repeats * len(batches) * steps
        # every context at its longest, with a partly filled last block, fits the cache
        context_len = min(target // largest, kv_tokens // largest - growth - info.block_size,
                          window - growth - 1)
        if context_len < 1:
            raise ValueError(f"an engine of {kv_tokens} KV tokens and a {window}-token window "
                             f"is too small to probe {largest} sequences")
        lens = [n for n in lens if n < min(window, kv_tokens // 2)] or [8, 16]
        if len(lens) < 2:
            lens = [max(1, lens[0] // 4), lens[0]]
        return cls(tuple(lens), batches, context_len, steps, repeats)


@dataclass(frozen=True)
class ProbeResult:
    prefill_base_ms: float                       # a prefill-only step's fixed cost
    prefill_ms_per_token: float
    prefill_points: tuple[tuple[int, float], ...]   # (tokens, ms): each length's best Fill
    decode_points: tuple[tuple[int, float], ...]    # (batch tokens, ms per iteration)

    def profile(self) -> SpeedProfile:
        """The cost profile: the decode points with each iteration at least as slow as the
        one of fewer tokens before it (a batch never gets faster by reading more; a dip is
        noise, and the capacity search assumes a step time that never falls), and a point at
        0 tokens: the empty batch's step, which the paper's capacity rule compares with and
        no probe can decode: the intercept of the least-squares line through all the points
        (not of the first two: one noisy pair must not tilt it; a slow batch of two on a busy
        CPU once put that at 0), within 0 and the first point."""
        points: list[tuple[int, float]] = []
        slowest = 0.0
        for tokens, ms in sorted(self.decode_points):
            slowest = max(slowest, ms)
            points.append((tokens, slowest))
        x0, y0 = points[0]
        if x0 > 0:
            line = least_squares([x for x, _ in points], [y for _, y in points])
            empty = line[0] if line is not None else y0
            points.insert(0, (0, min(y0, max(0.0, empty))))
        return SpeedProfile(self.prefill_ms_per_token, tuple(points))


async def loop_timed(awaitable: Awaitable[Any]) -> float:
    """Seconds `awaitable` takes on the running loop's clock."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    await awaitable
    return loop.time() - started


def token_ids(n: int, seed: str) -> tuple[int, ...]:
    """Deterministic ids in [100, 356) (inside any vocabulary a model serves: the tiny test
    shape has 512), a sequence of their own for each `seed` (the probe seeds each Fill with
    its context id). What they say does not change how long a step takes, but two Fills that
    start alike would: an engine that caches prompt prefixes (vLLM's APC, the builtin
    engine's `prefix_caching`) serves the second from its cache. An arithmetic sequence
    seeded by an integer did exactly that: its seeds 0, 256, 1024 and 2048 gave one sequence,
    so every timed Fill found its tokens cached and the measured prefill cost was ~0 ms a
    token (on an H100: 5e-4, then 4e-15), which let the step budget put 8,192 prefill tokens
    beside 250 decode rows."""
    rng = random.Random(seed)
    return tuple(rng.randrange(100, 356) for _ in range(n))


def per_token_through_origin(xs: Sequence[int], ys: Sequence[float]) -> float:
    """The slope b of the least-squares line y = b x (no intercept)."""
    return sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs)


def least_squares(xs: Sequence[int], ys: Sequence[float]) -> tuple[float, float] | None:
    """(intercept a, slope b) of the least-squares line y = a + b x; None when every x is
    the same (no line)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx <= 0:
        return None
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - b * mx, b


def prefill_line(xs: Sequence[int], ys: Sequence[float]) -> tuple[float, float]:
    """(intercept a >= 0, slope b) of the least-squares line y = a + b x; through the origin
    when the free line's intercept is negative or the lengths are all equal."""
    line = least_squares(xs, ys)
    if line is not None and line[0] >= 0 and line[1] >= 0:
        return line
    return 0.0, per_token_through_origin(xs, ys)


async def measure_prefill(engine: Engine, lens: Sequence[int], repeats: int,
                          timer: Timer | None = None, *, prefix: str = "probe"
                          ) -> tuple[float, float, list[tuple[int, float]]]:
    """(ms per prefill-only step, ms per prefilled token, the (tokens, ms) point of each
    length): the least-squares line of the points (prefill_line). Each length is filled once
    untimed first (36 ms against 21 ms for 512 tokens on an H200), then timed `repeats`
    times; a point is the best of its repeats."""
    timer = timer or loop_timed
    best: dict[int, float] = {}
    for n in lens:
        cid = f"{prefix}-warm-{n}"
        await engine.fill(FillRequest(cid, token_ids=token_ids(n, cid)))
        await engine.free_context(cid)
    for r in range(repeats):
        for n in lens:
            cid = f"{prefix}-prefill-{n}-{r}"
            seconds = await timer(engine.fill(FillRequest(cid, token_ids=token_ids(n, cid))))
            best[n] = min(best.get(n, seconds), seconds)
            await engine.free_context(cid)
    xs = list(best)
    ys = [best[n] for n in xs]
    base_s, per_token_s = prefill_line(xs, ys)
    return base_s * 1000.0, per_token_s * 1000.0, [(x, y * 1000.0) for x, y in zip(xs, ys)]


async def measure_decode(engine: Engine, plan: ProbePlan, timer: Timer | None = None, *,
                         prefix: str = "probe") -> list[tuple[int, float]]:
    """(batch tokens, ms per iteration) for each of the plan's batch sizes (module
    docstring); every context it makes is freed, also when a measurement fails."""
    timer = timer or loop_timed
    ids = [f"{prefix}-decode-{i}" for i in range(plan.batch_sizes[-1])]
    lengths = [plan.context_len] * len(ids)
    best: dict[int, tuple[float, int]] = {}
    steps = plan.decode_steps
    sampling = SamplingParams(max_tokens=steps, ignore_eos=True)
    try:
        await asyncio.gather(*(engine.fill(FillRequest(cid, token_ids=token_ids(
            plan.context_len, cid))) for cid in ids))
        for _ in range(plan.repeats):
            for batch in plan.batch_sizes:
                tokens = sum(lengths[:batch]) + batch * (steps // 2)
                seconds = await timer(asyncio.gather(*(
                    engine.generate_all(GenerateRequest(cid, sampling=sampling))
                    for cid in ids[:batch])))
                for i in range(batch):
                    lengths[i] += steps
                ms = seconds / steps * 1000.0
                if batch not in best or ms < best[batch][0]:
                    best[batch] = (ms, tokens)
    finally:
        await asyncio.gather(*(engine.free_context(cid) for cid in ids),
                             return_exceptions=True)
    return sorted((tokens, ms) for ms, tokens in best.values())


async def probe_speed(engine: Engine, plan: ProbePlan, timer: Timer | None = None
                      ) -> ProbeResult:
    """Measure `engine` by `plan` (a started engine; it serves nothing else meanwhile)."""
    base, per_token, prefill_points = await measure_prefill(engine, plan.prefill_lens,
                                                            plan.repeats, timer)
    decode_points = await measure_decode(engine, plan, timer)
    return ProbeResult(base, per_token, tuple(prefill_points), tuple(decode_points))
