"""What a short Fill costs on the H200 (`bench_engine.py --suite-fill`), and where it goes.

The simulator charges prefill per token with no fixed cost; recorded single Fills of 128
tokens took 21-26 ms where reading the weights once takes ~3 ms. This suite measures:

* one Fill at a time, idle engine, 16 / 128 / 512 / 2,048 tokens: wall per Fill through the
  engine protocol, and inside it the host lists (prepare_host), the device inputs
  (to_device), the forward pass synchronised (prefill graphs or eager: device time plus
  launch time it does not hide), the forward's enqueue time alone (synchronised before, not
  after: the host's launch cost), the rest of the step and the loop outside the steps;
* one 128-token Fill under torch.profiler: kernel launches, device time, the host ops that
  cost the most;
* the serving case: 128-token Fills joining 16 running decodes (1,024-token contexts): the
  step times of decode-only steps against those of the mixed steps;
* all of it with the engine's prefill graphs (prefill_graphs.py) and without, and the greedy
  tokens of both.
"""

from __future__ import annotations

import asyncio
import statistics
import time

from engine_suite import StepClock, ceilings, make_engine, prompts_for, table, weight_bytes

LENGTHS = (16, 128, 512, 2048)
TIMED = 10


async def _fills(engine, prompts, tag: str) -> list[float]:
    """Wall seconds of each Fill, one at a time (each context freed after)."""
    import torch

    from parrot.engines.protocol import FillRequest

    walls = []
    for i, p in enumerate(prompts):
        torch.cuda.synchronize()
        start = time.perf_counter()
        await engine.fill(FillRequest(f"{tag}{i}", token_ids=p))
        torch.cuda.synchronize()
        walls.append(time.perf_counter() - start)
        await engine.free_context(f"{tag}{i}")
    return walls


async def _solo(torch, engine, vocab: int, floor_ms: float, log) -> list[str]:
    rows = []
    for n in LENGTHS:
        prompts = prompts_for(3 * TIMED + 3, n, 100 + n, vocab)
        await _fills(engine, prompts[:3], f"w{n}-")                       # warm this length
        walls = await _fills(engine, prompts[3:3 + TIMED], f"t{n}-")
        clock = StepClock(torch, engine._runner, enqueue_only=False)
        try:
            split_walls = await _fills(engine, prompts[3 + TIMED:3 + 2 * TIMED], f"s{n}-")
        finally:
            clock.remove()
        enqueue = StepClock(torch, engine._runner, enqueue_only=True)
        try:
            await _fills(engine, prompts[3 + 2 * TIMED:], f"e{n}-")
        finally:
            enqueue.remove()
        per = {k: v / TIMED * 1e3 for k, v in clock.spent.items()}
        outside = sum(split_walls) / TIMED * 1e3 - per["step"]
        rest = per["step"] - per["prepare_host"] - per["forward"]   # forward has to_device
        enqueued = (enqueue.spent["enqueue"] - enqueue.spent["to_device"]) / TIMED * 1e3
        rows.append([str(n), f"{statistics.median(walls) * 1e3:.2f}",
                     f"{per['prepare_host']:.2f}", f"{per['to_device']:.2f}",
                     f"{per['forward'] - per['to_device']:.2f}", f"{enqueued:.2f}",
                     f"{rest:.2f}", f"{outside:.2f}",
                     f"{len(clock.steps) / TIMED:.1f}"])
        log(f"fill {n}: " + " | ".join(rows[-1]))
    return table(f"One Fill at a time, idle engine (median wall of {TIMED}; the parts: mean "
                 f"per Fill of a second run of {TIMED}; weights read once: {floor_ms:.2f} ms)",
                 ["tokens", "wall ms", "prepare_host", "to_device", "forward (synced)",
                  "forward enqueue only", "rest of the step", "outside the steps",
                  "steps per Fill"], rows)


async def _profiled(torch, engine, vocab: int, log) -> list[str]:
    from torch.profiler import ProfilerActivity, profile

    prompts = prompts_for(3, 128, 9, vocab)
    await _fills(engine, prompts[:2], "pw")
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        wall = (await _fills(engine, prompts[2:], "pp"))[0]
    kernels: dict[str, float] = {}
    launches = 0
    for event in prof.events():
        if event.device_type.name == "CUDA":
            launches += 1
            kernels[event.name[:70]] = kernels.get(event.name[:70], 0.0) + event.device_time
    gpu = sum(kernels.values()) / 1e3
    out = table(f"One 128-token Fill under the profiler: wall {wall * 1e3:.1f} ms, "
                f"{launches} kernels, {gpu:.2f} ms of device time (top 10)",
                ["ms", "kernel"],
                [[f"{us / 1e3:.3f}", name] for name, us in
                 sorted(kernels.items(), key=lambda kv: -kv[1])[:10]])
    host = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:15]
    out += table("... its host ops by self CPU time (top 15)",
                 ["self CPU ms", "calls", "op"],
                 [[f"{e.self_cpu_time_total / 1e3:.2f}", str(e.count), e.key[:70]]
                  for e in host])
    log("\n".join(out))
    return out


