"""`bench_engine.py --floor`: the builtin engine's decode TPOT at each batch x context against
its byte floor (every weight once a step, and each row's KV), on one engine per model sized
for the largest batch. Results: docs/results/engine_floor_h200.md.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time

from bench_engine import load, machine, sync, write_table
from serving_floor import copy_rate


def decode_floor_s(weight_bytes: int, kv_token_bytes: int, batch: int, context: int,
                   new: int, rate: float) -> float:
    """A decode step's byte floor: every weight once, and each row's KV at its mean length
    over the run (context + new / 2 tokens), at `rate` bytes/s."""
    return (weight_bytes + batch * (context + new / 2) * kv_token_bytes) / rate


async def floor_cell(engine, torch, device: str, prompts: list[list[int]], new: int
                     ) -> tuple[float, int]:
    """(decode seconds per step of `new` greedy tokens for every prompt, graph replays), after
    the Fills and a 4-token warm-up on throwaway forks; every context freed after."""
    from parrot.engines.protocol import FillRequest, GenerateRequest
    from parrot.sampling import SamplingParams

    await asyncio.gather(*(engine.fill(FillRequest(f"c{i}", token_ids=tuple(p)))
                           for i, p in enumerate(prompts)))
    warm = SamplingParams(max_tokens=4, ignore_eos=True)
    await asyncio.gather(*(engine.generate_all(GenerateRequest(
        f"w{i}", parent_context_id=f"c{i}", sampling=warm)) for i in range(len(prompts))))
    for i in range(len(prompts)):
        await engine.free_context(f"w{i}")
    graphs = engine._runner.graphs
    replays = 0 if graphs is None else graphs.num_replays
    sync(torch, device)
    t = time.perf_counter()
    params = SamplingParams(max_tokens=new, ignore_eos=True)
    results = await asyncio.gather(*(engine.generate_all(GenerateRequest(
        f"c{i}", sampling=params)) for i in range(len(prompts))))
    sync(torch, device)
    seconds = time.perf_counter() - t
    assert all(len(r.token_ids) == new for r in results)
    for i in range(len(prompts)):
        await engine.free_context(f"c{i}")
    return seconds / new, (0 if graphs is None else graphs.num_replays) - replays


async def floor_cells(torch, config, bundle, name: str, batches: list[int],
                      contexts: list[int], new: int, rate: float, rows: list[str]) -> None:
    """Every batch x context cell of `--floor` on one engine, on one event loop (the engine's
    task lives on it): a markdown row each, appended to `rows`."""
    from engine_suite import kv_token_bytes, weight_bytes

    from parrot.engines.builtin.build import build_engine

    wbytes, kvb = weight_bytes(bundle), kv_token_bytes(bundle)
    device, bs = config.device, config.block_size
    engine = build_engine("floor", config, bundle)
    total_blocks = engine._scheduler.blocks.allocator.num_blocks_total
    try:
        for context in contexts:
            for batch in batches:
                kv_gb = batch * (context + new / 2) * kvb / 1e9
                floor = decode_floor_s(wbytes, kvb, batch, context, new, rate)
                if batch * (-(-(context + new + 1) // bs) + 1) > total_blocks:
                    cols = (f"{floor * 1e3:.2f} | does not fit in {total_blocks * bs} KV "
                            "tokens | - | - | -")
                else:
                    gen = torch.Generator().manual_seed(batch * 7919 + context)
                    prompts = torch.randint(100, min(bundle.shape.vocab_size, 30000),
                                            (batch, context), generator=gen).tolist()
                    tpot, replays = await floor_cell(engine, torch, device, prompts, new)
                    cols = (f"{floor * 1e3:.2f} | {tpot * 1e3:.2f} | {tpot / floor:.2f}x | "
                            f"{batch / tpot:.0f} | {replays}")
                row = f"| {name} | {batch} | {context}+{new} | {kv_gb:.2f} | {cols} |"
                print(row, flush=True)
                rows.append(row)
    finally:
        await engine.close()


def floor_mode(args: argparse.Namespace, torch) -> int:
    """`--floor`: one engine per model, sized for the largest batch (max_num_seqs and the
    graphs to it; the KV cache auto-sized on CUDA, just large enough on the CPU), TPOT at every
    batch x context against its byte floor."""
    import logging

    from parrot.engines.builtin.config import BuiltinEngineConfig

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    device, new, bs = args.device, args.new_tokens, 16
    batches, contexts = sorted(args.batches), sorted(args.contexts)
    header = ("| model | batch | context | KV GB read a step | floor ms | TPOT ms | TPOT / floor "
              "| tokens/s | graph steps |")
    rows: list[str] = []
    rate = copy_rate(torch, device)
    print(f"copy rate {rate / 1e9:.1f} GB/s (read + write)", flush=True)
    print(header, flush=True)
    for name in args.models:
        bundle, hf = load(torch, name, device, max(contexts) + new + 64)
        del hf          # its weights are the bundle's; its unfused copies go before sizing
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()    # the auto-sized KV cache takes what is free now
        per_seq = -(-(max(contexts) + new + 1) // bs) + 1     # + the warm-up fork's own block
        sizing = {} if device == "cuda" else {"num_blocks": max(batches) * per_seq + 8}
        config = BuiltinEngineConfig(model=bundle.name, device=device, block_size=bs,
                                     max_num_seqs=max(batches), max_batch_tokens=8192,
                                     max_context_len=max(contexts) + new + 64,
                                     speed_probe="off", lazy_graphs=False, **sizing)
        asyncio.run(floor_cells(torch, config, bundle, name, batches, contexts, new, rate,
                                rows))
        del bundle
    if args.out is not None:
        write_table(args.out, f"builtin engine decode against its byte floor ({device})",
                    machine(torch, device),
                    f"copy rate {rate / 1e9:.1f} GB/s (read + write, measured in this run); "
                    "floor = (weights + batch x (context + new / 2) x KV bytes a token) / "
                    f"copy rate; greedy, EOS ignored, {new} new tokens after a 4-token warm-up",
                    header, rows)
    return 0
