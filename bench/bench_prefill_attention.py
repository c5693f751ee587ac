"""Prefill attention on a GPU: the first call of each new shape, per SDPA path.

A serving engine prefills chunks of many different lengths; a backend that prepares a plan
per shape (cuDNN) pays that on almost every request, which a benchmark of one fixed length
never shows. For `--shapes` random chunk lengths this times, per path, the first call of each
shape and a second call (each synchronised, wall clock), and names the kernels one call runs:

* causal: ``F.scaled_dot_product_attention(..., is_causal=True)`` over a fresh chunk (what
  the builtin engine runs for a chunk at position 0), with torch's default backend choice;
* causal, flash only / efficient only: the same inside ``sdpa_kernel(...)``;
* lower-right bias: ``attn_mask=causal_lower_right(n, n)`` (the engine's path for a chunk over
  cached context; for a fresh chunk it is the same function), and over 512 cached tokens;
* the same two inside the builtin engine's ``prefill_sdpa_backends`` (what the engine runs).

    python3 bench/bench_prefill_attention.py [--shapes 24] [--out docs/results/...md]
"""

from __future__ import annotations

import argparse
import datetime
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from repo_imports import import_parrot  # noqa: E402

HEADS, HEAD_DIM, CACHED = 32, 128, 512


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", type=int, default=24)
    p.add_argument("--min-len", type=int, default=300)
    p.add_argument("--max-len", type=int, default=2048)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    import_parrot()
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    from parrot.engines.builtin.llama.attention import prefill_sdpa_backends

    rng = random.Random(0)
    lengths = rng.sample(range(args.min_len, args.max_len + 1), args.shapes)

    def tensors(n: int):
        return [torch.randn(1, HEADS, n, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
                for _ in range(3)]

    def causal(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def only(backend):
        def run(q, k, v):
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return run

    def lower_right(q, k, v):
        n = q.shape[2]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(n, n))

    def cached(q, k, v):   # the chunk's queries after CACHED tokens of context
        kc, vc = (torch.cat([t, t[:, :, :CACHED]], dim=2) for t in (k, v))
        return F.scaled_dot_product_attention(
            q, kc, vc, attn_mask=causal_lower_right(q.shape[2], kc.shape[2]))

    def engine(fn):
        def run(q, k, v):
            with prefill_sdpa_backends(q.device):
                return fn(q, k, v)
        return run

    paths = {"causal (default backends)": causal,
             "causal, flash only": only(SDPBackend.FLASH_ATTENTION),
             "causal, efficient only": only(SDPBackend.EFFICIENT_ATTENTION),
             "lower-right bias": lower_right,
             f"lower-right bias, {CACHED} cached tokens": cached,
             "engine: causal": engine(causal),
             f"engine: lower-right bias, {CACHED} cached tokens": engine(cached)}
    warm = tensors(64)
    for fn in paths.values():      # library start-up costs, not per-shape ones
        fn(*warm)
    torch.cuda.synchronize()

    def timed(fn, q, k, v) -> float:
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn(q, k, v)
        torch.cuda.synchronize()
        return time.perf_counter() - start

    rows = []
    for offset, (name, fn) in enumerate(paths.items()):
        firsts, seconds = [], []
        for n in lengths:
            n += offset        # a shape no earlier path has seen
            q, k, v = tensors(n)
            firsts.append(timed(fn, q, k, v))
            seconds.append(timed(fn, q, k, v))
        q, k, v = tensors(lengths[0])
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            fn(q, k, v)
            torch.cuda.synchronize()
        kernels = sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})
        rows.append([name, f"{statistics.mean(firsts) * 1e3:.2f}",
                     f"{max(firsts) * 1e3:.2f}", f"{statistics.mean(seconds) * 1e3:.3f}",
                     "; ".join(k[:60] for k in kernels)[:240]])
        print("| " + " | ".join(rows[-1]) + " |", flush=True)
    lines = [f"# Prefill attention, first call per shape ({torch.cuda.get_device_name()})", "",
             f"* date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC",
             f"* torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}",
             f"* command: `python3 {' '.join(sys.argv)}`",
             f"* {args.shapes} random chunk lengths in [{args.min_len}, {args.max_len}], "
             f"{HEADS} heads x {HEAD_DIM}, bf16, one sequence (fresh chunk: keys = queries)",
             "", "| path | first call mean ms | first call max ms | second call mean ms | "
             "kernels |", "|---|---|---|---|---|",
             *("| " + " | ".join(r) + " |" for r in rows), ""]
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
