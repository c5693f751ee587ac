"""The small-batch linear kernels (parrot_kernels.gemv) against cuBLAS (F.linear) on an H200.

At decode batch 1-64 a linear layer is a weight read: floor = bytes(W) / bandwidth. For each
LLaMA-7B projection shape and T rows this sweeps a kernel's tiles (``--kernel elementwise``,
``GemvTuning``, 1-4 rows; ``--kernel dot``, ``DotTuning``, the tensor-core one, 2-64 rows:
every tile at the first row count, its three best at the others), and prints the best
against F.linear, both as time per call and as the rate W is read at. Weights rotate over
copies totalling >= 1 GB so nothing is served from the 50 MB L2 (as in a real decode step,
where 13 GB of weights stream through), and every timing replays a CUDA graph of the calls
(no launch overhead in either column).

    python3 bench/bench_gemv.py [--out docs/results/gemv_h200.md]
    python3 bench/bench_gemv.py --kernel dot --rows 8,2,4,16 [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from repo_imports import import_parrot  # noqa: E402
from report import record  # noqa: E402

import_parrot()   # graph_time is the engine's timer; every script that imports this one gets it

SHAPES = {"qkv": (12288, 4096), "o_proj": (4096, 4096), "gate_up": (22016, 4096),
          "down": (4096, 11008), "lm_head": (32000, 4096)}


def graph_time(calls, reps: int = 5, warm: int = 1) -> float:
    """Seconds per call: a CUDA graph of `calls` (a list of thunks) replayed `reps` times after
    `warm` untimed replays (the engine's start-up timer, linear_choice.cuda_graph_timer)."""
    from parrot.engines.builtin.llama.linear_choice import cuda_graph_timer
    return cuda_graph_timer(reps, warm)(calls)


def rotated_weights(torch, n: int, k: int) -> list:
    """Copies of a random [n, k] bf16 weight totalling >= 1 GB: a loop over them streams every
    byte from memory, as a decode step's 13 GB of weights do (the L2 holds 50 MB)."""
    copies = max(2, -(-(1 << 30) // (n * k * 2)))
    return [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(copies)]


def cublas_seconds(torch, ws: list, x, warm: int = 1) -> tuple[float, list]:
    """Seconds per x @ W^T through cuBLAS over the rotated weights `ws`, and the outputs."""
    ys = [torch.empty(x.shape[0], w.shape[0], device="cuda", dtype=x.dtype) for w in ws]
    sec = graph_time([lambda w=w, y=y: torch.matmul(x, w.t(), out=y)
                      for w, y in zip(ws, ys)], warm=warm)
    return sec, ys


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kernel", choices=("elementwise", "dot"), default="elementwise")
    p.add_argument("--rows", default=None, help="default 1,2,4 (elementwise), 8,2,4,16 (dot)")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    import_parrot()
    import torch
    import torch.nn.functional as F
    from parrot_kernels.gemv import DotTuning, GemvTuning, small_batch_linear

    rows = args.rows or ("1,2,4" if args.kernel == "elementwise" else "8,2,4,16")
    rows_list = [int(r) for r in rows.split(",")]
    tunings: list[GemvTuning] | list[DotTuning]
    if args.kernel == "elementwise":
        tunings = [GemvTuning(bn, bk, w, s)
                   for bn, bk, w, s in itertools.product((4, 8, 16, 32), (256, 512, 1024), (4, 8),
                                                         (1, 3))
                   if bn * bk <= 16384]
    else:
        tunings = [DotTuning(bn, bk, w, s)
                   for bn, bk, w, s in itertools.product((32, 64, 128), (64, 128, 256), (4, 8),
                                                         (3, 4, 5, 6))
                   if bn * bk <= 16384]
    lines = ["| shape | N x K | T | weight MB | cuBLAS us | cuBLAS TB/s | kernel us | "
             "kernel TB/s | kernel / cuBLAS | best tile (n, k, warps, stages) | max abs err |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    print(lines[0], flush=True)
    best_three: dict[str, list] = {}   # per shape, from the first row count
    for name, (n, k) in SHAPES.items():
        nbytes = n * k * 2
        ws = rotated_weights(torch, n, k)
        for t in rows_list:
            x = torch.randn(t, k, device="cuda", dtype=torch.bfloat16)
            cublas, ys = cublas_seconds(torch, ws, x)
            # every tile at the first row count; at the others its three best for this shape
            candidates = tunings if name not in best_three else best_three[name]
            timed = []
            for tune in candidates:
                try:
                    sec = graph_time([lambda w=w, y=y, x=x, tune=tune: small_batch_linear(
                        x, w, out=y, tuning=tune) for w, y in zip(ws, ys)])
                except Exception as exc:  # a tile that does not compile: skip it
                    print(f"  {tune}: {type(exc).__name__}", flush=True)
                    continue
                timed.append((sec, tune))
            timed.sort(key=lambda st: st[0])
            if name not in best_three:
                best_three[name] = [tu for _, tu in timed[:3]]
            sec, tune = timed[0]
            err = (small_batch_linear(x, ws[0], tuning=tune).float()
                   - F.linear(x, ws[0]).float()).abs().max().item()
            row = [name, f"{n} x {k}", str(t), f"{nbytes / 1e6:.0f}", f"{cublas * 1e6:.1f}",
                   f"{nbytes / cublas / 1e12:.2f}", f"{sec * 1e6:.1f}",
                   f"{nbytes / sec / 1e12:.2f}", f"{sec / cublas:.2f}x",
                   f"{tune.block_n}, {tune.block_k}, {tune.num_warps}, {tune.num_stages}",
                   f"{err:.3g}"]
            lines.append("| " + " | ".join(row) + " |")
            print(lines[-1], flush=True)
        del ws
        torch.cuda.empty_cache()
    text = "\n".join([
        f"# small-batch linear kernel ({args.kernel}) vs cuBLAS (bf16)", "",
        f"* date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M UTC}",
        f"* GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}",
        f"* command: `python3 bench/bench_gemv.py --kernel {args.kernel} --rows {rows}`", "",
        *lines, ""])
    record(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
