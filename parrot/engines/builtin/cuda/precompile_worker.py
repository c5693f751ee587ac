"""A precompile worker process (`python -m parrot.engines.builtin.cuda.precompile_worker`,
started by precompile.AttentionPrecompile): its share of a spec's kernel specialisations
compiled into Triton's disk cache, on a KV cache of one block and zero weights; worker 0 also
keeps the warm-up's covering buckets. What the workers are given, how many start and how the
engine joins them: precompile.py.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from parrot.engines.builtin.config import BuiltinEngineConfig
from parrot.engines.builtin.cuda.early_precompile import job_config
from parrot.engines.builtin.cuda.buckets import GraphKey
from parrot.engines.builtin.cuda.precompile import (PrecompileSpec, Specialisation, Task,
                                                    WarmupCovering, covering_cache_path,
                                                    dry_runs, first_met, kept_covering,
                                                    run_padded_attention, scratch_prefill_meta)


def run_scratch_prefill(kernels: ModuleType, variant: Any, k_cache: torch.Tensor,
                        v_cache: torch.Tensor, *, num_heads: int, scale: float) -> torch.Tensor:
    """The paged prefill attention of `scratch_prefill_meta`'s chunk (scratch block 0) on tile
    `variant`, launched as the model's attention launches it in the warm-up's prefill (its
    query rows, a fresh output): a worker's prefill task. Zeros: garbage could hold NaNs the
    interpreter warns of; the split launch's workspace too (the plan keeps it for the launch),
    since a worker may launch the splits' merge alone (`launching_only`: the split kernel
    dealt to another worker)."""
    bs, head_dim = k_cache.shape[1], k_cache.shape[-1]
    meta = scratch_prefill_meta(kernels, variant, bs, 0, k_cache.device)
    _splits, _length, workspace = meta.prefill_plan.launch(num_heads, head_dim, k_cache.device)
    if workspace is not None:
        workspace.zero_()
    q = torch.zeros(bs, num_heads, head_dim, dtype=k_cache.dtype, device=k_cache.device)
    out: torch.Tensor = kernels.paged_prefill_attention(q, k_cache, v_cache, meta.prefill_plan,
                                                        scale)
    return out


class TaskRunner:
    """Runs a spec's tasks (`PrecompileSpec.tasks`) on a KV cache of one block and zero
    weights: a kernel's specialisation depends on neither the cache's size nor the values."""

    def __init__(self, spec: PrecompileSpec) -> None:
        import parrot_kernels
        from parrot.engines.builtin.llama.attention import make_decode_fn

        self.spec = spec
        self.kernels: ModuleType = parrot_kernels
        self.device = torch.device(spec.device)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self.dtype = getattr(torch, spec.dtype)
        self.cache = torch.zeros(2, 1, spec.block_size, spec.num_kv_heads, spec.head_dim,
                                 dtype=self.dtype, device=self.device)
        self.decode = make_decode_fn(parrot_kernels)

    def __call__(self, task: Task, dry: bool = False) -> object:
        """Run `task`; `dry`: for a dry run (`run_padded_attention`)."""
        kind, *args = task
        ints = [int(a) for a in args]
        spec = self.spec
        if kind == "attention":
            key: GraphKey = (ints[0], ints[1], ints[2], ints[3])
            return run_padded_attention(self.decode, key, self.cache[0], self.cache[1],
                                        scratch_block=0, num_heads=spec.num_heads,
                                        scale=spec.head_dim ** -0.5, dry=dry)
        if kind == "prefill":
            return run_scratch_prefill(
                self.kernels, self.kernels.PrefillTuning(*spec.prefill[ints[0]]),
                self.cache[0], self.cache[1], num_heads=spec.num_heads,
                scale=spec.head_dim ** -0.5)
        # zeros (garbage could hold NaNs the interpreter warns of), freed at once: a worker
        # holds one projection's weight at a time
        n, k, rows = ints
        return self.kernels.small_batch_linear(
            torch.zeros(rows, k, dtype=self.dtype, device=self.device),
            torch.zeros(n, k, dtype=self.dtype, device=self.device))


def compile_share(spec: PrecompileSpec, worker: int, workers: int,
                  times: dict[str, float] | None = None) -> int:
    """In a worker: compile every `workers`-th of the specialisations `spec.tasks()` launch,
    from `worker` on, into Triton's disk cache (`TaskRunner`); worker 0 also keeps the
    warm-up's covering buckets (`keep_covering`). Returns how many it compiled; `times` gets
    the seconds of the dry run and of the compiling ("dry_s", "compile_s")."""
    run = TaskRunner(spec)
    started = time.perf_counter()
    # Every specialisation once, dealt round-robin over the workers: each compiles its own
    # (a bucket shares kernels with others; running whole buckets, several workers would
    # compile the shared ones at once), running the bucket that first met it with only
    # those launches made (parrot_kernels.launch.launching_only).
    from parrot_kernels.launch import launching_only

    launches = dry_runs(functools.partial(run, dry=True), spec.tasks())
    if worker == 0 and spec.covering is not None:
        keep_covering(spec.covering, launches, run)
    found = first_met(launches)
    dealt = [(task, one) for task, specs in found for one in specs][worker::workers]
    mine: dict[Task, set[Specialisation]] = {}
    for task, one in dealt:
        mine.setdefault(task, set()).add(one)
    covered = time.perf_counter()
    for task, specs in mine.items():
        with launching_only(specs):
            run(task)
    if run.device.type == "cuda":
        torch.cuda.synchronize(run.device)
    if times is not None:
        times.update(dry_s=covered - started, compile_s=time.perf_counter() - covered)
    return len(dealt)


def keep_covering(covering: WarmupCovering,
                  launches: Sequence[tuple[Task, set[Specialisation]]],
                  run: TaskRunner) -> Path | None:
    """Keep the covering buckets of the warm-up's bucket list where its `cached_covering_keys`
    reads them (unless kept there already), found from the workers' dry run (`launches`; its
    attention tasks only: a bucket it lacks is dry-run here). The file is keyed as the engine's
    (`covering_cache_path`: the GPU, the software, the cache's dtype and block layout, the heads
    and the exact bucket list): an engine whose sizing came out otherwise than predicted looks
    for another file and finds the covering itself. Returns the file's path."""
    seen = {tuple(task[1:]): specs for task, specs in launches if task[0] == "attention"}

    def launched(key: GraphKey) -> set[Specialisation]:
        if key not in seen:
            seen[key] = dry_runs(functools.partial(run, dry=True), [("attention", *key)])[0][1]
        return seen[key]

    keys = covering.buckets()
    path = covering_cache_path(Path(covering.folder), run.cache[0], run.spec.num_heads, keys)
    kept_covering(path, lambda: [key for key, _ in first_met(
        (key, launched(key)) for key in keys)])
    return path