async def _mixed(torch, engine, vocab: int, log) -> list[str]:
    """16 decodes over 1,024-token contexts; 128-token Fills join one after another."""
    from parrot.engines.protocol import FillRequest, GenerateRequest
    from parrot.sampling import SamplingParams

    prompts = prompts_for(16, 1024, 21, vocab)
    await asyncio.gather(*(engine.fill(FillRequest(f"d{i}", token_ids=p))
                           for i, p in enumerate(prompts)))
    params = SamplingParams(max_tokens=400, ignore_eos=True)
    clock = StepClock(torch, engine._runner, enqueue_only=False)
    fill_walls: list[float] = []

    async def joiners() -> None:
        fills = prompts_for(12, 128, 22, vocab)
        await asyncio.sleep(0.3)
        for i, p in enumerate(fills):
            start = time.perf_counter()
            await engine.fill(FillRequest(f"j{i}", token_ids=p))
            fill_walls.append(time.perf_counter() - start)
            await engine.free_context(f"j{i}")
            await asyncio.sleep(0.05)

    try:
        await asyncio.gather(joiners(), *(engine.generate_all(
            GenerateRequest(f"d{i}", sampling=params)) for i in range(16)))
    finally:
        clock.remove()
        for i in range(16):
            await engine.free_context(f"d{i}")
    decode = [s for _, p, s in clock.steps if p == 0]
    mixed = [s for _, p, s in clock.steps if p > 0]
    rows = [["decode only (16 rows)", str(len(decode)),
             f"{statistics.median(decode) * 1e3:.2f}" if decode else "-"],
            ["16 decode rows + one 128-token Fill", str(len(mixed)),
             f"{statistics.median(mixed) * 1e3:.2f}" if mixed else "-"],
            ["a joining Fill's wall (protocol)", str(len(fill_walls)),
             f"{statistics.median(fill_walls) * 1e3:.2f}" if fill_walls else "-"]]
    out = table("Fills joining running decodes (the forward synchronised: median step ms)",
                ["step", "count", "median ms"], rows)
    log("\n".join(out))
    return out


async def _greedy(engine, vocab: int) -> list[list[int]]:
    """32 greedy tokens after Fills of 8 random lengths (100-400 tokens), all at once."""
    import random

    from parrot.engines.protocol import FillRequest, GenerateRequest
    from parrot.sampling import SamplingParams

    rng = random.Random(3)
    prompts = [p[:rng.randint(100, 400)] for p in prompts_for(8, 400, 31, vocab)]
    await asyncio.gather(*(engine.fill(FillRequest(f"g{i}", token_ids=p))
                           for i, p in enumerate(prompts)))
    params = SamplingParams(max_tokens=32, ignore_eos=True)
    results = await asyncio.gather(*(engine.generate_all(GenerateRequest(f"g{i}",
                                                                         sampling=params))
                                     for i in range(len(prompts))))
    for i in range(len(prompts)):
        await engine.free_context(f"g{i}")
    return [list(r.token_ids) for r in results]


async def run_fill(torch, bundle, log) -> list[str]:
    """The same measurements with the engine's prefill graphs (the default, 512 rows) and
    without them (prefill_graph_max_tokens 0: every step but decode-only ones eager)."""
    import gc

    bw, _ = ceilings(torch)
    floor_ms = weight_bytes(bundle) / bw * 1e3   # the copy rate, as the suite's TPOT floor
    vocab = bundle.shape.vocab_size
    out: list[str] = []
    tokens: dict[str, list[list[int]]] = {}
    for label, max_tokens in (("prefill graphs to 512 rows", 512), ("eager", 0)):
        engine, start_s = make_engine(bundle, "fill", num_blocks=3000, max_num_seqs=64,
                                      max_batch_tokens=4096, max_context_len=4096,
                                      prefill_graph_max_tokens=max_tokens)
        try:
            out += [f"## {label} (engine start-up {start_s:.1f} s)", ""]
            out += await _solo(torch, engine, vocab, floor_ms, log)
            log("\n".join(out))
            if max_tokens:
                out += await _profiled(torch, engine, vocab, log)
            out += await _mixed(torch, engine, vocab, log)
            tokens[label] = await _greedy(engine, vocab)
            stats = await engine.stats()
            count = stats.counter
            out += [f"steps: {count('num_steps')}, of them {count('num_graph_steps')} decode "
                    f"graphs and {count('num_piecewise_steps')} piecewise; captures while "
                    f"serving: {count('graph_captures_at_runtime')}", ""]
        finally:
            await engine.close()
        del engine
        gc.collect()
        torch.cuda.empty_cache()
    a, b = tokens.values()
    equal = sum(x == y for p, q in zip(a, b) for x, y in zip(p, q))
    leading = [next((i for i, (x, y) in enumerate(zip(p, q)) if x != y), len(p))
               for p, q in zip(a, b)]
    out += table("Greedy tokens, prefill graphs vs eager (8 Fills of 100-400 tokens, 32 "
                 "tokens each; bf16 random weights: GEMMs over padded rows round differently)",
                 ["equal tokens", "leading equal tokens per request"],
                 [[f"{equal}/{sum(len(p) for p in a)}", " ".join(map(str, leading))]])
    log("\n".join(out[-6:]))
    return out


def run(torch, bundle, log) -> list[str]:
    return asyncio.run(run_fill(torch, bundle, log))
