"""The two big parts of a batch-B LLaMA-7B decode step, each against its byte floor (one GPU).

At batch 32-64 with ~550-token contexts a decode step is the weight read (13.2 GB, the
GEMMs) plus the KV read (B x L x 0.5 MB, the attention); everything else is < 5%
(docs/ENGINE.md). This measures, in one process:

* the ceiling: device-to-device copy (bytes read + written), as the engine suite measures it;
* GEMMs: each projection shape at T rows through cuBLAS (what the engine runs from two rows
  on), against the floor; weights rotate over >= 1 GB of copies so nothing comes from
  the L2, timed inside CUDA graphs;
* paged decode attention over 32 layers of distinct KV (the engine's layout, contexts of L
  tokens, tables padded to the engine's power-of-two width bucket), timed as one CUDA graph
  of the 32 launches, for each ``KernelTuning`` variant.

    python3 bench/bench_decode_parts.py [--out docs/results/decode_parts_h200.md]
"""

from __future__ import annotations

import argparse
import datetime
import functools
import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gemv import SHAPES, cublas_seconds, graph_time, rotated_weights  # noqa: E402
from engine_suite import ceilings  # noqa: E402
from repo_imports import import_parrot  # noqa: E402

LAYERS, HEADS, HEAD_DIM, PAGE = 32, 32, 128, 16


def gemm_section(torch, rows_list: list[int], copy_bw: float) -> tuple[list[str], float]:
    """cuBLAS (what the engine runs at T >= 2) on each projection against the floor."""
    lines = ["| shape | N x K | T | weight MB | floor us | cuBLAS us | cuBLAS TB/s | "
             "/ floor |", "|---" * 8 + "|"]
    print(lines[0], flush=True)
    total = 0.0
    for name, (n, k) in SHAPES.items():
        nbytes = n * k * 2
        ws = rotated_weights(torch, n, k)
        for t in rows_list:
            sec, _ = cublas_seconds(torch, ws, torch.randn(t, k, device="cuda",
                                                           dtype=torch.bfloat16), warm=3)
            if t == max(rows_list):
                total += sec * (LAYERS if name != "lm_head" else 1)
            floor = nbytes / copy_bw
            row = [name, f"{n} x {k}", str(t), f"{nbytes / 1e6:.1f}", f"{floor * 1e6:.1f}",
                   f"{sec * 1e6:.1f}", f"{nbytes / sec / 1e12:.2f}", f"{sec / floor:.2f}x"]
            lines.append("| " + " | ".join(row) + " |")
            print(lines[-1], flush=True)
        del ws
        torch.cuda.empty_cache()
    return lines, total