def spec_of_job(job: str) -> PrecompileSpec | None:
    """The spec a worker compiles: `job` itself (a PrecompileSpec's JSON), or, for a worker
    started from the engine's config before the spec was known (early_precompile.py), the
    spec the engine computes from that config (precompile_plan.py); None when that engine wants
    no precompile or the stamp says its kernels are all compiled already."""
    config = job_config(json.loads(job))
    if config is None:
        return PrecompileSpec.from_json(job)
    from parrot.engines.builtin.cuda.precompile_plan import precompile_plan  # the engine's

    plan = precompile_plan(BuiltinEngineConfig.from_mapping(config))
    if plan is None or plan.stamp.is_file():
        return None
    return plan.spec


def main() -> int:
    """A worker: `python -m parrot.engines.builtin.cuda.precompile_worker WORKER WORKERS JOB
    SPAWNED` (JOB: a spec's JSON or `early_precompile.config_job`'s; SPAWNED: the parent's
    time.time() when it started it); prints one JSON line."""
    worker, workers = int(sys.argv[1]), int(sys.argv[2])
    spec = spec_of_job(sys.argv[3])
    times: dict[str, float] = {}
    start_s = time.time() - float(sys.argv[4])
    compiled = 0 if spec is None else compile_share(spec, worker, workers, times)
    print(json.dumps({"compiled": compiled, "start_s": start_s, **times}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
