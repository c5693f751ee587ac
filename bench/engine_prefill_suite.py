"""Prefill on the H200 (`bench_engine.py --suite-prefill`): the rate of 64 x 2,048-token Fills
against the measured bf16 matmul rate, a map phase's step (four fresh 1,000-token Fills,
alone and beside 16 decodes: its kernels against the matmul floor, and where the GPU waits
inside its forward), the rate of 64 Fills of random lengths, the device time per kernel of
one Fill step, and the attention call prefill makes (torch SDPA, causal,
[1, H, 2048, D]) timed with and without `enable_gqa` (a flag that some SDPA backends do not
take: with it set, torch may fall back to a slower backend even when the query and key heads
are equal)."""

from __future__ import annotations

import asyncio
import time

from engine_mixed_suite import DeviceProfile
from engine_suite import StepClock, ceilings, decode_run, make_engine, prompts_for, table

MAP_FILLS, MAP_FILL_TOKENS, MAP_ROWS = 4, 1000, 16


def _sdpa_times(torch, heads: int, dim: int, n: int = 2048) -> list[str]:
    import torch.nn.functional as F

    q, k, v = (torch.randn(n, heads, dim, device="cuda", dtype=torch.bfloat16)
               .transpose(0, 1)[None] for _ in range(3))
    rows = []
    for gqa in (True, False):
        for _ in range(3):
            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(20):
            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        torch.cuda.synchronize()
        sec = (time.perf_counter() - start) / 20
        flops = 4 * heads * dim * n * n / 2
        rows.append([str(gqa), f"{sec * 1e3:.3f}", f"{flops / sec / 1e12:.0f}"])
    return rows


async def _step_split(torch, engine, prompts, fill_s: float) -> list[str]:
    """Where the wall time of the 64-Fill run goes, from a second run with each part timed
    (StepClock): the host lists (prepare_host), the device inputs (to_device), the forward
    pass (synchronised before and after: the GPU's time plus launch time it does not hide),
    the rest of each model step, and the loop outside the steps (the run's wall minus them)."""
    clock = StepClock(torch, engine._runner, enqueue_only=False)
    try:
        start = time.perf_counter()
        await decode_run(engine, prompts, 1, "split")
        wall = time.perf_counter() - start
    finally:
        clock.remove()
    spent = clock.spent
    forward = spent["forward"] - spent["to_device"]       # the forward's clock holds to_device
    rest = spent["step"] - spent["prepare_host"] - spent["forward"]
    sizes = [tokens for tokens, _, _ in clock.steps]
    rows = [[name, f"{sec * 1e3:.0f}", f"{sec / wall:.0%}"] for name, sec in (
        ("prepare_host", spent["prepare_host"]), ("to_device", spent["to_device"]),
        ("forward (synchronised)", forward), ("rest of the steps", rest),
        ("loop outside the steps", wall - spent["step"]))]
    return table(f"Where the 64-Fill run goes (timed again: wall {wall:.2f} s, untimed "
                 f"{fill_s:.2f} s; {len(sizes)} steps, tokens per step "
                 f"{min(sizes)}-{max(sizes)})", ["part", "ms", "share"], rows)


async def _ragged(engine, vocab: int, fixed_rate: float) -> list[str]:
    """64 Fills of random lengths (700-1,400 tokens, like map-reduce chunks): a serving engine
    meets a new chunk length on almost every request, a fixed-length run never does."""
    import random

    rng = random.Random(5)
    prompts = [p[:rng.randint(700, 1400)] for p in prompts_for(64, 1400, 11, vocab)]
    tokens = sum(len(p) for p in prompts)
    fill_s, _, _ = await decode_run(engine, prompts, 1, "ragged")
    return table("Prefill, ragged (64 Fills of 700-1,400 tokens, one run)",
                 ["tokens", "seconds", "tokens/s", "of the 2,048-token run's rate"],
                 [[str(tokens), f"{fill_s:.2f}", f"{tokens / fill_s:.0f}",
                   f"{tokens / fill_s / fixed_rate:.0%}"]])


