"""The decode layer's elementwise ops: the Triton fused kernels against torch.compile of the
same PyTorch ops, on one GPU (the engine issue's "Triton kernels, or torch.compile where it
wins — measure both").

For each op of a LLaMA-7B decode layer at T rows, bf16 — residual add + RMSNorm, RoPE + K/V
cache write, SiLU * up — three implementations, equal in value:

* ``fused``: the kernel the engine runs (``parrot_kernels``);
* ``compiled``: ``torch.compile`` (inductor, default mode: no CUDA graphs of its own) of the
  PyTorch reference the kernel replaces (``parrot_kernels.fused.reference_*``), compiled for
  each row count before timing (the compile time is printed);
* ``eager``: that reference as PyTorch runs it.

Each is timed as a CUDA graph of 32 calls (one per layer, each on its own buffers, as in a
decode step) replayed after warm-up, so launch overhead is what a captured step pays. Prints
a table and the per-step total (32 layers x 2 norms + RoPE + SiLU).

    python3 bench/bench_compile.py [--rows 1,32,64] [--out docs/results/compile_h200.md]
    python3 bench/bench_compile.py --device cpu --smoke   # tiny shapes, wall clock, no graphs
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gemv import graph_time  # noqa: E402
from repo_imports import import_parrot  # noqa: E402
from report import record  # noqa: E402

LAYERS = 32


@dataclass(frozen=True)
class Shape:
    hidden: int = 4096
    heads: int = 32
    kv_heads: int = 32
    head_dim: int = 128
    intermediate: int = 11008
    positions: int = 4096
    blocks: int = 64          # KV blocks per layer's cache (the slots written are spread)
    block_size: int = 16


SMOKE = Shape(hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=96, positions=64,
              blocks=16, block_size=4)   # 64 slots: room for --rows up to 64


def op_inputs(torch, shape: Shape, t: int, device: str, dtype) -> dict[str, list[tuple]]:
    """Per op, one argument tuple per layer (distinct buffers)."""
    def randn(*size):
        return torch.randn(*size, device=device, dtype=dtype)
    d, width = shape.head_dim, (shape.heads + 2 * shape.kv_heads) * shape.head_dim
    cos = torch.cos(torch.rand(shape.positions, d, device=device)).to(dtype)
    sin = torch.sin(torch.rand(shape.positions, d, device=device)).to(dtype)
    positions = torch.randint(0, shape.positions, (t,), device=device)
    slots = torch.randperm(shape.blocks * shape.block_size, device=device)[:t]
    cache = (shape.blocks, shape.block_size, shape.kv_heads, d)
    return {
        "add_rms_norm": [(randn(t, shape.hidden), randn(t, shape.hidden) * 1e-3,
                          randn(shape.hidden), 1e-5) for _ in range(LAYERS)],
        "rope_kv_write": [(randn(t, width), cos, sin, positions, slots, randn(*cache),
                           randn(*cache), shape.heads, shape.kv_heads) for _ in range(LAYERS)],
        "silu_mul": [(randn(t, 2 * shape.intermediate),) for _ in range(LAYERS)],
    }


def wall_seconds(fn: Callable, args: list[tuple], reps: int = 5) -> float:
    for a in args:
        fn(*a)
    started = time.perf_counter()
    for _ in range(reps):
        for a in args:
            fn(*a)
    return (time.perf_counter() - started) / (reps * len(args))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", default="1,32,64")
    p.add_argument("--device", default="cuda")
    p.add_argument("--smoke", action="store_true", help="tiny shapes (a CPU check of the script)")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    import_parrot()
    import torch
    import parrot_kernels as kernels
    from parrot_kernels import fused

    on_cuda = args.device.startswith("cuda")
    dtype = torch.bfloat16 if on_cuda else torch.float32
    shape = SMOKE if args.smoke else Shape()
    def timer(fn: Callable, calls: list[tuple]) -> float:
        if not on_cuda:
            return wall_seconds(fn, calls)
        return graph_time([lambda a=a: fn(*a) for a in calls], reps=20)
    impls = {
        "add_rms_norm": (kernels.add_rms_norm, fused.reference_add_rms_norm),
        "rope_kv_write": (kernels.rope_kv_write, fused.reference_rope_kv_write),
        "silu_mul": (kernels.silu_mul, fused.reference_silu_mul),
    }
    per_step = {"add_rms_norm": 2, "rope_kv_write": 1, "silu_mul": 1}   # calls per layer
    lines = ["| op | T | fused us | torch.compile us | eager us | compile / fused | "
             "first compile s |", "|---|---|---|---|---|---|---|"]
    print(lines[0], flush=True)
    totals: dict[int, dict[str, float]] = {}
    for t in (int(r) for r in args.rows.split(",")):
        inputs = op_inputs(torch, shape, t, args.device, dtype)
        total = totals.setdefault(t, {"fused": 0.0, "compiled": 0.0, "eager": 0.0})
        for name, (kernel, reference) in impls.items():
            # dynamic=False: one graph per row count, as a captured decode bucket would be
            compiled = torch.compile(reference, dynamic=False)
            started = time.perf_counter()
            compiled(*inputs[name][0])
            compile_s = time.perf_counter() - started
            sec = {"fused": timer(kernel, inputs[name]),
                   "compiled": timer(compiled, inputs[name]),
                   "eager": timer(reference, inputs[name])}
            for k, v in sec.items():
                total[k] += v * LAYERS * per_step[name]
            lines.append(f"| {name} | {t} | {sec['fused'] * 1e6:.1f} | "
                         f"{sec['compiled'] * 1e6:.1f} | {sec['eager'] * 1e6:.1f} | "
                         f"{sec['compiled'] / sec['fused']:.2f}x | {compile_s:.1f} |")
            print(lines[-1], flush=True)
        torch._dynamo.reset()
    step = ["| T | fused ms | torch.compile ms | eager ms |", "|---|---|---|---|"]
    step += [f"| {t} | {v['fused'] * 1e3:.3f} | {v['compiled'] * 1e3:.3f} | "
             f"{v['eager'] * 1e3:.3f} |" for t, v in totals.items()]
    print("\n".join(step), flush=True)
    device = torch.cuda.get_device_name() if on_cuda else "CPU (wall clock, no graphs)"
    text = "\n".join([
        "# The decode layer's elementwise ops: Triton fused kernels vs torch.compile", "",
        f"* date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M UTC}",
        f"* device: {device}, torch {torch.__version__}, {str(dtype).removeprefix('torch.')}",
        f"* command: `python3 bench/bench_compile.py --rows {args.rows}"
        f"{' --device ' + args.device if not on_cuda else ''}{' --smoke' if args.smoke else ''}`",
        "", *lines, "", "Per decode step (32 layers: two norms, RoPE + KV write, SiLU * up):",
        "", *step, ""])
    record(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
