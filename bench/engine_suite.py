"""The H200 engine suite behind `bench_engine.py --suite` (one command, one process).

Sections, each a markdown table (bf16, random LLaMA-shape weights, greedy, EOS ignored):
* ceilings: device-to-device copy bandwidth (bytes read + written) and the bf16 matmul rate
  (8192^3, random data), measured now: every floor below uses them;
* start-up: build_engine with the warm-up (graphs captured, kernels compiled), then the first
  request (Fill 512 + Generate 64) against the same request repeated warm;
* TPOT at batch 1, 32, 64 (512-token prompts, 64 new: contexts up to 576) for the fused path,
  the unfused path (fused_ops off; both with CUDA graphs) and HF generate, against the floor
  (weights + the KV the step reads, at the measured copy bandwidth);
* throughput (output tokens/s) at batch 1, 8, 32, 128 with 512-token prompts, 256 new;
* prefill: 64 x 2,048-token Fills vs the FLOPs at the measured matmul rate;
* shared prefix: B requests fork one P-token context and decode with their S-token suffixes,
  sharing on (forks: one copy of the prefix's KV) and off (each request holds its own prefix).
"""

from __future__ import annotations

import asyncio
import functools
import gc
import time

PROMPT, NEW_SHORT, NEW_LONG = 512, 64, 256


class StepClock:
    """Seconds spent in the runner's parts while installed (instance attributes shadow the
    methods; `remove` deletes them again): the step, its host lists (prepare_host), its device
    inputs (to_device), and its forward pass (`_forward`: to_device, then the prefill graphs
    or the eager forward), synchronised before and after ("forward": the GPU's time plus
    launch time it does not hide) or before only (`enqueue_only`, "enqueue": the host's
    launch cost); each step's (tokens, prefill tokens, seconds) and each forward pass's
    (prefills anything, seconds). With a `profiler` (anything with enable / disable: cProfile,
    or the mixed suite's DeviceProfile) the forwards of steps that prefill run under it."""

    PARTS = ("step", "prepare_host", "to_device", "forward", "enqueue")

    def __init__(self, torch, runner, *, enqueue_only: bool, profiler=None) -> None:
        self.torch, self.runner, self.profiler = torch, runner, profiler
        self.spent = {name: 0.0 for name in self.PARTS}
        self.steps: list[tuple[int, int, float]] = []
        self.forwards: list[tuple[bool, float]] = []
        runner.step = self._timed("step", runner.step)
        runner.prepare_host = self._timed("prepare_host", runner.prepare_host)
        runner.to_device = self._timed("to_device", runner.to_device)
        name = "enqueue" if enqueue_only else "forward"
        runner._forward = self._timed(name, runner._forward, sync_before=True,
                                      sync_after=not enqueue_only)

    def _timed(self, name: str, fn, *, sync_before: bool = False, sync_after: bool = False):
        torch = self.torch

        def wrapper(*args, **kwargs):
            if sync_before:
                torch.cuda.synchronize()
            forward = name in ("forward", "enqueue")
            profiled = forward and self.profiler is not None and bool(args[0].prefills)
            if profiled:
                self.profiler.enable()
            start = time.perf_counter()
            result = fn(*args, **kwargs)
            if profiled:
                self.profiler.disable()
            if sync_after:
                torch.cuda.synchronize()
            sec = time.perf_counter() - start
            self.spent[name] += sec
            if name == "step":
                batch = args[0]
                prefill = sum(c.end - c.start for c in batch.chunks if c.end - c.start > 1)
                self.steps.append((batch.num_tokens, prefill, sec))
            elif forward:
                self.forwards.append((bool(args[0].prefills), sec))
            return result
        return wrapper

    def remove(self) -> None:
        del self.runner.step, self.runner.prepare_host, self.runner.to_device
        del self.runner._forward


