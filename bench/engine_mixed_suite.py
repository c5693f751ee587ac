"""What a mixed step costs on the H200 (`bench_engine.py --suite-mixed`), and whether the
host or the GPU sets it.

A step that prefills arriving prompts beside running decodes cannot replay a decode graph: it
runs the piecewise prefill graphs with the attention eager between them (prefill_graphs.py).
Live gpts at its sustainable rate spent 36% of its step time in such steps, each ~3x a decode
graph step (docs/RESULTS.md, "What bounds gpts on one GPU"). For each case below, after one
unmeasured pass (graphs captured, kernels compiled), two measured passes of the same work:

* the forward synchronised before and after: the median decode-only step and mixed step
  (whole `runner.step`), and the mixed steps' median forward;
* the forward synchronised before only: the mixed steps' median forward enqueue time, the
  host's launch cost. Enqueue close to the synchronised forward means the host sets the
  mixed step's time, not the GPU.

Cases: 16 decodes over their own 1,024-token contexts with 128-token Fills joining (the fill
suite's serving case); gpts-like, 56 decodes forked from one 3,328-token prefix (64-token
suffixes) with 64-token Fills forked from the same prefix joining. Each mixed step's decode
rows are counted: a Fill that found every seat taken would run alone, not mixed. Then the
same Fills with no decodes running: a decode step plus that is what not mixing would cost.
Last, a pass of each under cProfile: the host functions the mixed steps' enqueue spends the
most in; and one with each mixed step's forward under torch.profiler: the GPU's own time in
it, by kernel (against the synchronised forward: what the GPU waited for).
"""

from __future__ import annotations

import asyncio
import cProfile
import contextlib
import io
import pstats
import statistics
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from engine_suite import StepClock, make_engine, prompts_for, table

JOINERS = 12
NEW_TOKENS = 300


@dataclass(frozen=True)
class Case:
    label: str
    rows: int            # running decodes
    context: int         # tokens of each decode's own context (past the shared prefix)
    shared_prefix: int   # tokens every decode and Fill forks from (0: none)
    fill: int            # tokens of each joining Fill


# The engine's max_num_seqs is 256: the running decodes leave seats for the joining Fills
# (a Fill takes a seat; with every seat taken it would wait for the decodes to end). The
# serving-like case is the tail of bench_serving's 256-in-flight run: ~250 rows decoding while
# each finished request's successor joins alone, a short prefill beside a full batch.
CASES = (Case("16 own contexts of 1,024, 128-token Fills", 16, 1024, 0, 128),
         Case("gpts-like: 56 rows sharing 3,328 tokens, 64-token Fills", 56, 64, 3328, 64),
         Case("serving-like: 240 own contexts of 256, 256-token Fills", 240, 256, 0, 256))


@contextlib.asynccontextmanager
async def _shared_prefix(engine, vocab: int, case: Case) -> AsyncIterator[str | None]:
    """The context every decode and Fill of `case` forks from (None: no shared prefix),
    freed after."""
    from parrot.engines.protocol import FillRequest

    if not case.shared_prefix:
        yield None
        return
    await engine.fill(FillRequest("sys", token_ids=prompts_for(1, case.shared_prefix, 41,
                                                               vocab)[0]))
    try:
        yield "sys"
    finally:
        await engine.free_context("sys")


