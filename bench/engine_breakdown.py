"""Where a decode step of the builtin engine goes (used by engine_suite.py): wall time per
token, time inside runner.step and graphs.run, the graph replay alone, and the device time per
kernel name of a replay (torch.profiler)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from engine_suite import NEW_SHORT, PROMPT, decode_run, prompts_for, table


def median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2] if xs else float("nan")


@contextlib.contextmanager
def step_timings(runner) -> Iterator[dict[str, list[float]]]:
    """Seconds spent in each runner.step and graphs.run call while the block runs."""
    spent: dict[str, list[float]] = {"step": [], "run": []}

    def timed(times: list[float], fn):
        def wrapper(*args):
            t = time.perf_counter()
            try:
                return fn(*args)
            finally:
                times.append(time.perf_counter() - t)
        return wrapper

    step, run = runner.step, runner.graphs.run
    runner.step, runner.graphs.run = timed(spent["step"], step), timed(spent["run"], run)
    try:
        yield spent
    finally:
        runner.step, runner.graphs.run = step, run


def replay_ms(torch, graph, replays: int = 20) -> float:
    """The captured graph alone on the GPU, ms per replay (CUDA events)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / replays


def profile_kernels(torch, graph, log) -> None:
    try:
        kernel_profile(torch, graph, log)
    except Exception as exc:  # the profile is a diagnostic: never fail the run for it
        log(f"profile failed: {exc!r}")


async def breakdown(engine, bundle, batches: list[int], log) -> list[str]:
    """Where a decode step's time goes: wall time per token, inside runner.step, inside
    graphs.run (input copies + replay launch), and the graph replay alone on the GPU."""
    import torch

    runner, rows = engine._runner, []
    for b in batches:
        with step_timings(runner) as spent:
            prompts = prompts_for(b, PROMPT, b, bundle.shape.vocab_size)
            _, dec, _ = await decode_run(engine, prompts, NEW_SHORT, "b")
        graph = runner.graphs._graphs[(b, 0, 0, 64)].graph
        rows.append([str(b), f"{dec / NEW_SHORT * 1e3:.2f}", f"{median(spent['step']) * 1e3:.2f}",
                     f"{median(spent['run']) * 1e3:.2f}", f"{replay_ms(torch, graph):.2f}"])
        log("| " + " | ".join(rows[-1]) + " |")
        profile_kernels(torch, graph, log)
    return table("Where a decode step goes (medians; replay = the graph alone, GPU time)",
                 ["batch", "wall ms per token", "runner.step ms", "graphs.run ms (copies + "
                  "launch)", "graph replay ms"], rows)


def kernel_profile(torch, graph, log) -> None:
    """Device time per kernel name over 5 replays (printed, not tabled)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            graph.replay()
        torch.cuda.synchronize()
    totals: dict[str, float] = {}
    for event in prof.events():
        if event.device_type.name == "CUDA":
            totals[event.name[:90]] = totals.get(event.name[:90], 0.0) + event.device_time / 5
    total = sum(totals.values())
    log(f"kernel time per replay: {total / 1e3:.3f} ms over {len(totals)} kernel names")
    for name, us in sorted(totals.items(), key=lambda kv: -kv[1])[:12]:
        log(f"  {us / 1e3:8.3f} ms  {us / max(total, 1e-9):5.1%}  {name}")
