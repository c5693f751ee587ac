"""Ways to run a decode step's projections at 8-64 rows on one GPU, against the byte floor.

At batch 64 the step's GEMMs read 13.2 GB of weights and cuBLAS's default choice reads the
small ones (o_proj, down) at 1.3-1.6x their floor (docs/results/decode_parts_h200.md). This
times, for each LLaMA-7B projection and T rows, in CUDA graphs over >= 1 GB of rotated
weights (nothing from the L2):

* ``cublas``: ``x @ W^T`` as the engine runs it (the default BLAS library);
* ``cublaslt``: the same call with ``torch.backends.cuda.preferred_blas_library("cublaslt")``;
* ``nn``: ``x @ Wt`` with the weight stored transposed ([K, N] row-major), another layout
  for the library's heuristics;
* ``tunable``: TunableOp (``torch.cuda.tunable``) after tuning each shape, when this build has
  it for CUDA; its choice is printed.

    python3 bench/bench_gemm_variants.py [--rows 8,16,32,64] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import record  # noqa: E402
from bench_gemv import SHAPES, graph_time, rotated_weights  # noqa: E402
from engine_suite import ceilings  # noqa: E402

LAYERS = 32


def time_variants(torch, n: int, k: int, t: int, ws: list) -> dict[str, float]:
    """Seconds per call of each variant for an [n, k] weight at t rows."""
    x = torch.randn(t, k, device="cuda", dtype=torch.bfloat16)
    ys = [torch.empty(t, n, device="cuda", dtype=torch.bfloat16) for _ in ws]

    def timed(weights: list) -> float:      # x @ each of `weights` ([K, N] views), in a graph
        return graph_time([lambda w=w, y=y: torch.matmul(x, w, out=y)
                           for w, y in zip(weights, ys)], warm=3)

    out: dict[str, float] = {}
    blas = torch.backends.cuda
    default = blas.preferred_blas_library()
    for name in ("cublas", "cublaslt"):
        blas.preferred_blas_library(name)
        try:
            out[name] = timed([w.t() for w in ws])
        finally:
            blas.preferred_blas_library(default)
    out["nn"] = timed([w.t().contiguous() for w in ws[: max(2, len(ws) // 2)]])
    tunable = torch.cuda.tunable
    try:
        tunable.enable(True)
        tunable.tuning_enable(True)
        tunable.set_max_tuning_iterations(30)
        torch.matmul(x, ws[0].t(), out=ys[0])      # tunes this shape (outside any capture)
        torch.cuda.synchronize()
        tunable.tuning_enable(False)
        out["tunable"] = timed([w.t() for w in ws])
    except Exception as exc:  # a build without CUDA TunableOp
        print(f"  tunable: {type(exc).__name__}: {exc}", flush=True)
    finally:
        tunable.enable(False)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", default="8,16,32,64")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    import torch
    rows_list = [int(r) for r in args.rows.split(",")]
    copy_bw = ceilings(torch)[0]
    tunable_file = Path(tempfile.mkdtemp()) / "tunableop_results.csv"
    torch.cuda.tunable.set_filename(str(tunable_file))
    names = ["cublas", "cublaslt", "nn", "tunable"]
    lines = ["| shape | T | floor us | " + " | ".join(f"{v} us (/ floor)" for v in names)
             + " | best |", "|---" * (len(names) + 4) + "|"]
    print(lines[0], flush=True)
    per_step: dict[int, dict[str, float]] = {t: dict.fromkeys(names, 0.0) for t in rows_list}
    for shape, (n, k) in SHAPES.items():
        ws = rotated_weights(torch, n, k)
        floor = n * k * 2 / copy_bw
        for t in rows_list:
            sec = time_variants(torch, n, k, t, ws)
            count = 1 if shape == "lm_head" else LAYERS
            for v in names:
                per_step[t][v] += sec.get(v, float("nan")) * count
            cells = [f"{sec[v] * 1e6:.1f} ({sec[v] / floor:.2f}x)" if v in sec else "-"
                     for v in names]
            best = min(sec, key=sec.__getitem__)
            lines.append(f"| {shape} | {t} | {floor * 1e6:.1f} | " + " | ".join(cells)
                         + f" | {best} |")
            print(lines[-1], flush=True)
        del ws
        torch.cuda.empty_cache()
    step = ["| T | " + " | ".join(f"{v} ms" for v in names) + " |", "|---" * (len(names) + 1)
            + "|"]
    for t in rows_list:
        step.append(f"| {t} | " + " | ".join(f"{per_step[t][v] * 1e3:.3f}" for v in names)
                    + " |")
    print("\n".join(step), flush=True)
    chosen = tunable_file.read_text() if tunable_file.exists() else "(no TunableOp file)"
    print(chosen, flush=True)
    text = "\n".join([
        "# A decode step's GEMMs at 8-64 rows: library choices against the byte floor", "",
        f"* date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M UTC}",
        f"* GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}",
        f"* ceiling: device-to-device copy {copy_bw / 1e12:.2f} TB/s; floor = weight bytes / it",
        f"* command: `python3 bench/bench_gemm_variants.py --rows {args.rows}`", "",
        *lines, "", "Per step (32 layers + LM head):", "", *step, "",
        "TunableOp's choices:", "", "```", chosen.strip(), "```", ""])
    record(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
