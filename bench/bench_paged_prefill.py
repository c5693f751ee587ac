"""Prefill attention of one layer: torch SDPA per chunk (`prefill_attention: sdpa`) against the
paged prefill kernel (`prefill_attention: paged`), on the step shapes the paper's workloads
make; then a tile sweep of the kernel over all of them.

Each step is a set of chunks (new tokens at a position of a context) over a paged cache of
LLaMA-7B's attention shape (32 heads x 128, pages of 16, shuffled), bf16. The SDPA side is
`prefill_torch` for every chunk inside `prefill_sdpa_backends` (the engine's `sdpa` path, its
gather of each chunk's context included); the kernel side plans the step once (as the
runner does, outside the per-layer time) and launches once. Both eager, timed with CUDA
events over `--reps` calls after a warm-up; outputs checked against each other.

    python3 bench/bench_paged_prefill.py [--reps 20] [--out docs/results/paged_prefill_h200.md]
    TRITON_INTERPRET=1 python bench/bench_paged_prefill.py --smoke   # the script on a CPU
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import shlex
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from repo_imports import import_parrot  # noqa: E402
from report import record  # noqa: E402

HEADS, HEAD_DIM, PAGE = 32, 128, 16   # LLaMA-7B's attention (--kv-heads: GQA)
# name -> (number of chunks, new tokens each, position of the first new token, forks: the
# chunks share their context's full pages before that position)
SMOKE_STEPS = {"smoke: 3 forks x 20 over 40 tokens": (3, 20, 40, True),
               "smoke: 2 fresh x 24": (2, 24, 0, False)}
STEPS = {
    "copilot: 32 queries x 100 over a 3,300-token prompt": (32, 100, 3300, True),
    "multi_agent: 8 reviewers x 300 over a 2,500-token history": (8, 300, 2500, True),
    "gpts: 16 queries x 60 over a 2,000-token prompt": (16, 60, 2000, True),
    "chain: 1 chunk x 1,024 continuing 3,000 tokens": (1, 1024, 3000, False),
    "fresh: 4 prompts x 2,048": (4, 2048, 0, False),
    "fresh: 16 prompts x 512": (16, 512, 0, False),
    "map-reduce: 4 fresh prompts x 1,000": (4, 1000, 0, False),
    # few tiles over a long context: the kernel splits the keys into ranges (prefill.py)
    "multi_agent: 1 reviewer's 29 tokens over a 3,700-token history": (1, 29, 3700, True),
    "multi_agent: 1 reviser's 240 tokens over a 3,900-token history": (1, 240, 3900, True),
    "gpts: 2 queries x 60 over a 3,300-token prompt": (2, 60, 3300, True),
}


def build_step(torch, chunks: int, new: int, pos: int, forks: bool, dtype, gen, device,
               kv_heads: int = HEADS):
    """(q [T, H, D], k/v caches, [(row, n, pos)], int32 tables [C, W])."""
    shared = pos // PAGE if forks else 0
    own = -(-(pos + new) // PAGE) - shared
    num_blocks = shared + chunks * own + 1
    perm = torch.randperm(num_blocks, generator=gen).tolist()
    prefix, rest = perm[:shared], perm[shared:]
    tables = [prefix + rest[c * own:(c + 1) * own] for c in range(chunks)]
    shape = (num_blocks, PAGE, kv_heads, HEAD_DIM)
    k = torch.randn(shape, generator=gen).to(dtype).to(device)
    v = torch.randn(shape, generator=gen).to(dtype).to(device)
    q = torch.randn(chunks * new, HEADS, HEAD_DIM, generator=gen).to(dtype).to(device)
    table = torch.tensor(tables, dtype=torch.int32).to(device)
    return q, k, v, [(c * new, new, pos) for c in range(chunks)], table


def cuda_time(torch, fn, reps: int) -> float:
    """Seconds per call (after 3 untimed calls); wall clock off CUDA (--smoke)."""
    for _ in range(3):
        fn()
    if not torch.cuda.is_available():
        started = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - started) / reps
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1000 / reps


def sweep_tiles(torch, K, steps, tiles, scale: float, reps: int):  # noqa: ANN001
    """[(geo-mean of time / the step's fastest, tile, [seconds per step])], best first; a
    tile that fails on any step (out of shared memory, ...) is left out."""
    timed = []
    for tile in tiles:
        times = []
        try:
            for q, k, v, spec, table in steps:
                plan = K.plan_prefill(spec, table, K.PrefillTuning(*tile))
                times.append(cuda_time(torch, lambda q=q, k=k, v=v, plan=plan:
                                       K.paged_prefill_attention(q, k, v, plan, scale), reps))
        except Exception as exc:  # noqa: BLE001 - out of shared memory, etc.
            print(f"tile {tile}: {type(exc).__name__}", flush=True)
            continue
        timed.append((tile, times))
    best = [min(t[i] for _, t in timed) for i in range(len(steps))]
    scored = [(statistics.geometric_mean([t / b for t, b in zip(times, best)]), tile, times)
              for tile, times in timed]
    return sorted(scored)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--smoke", action="store_true", help="tiny steps on the CPU (fp32)")
    p.add_argument("--no-sweep", action="store_true", help="skip the tile sweep")
    p.add_argument("--kv-heads", type=int, default=HEADS,
                   help=f"key/value heads (default {HEADS}: no GQA; 8: LLaMA-3-8B's GQA)")
    args = p.parse_args()
    import_parrot()
    import parrot_kernels as K
    from parrot_kernels.prefill import key_splits
    import torch

    from parrot.engines.builtin.llama.attention import (PrefillChunk, prefill_sdpa_backends,
                                                        prefill_torch)

    gen = torch.Generator().manual_seed(0)
    dtype, device = (torch.float32, "cpu") if args.smoke else (torch.bfloat16, "cuda")
    scale = HEAD_DIM ** -0.5
    rows, steps = [], []
    for name, (chunks, new, pos, forks) in (SMOKE_STEPS if args.smoke else STEPS).items():
        q, k, v, spec, table = build_step(torch, chunks, new, pos, forks, dtype, gen,
                                        device, args.kv_heads)
        pieces = [PrefillChunk(r, r + n, s, table[c, :-(-(s + n) // PAGE)].long())
                  for c, (r, n, s) in enumerate(spec)]
        # the new rows' K/V, as the step computed them (the cache holds the same values)
        k_new, v_new = (torch.cat([cache.index_select(0, c.block_table).flatten(0, 1)
                                   [c.pos_start:c.pos_start + c.row_end - c.row_start]
                                   for c in pieces]) for cache in (k, v))

        def sdpa(q=q, k=k, v=v, pieces=pieces, k_new=k_new, v_new=v_new):
            with prefill_sdpa_backends(q.device):
                return torch.cat([prefill_torch(q, k_new, v_new, k, v, c, scale)
                                  for c in pieces])

        plan = K.plan_prefill(spec, table)
        whole = K.plan_prefill(spec, table, dataclasses.replace(plan.tuning, kv_splits=1))
        out = torch.empty_like(q)

        def paged(q=q, k=k, v=v, plan=plan, out=out):
            return K.paged_prefill_attention(q, k, v, plan, scale, out=out)

        def unsplit(q=q, k=k, v=v, plan=whole, out=out):
            return K.paged_prefill_attention(q, k, v, plan, scale, out=out)

        want = sdpa().float()
        err = ((paged().float() - want).norm() / want.norm()).item()
        t_sdpa, t_paged = cuda_time(torch, sdpa, args.reps), cuda_time(torch, paged, args.reps)
        t_whole = cuda_time(torch, unsplit, args.reps)
        splits = key_splits(plan, HEADS, torch.cuda.get_device_properties(0).multi_processor_count
                            if device == "cuda" else 4)[0]
        flops = 4 * HEADS * HEAD_DIM * sum(n * (s + (n + 1) / 2) for _, n, s in spec)
        rows.append([name, f"{t_sdpa * 1e6:.0f}", f"{t_paged * 1e6:.0f}",
                     f"{t_sdpa / t_paged:.2f}x", f"{flops / t_paged / 1e12:.0f}",
                     f"{err:.1e}", str(splits), f"{t_whole * 1e6:.0f}"])
        print("| " + " | ".join(rows[-1]) + " |", flush=True)
        steps.append((q, k, v, spec, table))
    tiles = [] if args.no_sweep else ((16, 16, 4, 1), (32, 16, 4, 1)) if args.smoke else [
        (bm, bn, w, st) for bm in (32, 64, 128) for bn in (32, 64, 128) for w in (4, 8)
        for st in (1, 2, 3)]
    sweep = sweep_tiles(torch, K, steps, tiles, scale, args.reps) if tiles else []
    command = "python3 " + " ".join(shlex.quote(a) for a in sys.argv)
    lines = [
        "# Prefill attention, one layer: SDPA per chunk vs the paged prefill kernel", "",
        f"* date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC",
        f"* device: {torch.cuda.get_device_name() if device == 'cuda' else 'CPU (smoke)'}, "
        f"torch {torch.__version__}, {str(dtype).replace('torch.', '')}, "
        f"{HEADS} query / {args.kv_heads} key-value heads x {HEAD_DIM}, pages of {PAGE}",
        f"* command: `{command}`", "",
        "| step | SDPA per chunk us | paged kernel us | SDPA / kernel | kernel TFLOP/s | "
        "rel. diff | key ranges | kernel, keys whole us |", "|---|---|---|---|---|---|---|---|",
        *("| " + " | ".join(r) + " |" for r in rows), "",
        f"Tile sweep over every step above (default {K.PrefillTuning()}): each tile's "
        "time on each step over that step's fastest tile, the geometric mean over the "
        "steps, best first:", "",
        "| block_m | block_n | warps | stages | geo-mean / best | "
        + " | ".join(f"step {i + 1} us" for i in range(len(steps))) + " |",
        "|---|---|---|---|---|" + "---|" * len(steps),
        *(f"| {bm} | {bn} | {w} | {st} | {g:.3f} | "
          + " | ".join(f"{t * 1e6:.0f}" for t in times) + " |"
          for g, (bm, bn, w, st), times in sweep[:12]),
        ""]
    text = "\n".join(lines)
    print(text)
    record(text, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