def _layer_caches(torch, b: int, ctx: int, budget_bytes: float):
    """Distinct per-layer KV ([2, blocks, page, heads, dim], the engine's layout) for as many
    layers as fit the budget (at least 4, at most 32: together always well past the L2), each
    row's blocks consecutive as in a fresh engine; tables padded to the engine's width bucket."""
    blocks_per_row = -(-ctx // PAGE)
    width = 1 << (blocks_per_row - 1).bit_length()
    nblocks = b * blocks_per_row
    layer_bytes = 2 * (nblocks + 1) * PAGE * HEADS * HEAD_DIM * 2
    layers = int(max(4, min(LAYERS, budget_bytes // layer_bytes)))
    caches = [torch.randn(2, nblocks + 1, PAGE, HEADS, HEAD_DIM, device="cuda",
                          dtype=torch.bfloat16) for _ in range(layers)]
    tables = torch.zeros(b, width, dtype=torch.int32, device="cuda")
    tables[:, :blocks_per_row] = torch.arange(nblocks, dtype=torch.int32,
                                              device="cuda").view(b, blocks_per_row)
    return caches, tables


def attention_section(torch, batches: list[int], contexts: list[int], copy_bw: float,
                      sweep: bool) -> list[str]:
    """Per (batch, context): the default plan against forced split counts and loop shapes
    (`sweep`), or the default plan alone."""
    import parrot_kernels as pk
    from parrot_kernels.plan import KernelTuning, paged_plan

    lines = ["| batch | context | tuning | splits | ms per 32 layers | GB read (32 layers) | "
             "TB/s | / floor |", "|---" * 8 + "|"]
    print(lines[0], flush=True)
    for ctx, b in itertools.product(contexts, batches):
        caches, tables = _layer_caches(torch, b, ctx, 24e9)
        width_tokens = tables.shape[1] * PAGE
        lens = torch.full((b,), ctx, dtype=torch.int32, device="cuda")
        q = torch.randn(b, HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        out = torch.empty_like(q)
        gbytes = LAYERS * b * ctx * HEADS * HEAD_DIM * 2 * 2 / 1e9
        variants = [("default", KernelTuning())]
        if sweep:
            for (bn, stages), splits in itertools.product(((128, 2), (64, 3)), (1, 2, 4, 8, 16)):
                if width_tokens // splits >= bn:
                    variants.append((f"block_n={bn} stages={stages}", KernelTuning(
                        split_tokens=-(-width_tokens // splits), block_n=bn, num_stages=stages)))
            variants.append(("block_n=64 stages=3, auto splits",
                             KernelTuning(block_n=64, num_stages=3)))
        for label, tun in variants:
            plan = paged_plan(q, caches[0][0], tables, tun)
            need = pk.paged_decode_workspace_numel(q, caches[0][0], tables, tuning=tun)
            ws = torch.empty(max(need, 1), dtype=torch.float32, device="cuda")
            calls = [functools.partial(pk.paged_decode_attention, q, c[0], c[1], tables, lens,
                                       HEAD_DIM ** -0.5, out=out, workspace=ws, tuning=tun)
                     for c in caches]
            try:
                sec = graph_time(calls, warm=3) * LAYERS
            except Exception as exc:
                print(f"  B={b} {label}: {type(exc).__name__}: {exc}", flush=True)
                continue
            row = [str(b), str(ctx), label, str(plan.row_splits), f"{sec * 1e3:.3f}",
                   f"{gbytes:.2f}", f"{gbytes / sec / 1e3:.2f}",
                   f"{sec / (gbytes * 1e9 / copy_bw):.2f}x"]
            lines.append("| " + " | ".join(row) + " |")
            print(lines[-1], flush=True)
        del caches
        torch.cuda.empty_cache()
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", default="16,32,64", help="GEMM row counts (decode batch sizes)")
    p.add_argument("--batches", default="32,64", help="attention batch sizes")
    p.add_argument("--contexts", default="544", help="attention context tokens per row")
    p.add_argument("--sweep", action="store_true",
                   help="attention: forced split counts and loop shapes beside the default")
    p.add_argument("--skip-gemm", action="store_true")
    p.add_argument("--skip-attention", action="store_true")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    import_parrot()
    import torch
    import triton

    copy_bw, _ = ceilings(torch)
    head = [f"# Decode-step parts against their byte floors ({torch.cuda.get_device_name()})", "",
            f"* date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC",
            f"* torch {torch.__version__}, triton {triton.__version__}",
            f"* command: `python3 {' '.join(sys.argv)}`",
            f"* ceiling: device-to-device copy {copy_bw / 1e12:.2f} TB/s (bytes read + written, "
            "1 GiB, timed with events as the engine suite does; the same copy and an fp32 row "
            "sum replayed in a CUDA graph measured only ~2.8 TB/s, not investigated); every "
            "floor below is bytes over it", ""]
    print("\n".join(head), flush=True)
    body: list[str] = []
    if not args.skip_gemm:
        rows = [int(r) for r in args.rows.split(",")]
        lines, cublas = gemm_section(torch, rows, copy_bw)
        body += ["## GEMMs (one decode step's projections, cuBLAS)", "", *lines, "",
                 f"Per step at T={max(rows)} (32 layers + LM head): {cublas * 1e3:.2f} ms.", ""]
    if not args.skip_attention:
        batches = [int(b) for b in args.batches.split(",")]
        body += ["## Paged decode attention (32 layers, one CUDA graph)", "",
                 *attention_section(torch, batches, [int(c) for c in args.contexts.split(",")],
                                    copy_bw, args.sweep), ""]
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(head + body) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