def ceilings(torch) -> tuple[float, float]:
    """(copy bytes/s counting read + write, bf16 matmul FLOP/s)."""
    src = torch.randn(2**29, device="cuda", dtype=torch.bfloat16)   # 1 GiB
    dst = torch.empty_like(src)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)

    def timed(fn, reps: int) -> float:
        fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(reps):
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        return sorted(times)[len(times) // 2]

    # partial, not a lambda: the tensors are deleted below, before the cache is emptied.
    bw = 2 * src.numel() * 2 / timed(functools.partial(dst.copy_, src), 20)
    flops = 2 * 8192**3 / timed(functools.partial(torch.matmul, a, b), 20)
    del src, dst, a, b
    torch.cuda.empty_cache()
    return bw, flops


def weight_bytes(bundle) -> int:
    """Bytes one decode step reads: every layer matrix, the norms and the LM head."""
    m = bundle.model
    total = sum(t.numel() * t.element_size() for layer in m.layers
                for t in (layer.qkv, layer.o_proj, layer.gate_up, layer.down, layer.input_norm,
                          layer.post_norm))
    return total + m.lm_head.numel() * m.lm_head.element_size()


def kv_token_bytes(bundle) -> int:
    return bundle.shape.kv_bytes_per_token(bundle.model.embed.element_size())


def make_engine(bundle, name: str, **params):
    from parrot.engines.builtin.build import build_engine
    from parrot.engines.builtin.config import BuiltinEngineConfig

    # every graph captured before build_engine returns: a graph captured while the engine
    # idles between a warm-up and a timed run (lazy_graphs) could land inside the timing
    params.setdefault("lazy_graphs", False)
    config = BuiltinEngineConfig(model=bundle.name, device="cuda", **params)
    started = time.perf_counter()
    engine = build_engine(name, config, bundle)
    return engine, time.perf_counter() - started


def prompts_for(batch: int, length: int, seed: int, vocab: int) -> list[tuple[int, ...]]:
    import torch

    g = torch.Generator().manual_seed(seed)
    return [tuple(x) for x in torch.randint(100, min(vocab, 30000), (batch, length),
                                            generator=g).tolist()]


async def decode_run(engine, prompts, new: int, tag: str) -> tuple[float, float, list]:
    """(fill seconds, decode seconds, tokens); B Generates of `new` tokens after the Fills."""
    import torch

    from parrot.engines.protocol import FillRequest, GenerateRequest
    from parrot.sampling import SamplingParams

    t0 = time.perf_counter()
    await asyncio.gather(*(engine.fill(FillRequest(f"{tag}{i}", token_ids=p))
                           for i, p in enumerate(prompts)))
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    params = SamplingParams(max_tokens=new, ignore_eos=True)
    results = await asyncio.gather(*(engine.generate_all(GenerateRequest(f"{tag}{i}",
                                                                          sampling=params))
                                     for i in range(len(prompts))))
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    for i in range(len(prompts)):
        await engine.free_context(f"{tag}{i}")
    return t1 - t0, t2 - t1, [list(r.token_ids) for r in results]


def table(title: str, header: list[str], rows: list[list[str]]) -> list[str]:
    return [f"### {title}", "", "| " + " | ".join(header) + " |",
            "|" + "---|" * len(header), *("| " + " | ".join(r) + " |" for r in rows), ""]


async def run_suite(torch, bundle, hf, hf_run, batches: list[int], prefix: int, suffix: int,
                    log) -> list[str]:
    out: list[str] = []
    bw, flops = ceilings(torch)
    wbytes, kvb = weight_bytes(bundle), kv_token_bytes(bundle)
    vocab = bundle.shape.vocab_size
    out += table("Ceilings (measured now)", ["copy TB/s (read + write)", "bf16 matmul TFLOP/s",
                                             "weights read per step GB", "KV bytes per token"],
                 [[f"{bw / 1e12:.2f}", f"{flops / 1e12:.0f}", f"{wbytes / 1e9:.2f}",
                   f"{kvb}"]])
    log("\n".join(out[-6:]))
    common = dict(max_num_seqs=128, cuda_graph_max_batch=128, max_batch_tokens=8192,
                  max_context_len=4096)

    # -- unfused (graphs, no fused ops) at the TPOT batches, then the fused engine --------------
    tpot: dict[tuple[str, int], float] = {}
    tokens: dict[tuple[str, int], list] = {}
    import parrot_kernels

    bundle.model.use_fused(None)        # the unfused path: same kernels/graphs, PyTorch ops
    engine, _ = make_engine(bundle, "unfused", num_blocks=9000, warmup=False, **common)
    try:
        for b in batches:
            await decode_run(engine, prompts_for(b, PROMPT, b, vocab)[:b], 4, "w")
            _, dec, toks = await decode_run(engine, prompts_for(b, PROMPT, b, vocab), NEW_SHORT,
                                            "u")
            tpot[("unfused", b)], tokens[("unfused", b)] = dec / NEW_SHORT, toks
            log(f"unfused B={b}: {dec / NEW_SHORT * 1e3:.2f} ms/token")
    finally:
        await engine.close()
    engine = None
    gc.collect()
    torch.cuda.empty_cache()
    bundle.model.use_fused(parrot_kernels)
    engine, startup = make_engine(bundle, "fused", num_blocks=9000, **common)
    log(f"fused engine built (warm-up included) in {startup:.1f} s")
    try:
        # first request after start-up vs the same request warm
        first_prompt = prompts_for(1, PROMPT, 999, vocab)
        f1, d1, _ = await decode_run(engine, first_prompt, NEW_SHORT, "first")
        f2, d2, _ = await decode_run(engine, first_prompt, NEW_SHORT, "again")
        out += table("Start-up and first request (Fill 512 + Generate 64, batch 1)",
                     ["build_engine s (warm-up included)", "first request s", "warm request s",
                      "first / warm", "first TPOT ms", "warm TPOT ms"],
                     [[f"{startup:.1f}", f"{f1 + d1:.3f}", f"{f2 + d2:.3f}",
                       f"{(f1 + d1) / (f2 + d2):.2f}x", f"{d1 / NEW_SHORT * 1e3:.2f}",
                       f"{d2 / NEW_SHORT * 1e3:.2f}"]])
        choice = bundle.model.linear_choice
        out += [f"Linear layers of the fused engine: {choice.describe()} at start-up "
                f"(kernel at {sorted(choice.kernel)})" if choice is not None else
                "Linear layers of the fused engine: the kernels' static table (no start-up "
                "measurement)", ""]
        log("\n".join(out[-6:]))
        rows = []
        for b in batches:
            prompts = prompts_for(b, PROMPT, b, vocab)
            await decode_run(engine, prompts, 4, "w")
            _, dec, toks = await decode_run(engine, prompts, NEW_SHORT, "f")
            tpot[("fused", b)], tokens[("fused", b)] = dec / NEW_SHORT, toks
            hf_s, _ = hf_run(torch, hf, "cuda", [list(p) for p in prompts], NEW_SHORT)
            hf_tpot = hf_s / (NEW_SHORT - 1)
            # mean context the steps read: prompt + half the new tokens (+1 pending)
            floor = (wbytes + b * (PROMPT + NEW_SHORT / 2) * kvb) / bw
            equal = sum(x == y for p, q in zip(toks, tokens[("unfused", b)])
                        for x, y in zip(p, q))
            rows.append([str(b), f"{PROMPT}+{NEW_SHORT}", f"{floor * 1e3:.2f}",
                         f"{tpot[('fused', b)] * 1e3:.2f}",
                         f"{tpot[('fused', b)] / floor:.2f}x",
                         f"{tpot[('unfused', b)] * 1e3:.2f}", f"{hf_tpot * 1e3:.2f}",
                         f"{hf_tpot / tpot[('fused', b)]:.1f}x",
                         f"{equal}/{b * NEW_SHORT}"])
            log("| " + " | ".join(rows[-1]) + " |")
        out += table("Decode TPOT (CUDA graphs; floor = weights + mean KV read at the copy rate)",
                     ["batch", "prompt+new", "floor ms", "fused ms", "fused / floor",
                      "unfused ms", "HF generate ms", "HF / fused", "greedy fused = unfused"],
                     rows)
        from engine_breakdown import breakdown  # imports this module's helpers

        out += await breakdown(engine, bundle, batches, log)
        rows = []
        for b in (1, 8, 32, 128):
            prompts = prompts_for(b, PROMPT, 100 + b, vocab)
            await decode_run(engine, prompts, 4, "w")
            fill_s, dec, _ = await decode_run(engine, prompts, NEW_LONG, "t")
            rows.append([str(b), f"{b * NEW_LONG / dec:.0f}", f"{dec / NEW_LONG * 1e3:.2f}",
                         f"{b * PROMPT / fill_s:.0f}"])
            log("| " + " | ".join(rows[-1]) + " |")
        out += table(f"Throughput ({PROMPT}-token prompts, {NEW_LONG} new tokens)",
                     ["batch", "output tokens/s", "ms per step", "prefill tokens/s"], rows)
        # prefill: 64 x 2048 tokens
        prompts = prompts_for(64, 2048, 7, vocab)
        await decode_run(engine, prompts[:4], 1, "w")
        fill_s, _, _ = await decode_run(engine, prompts, 1, "p")
        shape = bundle.shape
        linear = sum(t.numel() for layer in bundle.model.layers
                     for t in (layer.qkv, layer.o_proj, layer.gate_up, layer.down))
        attn = 2 * 2 * shape.num_layers * shape.num_heads * shape.head_dim * 2048 ** 2 / 2
        total = 64 * (2 * linear * 2048 + attn)
        out += table("Prefill (64 x 2,048-token Fills, max_batch_tokens 8192)",
                     ["tokens", "seconds", "tokens/s", "TFLOP/s", "of measured matmul rate"],
                     [[str(64 * 2048), f"{fill_s:.2f}", f"{64 * 2048 / fill_s:.0f}",
                       f"{total / fill_s / 1e12:.0f}", f"{total / fill_s / flops:.0%}"]])
        log("\n".join(out[-5:]))
        out += await shared_prefix(engine, bundle, prefix, suffix, bw, wbytes, kvb, log)
    finally:
        await engine.close()
    engine = None
    gc.collect()
    torch.cuda.empty_cache()
    # a second start in this process: Triton's kernels are compiled (as after a restart with
    # its on-disk cache), the graphs are captured again
    engine, again = make_engine(bundle, "restart", num_blocks=9000, **common)
    await engine.close()
    out += table("Second start (kernels already compiled: Triton's cache)",
                 ["build_engine s (warm-up included)"], [[f"{again:.1f}"]])
    log("\n".join(out[-5:]))
    return out


async def shared_prefix(engine, bundle, prefix: int, suffix: int, bw: float, wbytes: int,
                        kvb: int, log, batches: tuple[int, ...] = (16, 64)) -> list[str]:
    """Sharing on (forks of one context) vs off (each request fills prefix + suffix)."""
    import torch

    from parrot.engines.protocol import FillRequest, GenerateRequest
    from parrot.sampling import SamplingParams

    vocab, new = bundle.shape.vocab_size, 32
    free_tokens = engine._scheduler.blocks.allocator.num_free_blocks * 16
    base = prompts_for(1, prefix, 5, vocab)[0]
    rows = []
    for b in batches:
        suffixes = prompts_for(b, suffix, 6 + b, vocab)
        for sharing in (True, False):
            need = (prefix + b * (suffix + new)) if sharing else b * (prefix + suffix + new)
            if need > free_tokens:
                rows.append([str(b), "on" if sharing else "off", f"{need * kvb / 1e9:.0f}",
                             "does not fit", "-", "-", "-"])
                continue
            if sharing:
                await engine.fill(FillRequest("sys", token_ids=base))
                await asyncio.gather(*(engine.fill(FillRequest(f"s{i}", "sys", token_ids=s))
                                       for i, s in enumerate(suffixes)))
            else:
                await asyncio.gather(*(engine.fill(FillRequest(f"s{i}", token_ids=base + s))
                                       for i, s in enumerate(suffixes)))
            warm = SamplingParams(max_tokens=2, ignore_eos=True)
            await asyncio.gather(*(engine.generate_all(GenerateRequest(
                f"w{i}", parent_context_id=f"s{i}", sampling=warm)) for i in range(b)))
            for i in range(b):
                await engine.free_context(f"w{i}")
            torch.cuda.synchronize()
            t = time.perf_counter()
            params = SamplingParams(max_tokens=new, ignore_eos=True)
            await asyncio.gather(*(engine.generate_all(GenerateRequest(f"s{i}", sampling=params))
                                   for i in range(b)))
            torch.cuda.synchronize()
            step = (time.perf_counter() - t) / new
            for i in range(b):
                await engine.free_context(f"s{i}")
            if sharing:
                await engine.free_context("sys")
            kv_read = (prefix + b * (suffix + new / 2)) if sharing else b * (prefix + suffix
                                                                             + new / 2)
            floor = (wbytes + kv_read * kvb) / bw
            rows.append([str(b), "on" if sharing else "off", f"{need * kvb / 1e9:.0f}",
                         f"{step * 1e3:.2f}", f"{floor * 1e3:.2f}", f"{step / floor:.2f}x",
                         f"{b / step:.0f}"])
            log("| " + " | ".join(rows[-1]) + " |")
    return table(f"Shared prefix ({prefix}-token prefix, {suffix}-token suffixes, {new} new "
                 "tokens; floor = weights + KV read once per step)",
                 ["batch", "sharing", "KV GB held", "ms per step", "floor ms", "/ floor",
                  "tokens/s"], rows)


async def run_quick(torch, bundle, batches: list[int], log) -> list[str]:
    """A short run (`--suite-quick`): the fused engine's TPOT with the decode launch-ahead on
    and off (lookahead.py), and where a step goes."""
    bw, _ = ceilings(torch)
    wbytes, kvb = weight_bytes(bundle), kv_token_bytes(bundle)
    vocab = bundle.shape.vocab_size
    engine, startup = make_engine(bundle, "fused", num_blocks=9000, max_num_seqs=128,
                                  cuda_graph_max_batch=128, max_batch_tokens=8192,
                                  max_context_len=4096)
    log(f"fused engine built (warm-up included) in {startup:.1f} s")
    rows, out = [], []
    try:
        for b in batches:
            prompts = prompts_for(b, PROMPT, b, vocab)
            floor = (wbytes + b * (PROMPT + NEW_SHORT / 2) * kvb) / bw
            times, toks = {}, {}
            for ahead in (False, True):
                engine._runner.launch_ahead = ahead
                await decode_run(engine, prompts, 4, "w")
                _, dec, toks[ahead] = await decode_run(engine, prompts, NEW_SHORT, "q")
                times[ahead] = dec / NEW_SHORT
            equal = sum(x == y for p, q in zip(toks[False], toks[True]) for x, y in zip(p, q))
            rows.append([str(b), f"{PROMPT}+{NEW_SHORT}", f"{floor * 1e3:.2f}",
                         f"{times[False] * 1e3:.2f}", f"{times[True] * 1e3:.2f}",
                         f"{times[True] / floor:.2f}x", f"{equal}/{b * NEW_SHORT}"])
            log("| " + " | ".join(rows[-1]) + " |")
        out += table("Decode TPOT, fused path, launch-ahead off / on (floor as above)",
                     ["batch", "prompt+new", "floor ms", "ahead off ms", "ahead on ms",
                      "on / floor", "greedy tokens equal"], rows)
        from engine_breakdown import breakdown  # imports this module's helpers

        out += await breakdown(engine, bundle, batches, log)
        out.append(f"launch-ahead hits: {engine._runner.graphs.num_ahead_hits} of "
                   f"{engine._runner.graphs.num_replays} graph steps")
    finally:
        await engine.close()
    return out
