"""Shared-prefix decode on the H200 (`bench_engine.py --suite-prefix`): the issue's shape.

B requests fork one P-token context (default 6,000 tokens) and decode with their own S-token
suffixes (default 200), sharing on (forks: the prefix's KV once) and off (each request holds
its own copy), with launch-ahead on as the engine runs by default; then where a shared-prefix
step of the largest batch goes (wall time, runner.step, graphs.run, the captured graph alone
on the GPU, device time per kernel). The LLaMA-7B shape has 4,096 positions; the random-weight
model is loaded with its position table stretched to fit P + S + new tokens (a longer RoPE
table costs nothing per token: every step reads the same weights and KV bytes as a model that
was trained for that length).
"""

from __future__ import annotations

import time

from engine_breakdown import median, profile_kernels, replay_ms, step_timings
from engine_suite import ceilings, kv_token_bytes, make_engine, shared_prefix, table, weight_bytes


async def run_prefix(torch, bundle, prefix: int, suffix: int, batches: list[int],
                     log) -> list[str]:
    bw, _ = ceilings(torch)
    wbytes, kvb = weight_bytes(bundle), kv_token_bytes(bundle)
    out = table("Ceilings (measured now)", ["copy TB/s (read + write)", "weights GB",
                                            "KV bytes per token"],
                [[f"{bw / 1e12:.2f}", f"{wbytes / 1e9:.2f}", f"{kvb}"]])
    engine, startup = make_engine(bundle, "prefix", max_num_seqs=128, cuda_graph_max_batch=128,
                                  max_batch_tokens=8192,
                                  max_context_len=prefix + suffix + 64)
    log(f"engine built (warm-up included) in {startup:.1f} s")
    try:
        out += await shared_prefix(engine, bundle, prefix, suffix, bw, wbytes, kvb, log,
                                   batches=tuple(batches))
        out += await _where_it_goes(torch, engine, bundle, prefix, suffix, max(batches), log)
    finally:
        await engine.close()
    return out


async def _where_it_goes(torch, engine, bundle, prefix: int, suffix: int, batch: int,
                         log) -> list[str]:
    import asyncio

    from engine_suite import prompts_for
    from parrot.engines.protocol import FillRequest, GenerateRequest
    from parrot.sampling import SamplingParams

    runner = engine._runner
    vocab, new = bundle.shape.vocab_size, 48
    await engine.fill(FillRequest("sys", token_ids=prompts_for(1, prefix, 5, vocab)[0]))
    suffixes = prompts_for(batch, suffix, 77, vocab)
    await asyncio.gather(*(engine.fill(FillRequest(f"s{i}", "sys", token_ids=s))
                           for i, s in enumerate(suffixes)))
    graphs = runner.graphs
    hits0, replays0 = graphs.num_ahead_hits, graphs.num_replays
    with step_timings(runner) as spent:
        torch.cuda.synchronize()
        t = time.perf_counter()
        params = SamplingParams(max_tokens=new, ignore_eos=True)
        await asyncio.gather(*(engine.generate_all(GenerateRequest(f"s{i}", sampling=params))
                               for i in range(batch)))
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t) / new
    keys = [k for k in graphs._graphs if k[0] >= batch and k[1] > 0]
    replay = float("nan")
    if keys and graphs._graphs[keys[-1]].graph is not None:
        graph = graphs._graphs[keys[-1]].graph
        replay = replay_ms(torch, graph)
        profile_kernels(torch, graph, log)
    for i in range(batch):
        await engine.free_context(f"s{i}")
    await engine.free_context("sys")

    row = [str(batch), f"{wall * 1e3:.2f}", f"{median(spent['step']) * 1e3:.2f}",
           f"{median(spent['run']) * 1e3:.2f}", f"{replay:.2f}",
           f"{graphs.num_ahead_hits - hits0} of {graphs.num_replays - replays0}",
           str(keys[-1] if keys else "-")]
    log("| " + " | ".join(row) + " |")
    return table(f"Where a shared-prefix step goes ({prefix}-token prefix, batch {batch}; "
                 "medians; replay = the captured graph alone on the GPU)",
                 ["batch", "wall ms per token", "runner.step ms", "graphs.run ms",
                  "graph replay ms", "launch-ahead hits", "graph bucket"], [row])