async def _pass(torch, engine, vocab: int, case: Case, clock_mode: str | None,
                profiler=None) -> tuple[StepClock | None, list[float]]:
    """One pass of `case`: its StepClock with clock_mode ("synced" / "enqueue"; the
    prefilling steps' forwards under `profiler` when given: cProfile or DeviceProfile), and
    the joining Fills' walls."""
    from parrot.engines.protocol import FillRequest, GenerateRequest
    from parrot.sampling import SamplingParams

    async with _shared_prefix(engine, vocab, case) as parent:
        prompts = prompts_for(case.rows, case.context, 42, vocab)
        await asyncio.gather(*(engine.fill(FillRequest(f"d{i}", parent, token_ids=p))
                               for i, p in enumerate(prompts)))
        clock = (None if clock_mode is None else
                 StepClock(torch, engine._runner, enqueue_only=clock_mode == "enqueue",
                           profiler=profiler))
        walls: list[float] = []

        async def joiners() -> None:
            await asyncio.sleep(0.3)
            for i, p in enumerate(prompts_for(JOINERS, case.fill, 43, vocab)):
                start = time.perf_counter()
                await engine.fill(FillRequest(f"j{i}", parent, token_ids=p))
                walls.append(time.perf_counter() - start)
                await engine.free_context(f"j{i}")
                await asyncio.sleep(0.05)

        params = SamplingParams(max_tokens=NEW_TOKENS, ignore_eos=True)
        try:
            await asyncio.gather(joiners(), *(engine.generate_all(
                GenerateRequest(f"d{i}", sampling=params)) for i in range(case.rows)))
        finally:
            if clock is not None:
                clock.remove()
            for i in range(case.rows):
                await engine.free_context(f"d{i}")
    return clock, walls


async def _fills_alone(torch, engine, vocab: int, case: Case) -> list[float]:
    """Seconds of each step of the case's joining Fills run with no decodes beside them: the
    second half of the alternative to a mixed step (a decode graph step, then the Fill)."""
    from parrot.engines.protocol import FillRequest

    async with _shared_prefix(engine, vocab, case) as parent:
        clock = StepClock(torch, engine._runner, enqueue_only=False)
        try:
            for i, p in enumerate(prompts_for(JOINERS, case.fill, 44, vocab)):
                await engine.fill(FillRequest(f"a{i}", parent, token_ids=p))
                await engine.free_context(f"a{i}")
        finally:
            clock.remove()
    return [sec for _, prefill, sec in clock.steps if prefill]


def _prefilling(clock: StepClock) -> list[float]:
    """Seconds of the forwards of the clock's steps that prefill (the mixed steps)."""
    return [sec for prefills, sec in clock.forwards if prefills]


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1e3:.2f}" if values else "-"


async def _case(torch, engine, vocab: int, case: Case, log) -> list[str]:
    await _pass(torch, engine, vocab, case, None)                       # warm
    synced, walls = await _pass(torch, engine, vocab, case, "synced")
    enqueued, _ = await _pass(torch, engine, vocab, case, "enqueue")
    alone = await _fills_alone(torch, engine, vocab, case)
    assert synced is not None and enqueued is not None
    decode = [sec for _, prefill, sec in synced.steps if not prefill]
    mixed = [sec for _, prefill, sec in synced.steps if prefill]
    rows = [tokens - prefill for tokens, prefill, _ in synced.steps if prefill]
    row = [case.label, f"{len(decode)} / {len(mixed)}",
           f"{statistics.median(rows):.0f}" if rows else "-", _ms(decode), _ms(mixed),
           _ms(_prefilling(synced)), _ms(_prefilling(enqueued)),
           _ms(alone), _ms(walls)]
    log(" | ".join(row))
    return row


async def _host_profile(torch, engine, vocab: int, case: Case, log) -> list[str]:
    """The host functions the mixed steps' forwards (enqueue only) spend the most time in,
    under cProfile (which slows Python: the ranking, not the times, is the finding)."""
    profiler = cProfile.Profile()
    clock, _ = await _pass(torch, engine, vocab, case, "enqueue", profiler)
    assert clock is not None
    mixed = len(_prefilling(clock))
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(25)
    lines = [f"#### Host profile: {case.label}, {mixed} mixed steps' forwards (enqueue "
             "only), top 25 by own time", "", "```", *text.getvalue().strip().splitlines()[-32:],
             "```", ""]
    log("\n".join(lines))
    return lines