class ForwardTimeline(DeviceProfile):
    """A DeviceProfile that records the host's side too: besides the kernels' device time,
    where the GPU sits idle inside the forward, and what the host was doing then."""

    HOST = True

    def __init__(self, torch) -> None:
        super().__init__(torch)
        self.events: list[list[tuple[str, float, float, str]]] = []

    def _collect(self, prof) -> None:
        # the kernels from the events themselves: with the host recorded, key_averages
        # would count each kernel again under the host op that launched it
        events = [(e.device_type.name, e.time_range.start, e.time_range.end, e.name)
                  for e in prof.events()]
        self.events.append(events)
        for kind, start, end, name in events:
            if kind == "CUDA" and not name.startswith(("cuda", "Memcpy", "Memset")):
                self.kernel_us[name] = self.kernel_us.get(name, 0.0) + end - start

    def timeline_lines(self, label: str, top: int = 6) -> list[str]:
        out = []
        for events in self.events[-1:]:
            kernels = sorted((a, b) for kind, a, b, _ in events if kind == "CUDA")
            host = [(a, b, name) for kind, a, b, name in events if kind == "CPU"]
            if not kernels or not host:
                continue
            t0, t1 = min(a for a, _, _ in host), max(b for _, b, _ in host)
            gaps, busy, cur = [], 0.0, t0
            for a, b in kernels:
                if a > cur:
                    gaps.append((a - cur, cur, a))
                busy += max(0.0, b - max(a, cur))
                cur = max(cur, b)
            head = kernels[0][0] - t0
            idle = sum(g for g, _, _ in gaps)
            out += [f"#### Where the GPU waits in one forward: {label}", "",
                    f"forward {(t1 - t0) / 1e3:.2f} ms (profiled, host side recorded too); "
                    f"kernels busy {busy / 1e3:.2f} ms; idle {idle / 1e3:.2f} ms in {len(gaps)} "
                    f"gaps: {head / 1e3:.2f} ms before the first kernel, "
                    f"{sum(g for g, _, _ in gaps if g > 50) / 1e3:.2f} ms in gaps over 50 us; "
                    f"{(t1 - cur) / 1e3:.2f} ms after the last kernel", "",
                    "| gap us | at ms | host ops inside the gap (shortest first) |",
                    "|---|---|---|"]
            for gap, a, b in sorted(gaps, reverse=True)[:top]:
                inside = sorted((ob - oa, name) for oa, ob, name in host
                                if min(ob, b) - max(oa, a) > 0.5 * min(gap, ob - oa))
                names = ", ".join(f"{name} {sec:.0f}" for sec, name in inside[:4])
                out.append(f"| {gap:.0f} | {(a - t0) / 1e3:.2f} | {names} |")
            out.append("")
        return out


async def _map_step(torch, engine, vocab: int, rows: int, profiler) -> StepClock:
    """One step of MAP_FILLS fresh MAP_FILL_TOKENS-token Fills sent together (a map phase's
    step), beside `rows` running decodes over their own 1,024-token contexts (0: alone); the
    StepClock (forward synchronised) is installed after the decodes' own Fills."""
    from parrot.engines.protocol import FillRequest, GenerateRequest
    from parrot.sampling import SamplingParams

    await asyncio.gather(*(engine.fill(FillRequest(f"r{i}", token_ids=p))
                           for i, p in enumerate(prompts_for(rows, 1024, 45, vocab))))
    clock = StepClock(torch, engine._runner, enqueue_only=False, profiler=profiler)

    async def fills() -> None:
        await asyncio.sleep(0.3 if rows else 0.0)
        await asyncio.gather(*(engine.fill(FillRequest(f"m{i}", token_ids=p)) for i, p in
                               enumerate(prompts_for(MAP_FILLS, MAP_FILL_TOKENS, 46, vocab))))

    params = SamplingParams(max_tokens=200, ignore_eos=True)
    try:
        await asyncio.gather(fills(), *(engine.generate_all(
            GenerateRequest(f"r{i}", sampling=params)) for i in range(rows)))
    finally:
        clock.remove()
        for name in [f"r{i}" for i in range(rows)] + [f"m{i}" for i in range(MAP_FILLS)]:
            await engine.free_context(name)
    return clock


