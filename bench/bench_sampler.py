"""The builtin engine's sampling cost per step: `sampler.sample` over a step's logits, greedy and
sampled, at serving batch sizes (what follows every model step; a step of sampled rows cannot
feed its tokens to the next step on the device, so this time is exposed).

    python bench/bench_sampler.py [--device cuda] [--rows 1,64,256] [--vocab 32000]
        [--steps 50]

Prints ms per step (median of `--steps`, each synchronised by the sampler's own read-back):
greedy; temperature 1.0; temperature 0.7 with top-p 0.95; temperature 0.7 with top-k 50.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from parrot.engines.builtin.sampler import make_generator, sample  # noqa: E402
from parrot.sampling import SamplingParams  # noqa: E402

CASES = {"greedy": SamplingParams(temperature=0.0),
         "temperature 1.0": SamplingParams(temperature=1.0),
         "temperature 0.7, top-p 0.95": SamplingParams(temperature=0.7, top_p=0.95),
         "temperature 0.7, top-k 50": SamplingParams(temperature=0.7, top_k=50)}


def step_ms(logits: torch.Tensor, params: SamplingParams, steps: int) -> float:
    """Median ms of `sample` over `logits` with every row sampling by `params`."""
    rows = logits.shape[0]
    gens = [None if params.is_greedy else make_generator(i) for i in range(rows)]
    every = [params] * rows
    sample(logits, every, gens)                                   # warm
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        sample(logits, every, gens)                               # ends in its read-back
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--rows", default="1,64,256")
    p.add_argument("--vocab", type=int, default=32000, help="LLaMA's 32,000 by default")
    p.add_argument("--steps", type=int, default=50)
    args = p.parse_args(argv)
    device = torch.device(args.device)
    rows = [int(r) for r in args.rows.split(",")]
    print(f"sampling ms per step, {device}, vocab {args.vocab:,}")
    print("| case | " + " | ".join(f"{r} rows" for r in rows) + " |")
    print("|---|" + "---|" * len(rows))
    torch.manual_seed(0)
    for name, params in CASES.items():
        cells = [step_ms(torch.randn(r, args.vocab, device=device), params, args.steps)
                 for r in rows]
        print(f"| {name} | " + " | ".join(f"{ms:.2f}" for ms in cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