class DeviceProfile:
    """A StepClock profiler (enable / disable around each prefilling forward) that runs the
    forward alone under torch.profiler, synchronised on both sides (so its pass is slow and
    not timed): the kernels' device time per mixed step, by name."""

    HOST = False     # record the host's side too (a subclass's timeline)

    def __init__(self, torch) -> None:
        self.torch, self.steps, self._prof = torch, 0, None
        self.kernel_us: dict[str, float] = {}

    def enable(self) -> None:
        acts = self.torch.profiler.ProfilerActivity
        self._prof = self.torch.profiler.profile(
            activities=[acts.CPU, acts.CUDA] if self.HOST else [acts.CUDA])
        self.torch.cuda.synchronize()
        self._prof.start()

    def disable(self) -> None:
        self.torch.cuda.synchronize()
        self._prof.stop()
        self.steps += 1
        self._collect(self._prof)

    def _collect(self, prof) -> None:
        """The forward's kernels' device time, by name, into kernel_us."""
        for event in prof.key_averages():
            us = getattr(event, "device_time_total", None)
            if us is None:
                us = getattr(event, "cuda_time_total", 0.0)
            if us and not event.key.startswith(("cuda", "Memcpy", "Memset")):
                self.kernel_us[event.key] = self.kernel_us.get(event.key, 0.0) + us

    def lines(self, label: str, top: int = 12) -> list[str]:
        per_step = {k: v / max(1, self.steps) for k, v in self.kernel_us.items()}
        total = sum(per_step.values())
        out = [f"#### Device time: {label}, {self.steps} mixed steps' forwards, kernels "
               f"{total / 1e3:.2f} ms a step", "", "| kernel | ms a step |", "|---|---|"]
        ranked = sorted(per_step.items(), key=lambda kv: -kv[1])
        out += [f"| `{name[:90]}` | {us / 1e3:.3f} |" for name, us in ranked[:top]]
        rest = sum(us for _, us in ranked[top:])
        return out + [f"| the other {max(0, len(ranked) - top)} | {rest / 1e3:.3f} |", ""]


async def _device_profile(torch, engine, vocab: int, case: Case, log) -> list[str]:
    """The mixed steps' kernels by device time: a pass whose StepClock (installed after the
    set-up Fills, so only the joining Fills' steps prefill) profiles each on the GPU."""
    profile = DeviceProfile(torch)
    await _pass(torch, engine, vocab, case, "enqueue", profile)
    lines = profile.lines(case.label)
    log("\n".join(lines))
    return lines


async def run_mixed(torch, bundle, log) -> list[str]:
    vocab = bundle.shape.vocab_size
    # 9,000 blocks of 16: the serving-like case's 240 x (256 + 300) tokens and its Fills
    engine, start_s = make_engine(bundle, "mixed", num_blocks=9000, max_num_seqs=256,
                                  max_batch_tokens=4096, max_context_len=4096,
                                  prefill_graph_max_tokens=512)
    try:
        rows = [await _case(torch, engine, vocab, case, log) for case in CASES]
        profiles = [line for case in CASES
                    for line in await _host_profile(torch, engine, vocab, case, log)]
        profiles += [line for case in CASES
                     for line in await _device_profile(torch, engine, vocab, case, log)]
        stats = await engine.stats()
    finally:
        await engine.close()
    out = table(f"Mixed steps, prefill graphs to 512 rows (engine start-up {start_s:.1f} s; "
                f"{NEW_TOKENS} new tokens per decode, {JOINERS} Fills joining)",
                ["case", "decode / mixed steps", "decode rows in a mixed step (median)",
                 "decode step ms (median)",
                 "mixed step ms (median)", "mixed forward ms, synchronised (median)",
                 "mixed forward enqueue ms (median)",
                 "the same Fill alone, step ms (median)", "a joining Fill's wall ms"], rows)
    from parrot_kernels.launch import DIRECT_LAUNCH, launch_counts
    direct, replayed, jit = launch_counts()
    count = stats.counter
    out += [f"steps: {count('num_steps')}, of them {count('num_graph_steps')} decode graphs and "
            f"{count('num_piecewise_steps')} piecewise; captures while serving: "
            f"{count('graph_captures_at_runtime')}; Triton launches direct {direct:,}, replayed "
            f"{replayed:,}, through the JIT {jit:,} (direct launch "
            f"{'on' if DIRECT_LAUNCH else 'off'})", "", *profiles]
    log("\n".join(out))
    return out


def run(torch, bundle, log) -> list[str]:
    return asyncio.run(run_mixed(torch, bundle, log))