async def _map_steps(torch, engine, vocab: int, linear_params: int, flops: float,
                     log) -> list[str]:
    """What live map-reduce's map phase is made of: a step of four fresh ~1,000-token Fills,
    alone and beside 16 running decodes (a mixed step), timed (forward synchronised) and then
    under torch.profiler with the host's side (kernels by name, and where the GPU waits);
    against the step's matmul floor (its linear layers'
    FLOPs at the measured bf16 matmul rate)."""
    tokens = MAP_FILLS * MAP_FILL_TOKENS
    floor_ms = 2 * linear_params * tokens / flops * 1e3
    rows, out = [], []
    for decodes in (0, MAP_ROWS):
        await _map_step(torch, engine, vocab, decodes, None)                    # warm
        clock = await _map_step(torch, engine, vocab, decodes, None)
        profile = ForwardTimeline(torch)
        await _map_step(torch, engine, vocab, decodes, profile)
        steps = [(prefill, sec) for _, prefill, sec in clock.steps if prefill]
        forwards = [sec for prefills, sec in clock.forwards if prefills]
        kernels = sum(profile.kernel_us.values()) / max(1, profile.steps) / 1e3
        label = f"{MAP_FILLS} x {MAP_FILL_TOKENS} tokens " + (
            f"beside {decodes} decodes" if decodes else "alone")
        rows.append([label, str(len(steps)),
                     ", ".join(f"{sec * 1e3:.1f} ({n})" for n, sec in steps) or "-",
                     ", ".join(f"{sec * 1e3:.1f}" for sec in forwards) or "-",
                     f"{kernels:.1f}", f"{floor_ms:.1f}"])
        out += profile.lines(label, top=16) + profile.timeline_lines(label)
        log("\n".join(out[-40:]))
    return table(f"A map phase's step ({tokens:,} prefill tokens; the matmul floor at the "
                 f"measured {flops / 1e12:.0f} TFLOP/s)",
                 ["step", "prefilling steps", "step ms (prefill tokens)",
                  "forward ms (synchronised)", "kernels ms (profiled pass)", "matmul floor ms"],
                 rows) + out


async def run_prefill(torch, bundle, log) -> list[str]:
    bw, flops = ceilings(torch)
    shape = bundle.shape
    out = table("SDPA as prefill calls it (causal, one 2,048-token chunk)",
                ["enable_gqa", "ms", "TFLOP/s"],
                _sdpa_times(torch, shape.num_heads, shape.head_dim))
    log("\n".join(out))
    engine, _ = make_engine(bundle, "prefill", num_blocks=9000, max_num_seqs=128,
                            max_batch_tokens=8192, max_context_len=4096)
    try:
        vocab = shape.vocab_size
        prompts = prompts_for(64, 2048, 7, vocab)
        await decode_run(engine, prompts[:4], 1, "w")
        fill_s, _, _ = await decode_run(engine, prompts, 1, "p")
        linear = sum(t.numel() for layer in bundle.model.layers
                     for t in (layer.qkv, layer.o_proj, layer.gate_up, layer.down))
        attn = 2 * 2 * shape.num_layers * shape.num_heads * shape.head_dim * 2048 ** 2 / 2
        total = 64 * (2 * linear * 2048 + attn)
        out += table("Prefill (64 x 2,048-token Fills, max_batch_tokens 8192)",
                     ["tokens", "seconds", "tokens/s", "TFLOP/s", "of measured matmul rate",
                      "matmul TFLOP/s"],
                     [[str(64 * 2048), f"{fill_s:.2f}", f"{64 * 2048 / fill_s:.0f}",
                       f"{total / fill_s / 1e12:.0f}", f"{total / fill_s / flops:.0%}",
                       f"{flops / 1e12:.0f}"]])
        log("\n".join(out[-5:]))
        out += await _map_steps(torch, engine, vocab, linear, flops, log)
        log("\n".join(out))
        out += await _ragged(engine, vocab, 64 * 2048 / fill_s)
        log("\n".join(out[-5:]))
        out += await _step_split(torch, engine, prompts, fill_s)
        log("\n".join(out[-9:]))
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
            t = time.perf_counter()
            await decode_run(engine, prompts[:4], 1, "prof")
            wall = time.perf_counter() - t
        totals: dict[str, float] = {}
        for event in prof.events():
            if event.device_type.name == "CUDA":
                totals[event.name[:80]] = totals.get(event.name[:80], 0.0) + event.device_time
        gpu = sum(totals.values()) / 1e3
        log(f"one step of 4 x 2,048 tokens: wall {wall * 1e3:.1f} ms, GPU kernels {gpu:.1f} ms")
        rows = [[f"{us / 1e3:.2f}", f"{us / 1e3 / max(gpu, 1e-9):.1%}", name]
                for name, us in sorted(totals.items(), key=lambda kv: -kv[1])[:12]]
        out += table(f"One Fill step of 4 x 2,048 tokens: wall {wall * 1e3:.1f} ms, "
                     f"kernels {gpu:.1f} ms (top 12)", ["ms", "share", "kernel"], rows)
        log("\n".join(out[-16:]))
    finally:
        await engine.close()
    return out


def run(torch, bundle, log) -> list[str]:
    return asyncio.run(run_prefill(torch, bundle, log))
