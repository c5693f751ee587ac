"""The decode attention's Triton kernels compiled in parallel, before the warm-up needs them.

A cold start (no Triton cache) spent 24.6 s of its 48 s in the warm-up's compile phase
(docs/results/startup_h200.md): the attention of ~2,000 decode buckets (batch x group count x
prefix width x suffix width) run one by one, each new Triton specialisation compiled in the
launching process, one at a time. Most buckets share their kernels with others: 164-174
buckets use every specialisation that ~2,000 use (LLaMA-7B, 256 rows). Two things here:

* `covering_keys`: of many buckets, the few whose launches use every specialisation the whole
  list uses, found by a dry run (`parrot_kernels.launch.specialisations`: the wrappers plan
  each bucket's launches, nothing launches; ~1 ms a bucket on the H200's host). The warm-up
  compiles only those: every other bucket's launches hit the JIT's in-memory cache later.
* `AttentionPrecompile`: worker processes (precompile_worker.py, run as `python -m`), each
  compiling its share of the specialisations (each one by exactly one worker: the bucket
  that first met it runs with only that launch made, `parrot_kernels.launch.launching_only`)
  into Triton's disk cache while the engine imports torch and loads its weights (started
  from the engine's config before its imports where it can: early_precompile.py; else here,
  from the spec). The engine joins them before it sizes its KV cache from the free memory
  (each worker's CUDA context holds some), then its own warm-up finds the kernels on disk.
  An optimisation only: a worker that fails or times out is logged, and the warm-up compiles
  what is missing itself. When every worker succeeded, a stamp in Triton's cache directory
  (`stamp_path`: the spec, torch, Triton and the kernels' source) says so, and later starts
  with the same stamp start no workers (a warm start would pay their start for nothing);
  clearing Triton's cache clears the stamp with it.

The workers also compile the small-batch linear kernels the engine's linear choice times
(`PrecompileSpec.linear`: the model's projection shapes at each row bucket up to the kernels'
`MAX_GEMV_ROWS`; 5.0 s of the same cold start, one specialisation after another) and the
paged prefill attention's tiles the warm-up's prefill runs (`PrecompileSpec.prefill`: 5.4 s
of a cold start, one eager forward per tile compiling its kernel), dealt with the attention's
specialisations the same way. And worker 0, whose dry run met every bucket the engine's
warm-up looks for the covering of, keeps that covering where the warm-up reads it
(`PrecompileSpec.covering`, `precompile_worker.keep_covering`): the engine's own dry run over
~2,000 buckets (1.5 s) is not run a second time.
"""

from __future__ import annotations

import json
import logging
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, astuple, dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple, TypeVar

import torch

from parrot.engines.builtin.cuda.buckets import GraphKey, compiled_keys
from parrot.engines.builtin.cuda.early_precompile import (spawn_worker, triton_cache_guess,
                                                          worker_command)
from parrot.engines.builtin.llama.attention import (AttentionMetadata, DecodeFn, PrefillChunk,
                                                    SharedPrefixMeta)
from parrot.engines.builtin.llama.shapes import ModelShape
from parrot.engines.builtin.start_cache import cache_key, kept, software

log = logging.getLogger(__name__)

K = TypeVar("K")
# A kernel launch as Triton compiles it (parrot_kernels.launch.specialisation).
Specialisation = tuple[object, ...]
# What a worker runs (PrecompileSpec.tasks): a kind, then its integers.
Task = tuple[int | str, ...]

# A worker still running after this long is killed (the warm-up compiles what it left).
WORKER_TIMEOUT_S = 300.0
# GPU memory a worker may hold while it runs (its CUDA context and small tensors: ~0.5 GB
# on an H200), and what stays free beside the weights and the workers: the workers run
# while the engine loads its weights, so on a GPU the weights nearly fill, fewer of them
# (or none) start, rather than the load running out of memory.
WORKER_BYTES = 1 << 30
SPARE_BYTES = 2 << 30


def workers_for_memory(workers: int, free_bytes: int, weight_bytes: int,
                       extra_per_worker: int = 0) -> int:
    """How many of `workers` fit beside weights of `weight_bytes` in `free_bytes`, each
    holding `extra_per_worker` bytes besides its own (its largest linear weight)."""
    return max(0, min(workers, (free_bytes - weight_bytes - SPARE_BYTES)
                      // (WORKER_BYTES + extra_per_worker)))


def padding_meta(key: GraphKey, block: int, device: torch.device) -> AttentionMetadata:
    """Decode attention metadata of a bucket whose rows are all padding (graphs.py
    `fill_padding`: one slot of `block` each, all in the last group), in tensors of its own,
    so any bucket can be built, also one larger than the graphs' static buffers."""
    bb, gb, pwidth, width = key

    def ints(values: list[int] | list[list[int]]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.int32, device=device)

    tables, lens = ints([[block] * width] * bb), ints([1] * bb)
    shared = None
    if gb:
        shared = SharedPrefixMeta(group_indptr=ints([0] * gb + [bb]),
                                  prefix_block_tables=ints([[block] * pwidth] * gb),
                                  prefix_lens=ints([0] * gb), suffix_block_tables=tables,
                                  suffix_lens=lens)
    return AttentionMetadata(slot_mapping=torch.zeros(bb, dtype=torch.int64, device=device),
                             num_decode=bb, decode_block_tables=None if gb else tables,
                             decode_seq_lens=None if gb else lens, shared_prefix=shared,
                             prefills=[])


def run_padded_attention(decode: DecodeFn, key: GraphKey, k_cache: torch.Tensor,
                         v_cache: torch.Tensor, scratch_block: int, *, num_heads: int,
                         scale: float, dry: bool = False) -> torch.Tensor:
    """The decode attention of bucket `key` over padding rows (`padding_meta`) reading only
    `scratch_block` of the caches: what compiles a bucket's kernels (the warm-up's and the
    precompile workers'). `dry`: for a dry run (`covering_keys`), where only the wrappers'
    plans matter: the metadata is built on the CPU and the query left unset, so a bucket
    costs no copy to the GPU and no wait for one (1 ms a bucket on the H200 otherwise, 2 s
    over 2,000 buckets)."""
    q = (torch.empty if dry else torch.randn)(key[0], num_heads, k_cache.shape[-1],
                                              dtype=k_cache.dtype, device=k_cache.device)
    meta = padding_meta(key, scratch_block, torch.device("cpu") if dry else k_cache.device)
    return decode(q, k_cache, v_cache, meta, scale)


def covering_keys(run_attention: Callable[[GraphKey], object],
                  keys: Sequence[GraphKey]) -> list[GraphKey]:
    """Keys, in their given order, such that every Triton specialisation any of `keys` launches
    is launched by one of them: a key is taken when its dry run meets one not seen before.
    `run_attention(key)` runs one bucket's attention (only its launches are noted)."""
    return [key for key, _ in new_specialisations(run_attention, keys)]


def covering_cache_path(cache_dir: Path | None, k_cache: torch.Tensor, num_heads: int,
                        keys: Sequence[GraphKey]) -> Path | None:
    """Where the covering buckets of `keys` are kept (start_cache.py): they depend on the GPU
    (the kernels' plans read its SM count), torch, Triton (what it specialises on), the
    kernels' source, the cache's dtype and layout, the heads and the buckets."""
    if cache_dir is None:
        return None
    import parrot_kernels

    parts = software(k_cache.device, parrot_kernels) + [
        str(k_cache.dtype), tuple(k_cache.shape[1:]), num_heads, [tuple(k) for k in keys]]
    return cache_dir / f"{cache_key(parts)}.json"


def cached_covering_keys(run_attention: Callable[[GraphKey], object],
                         keys: Sequence[GraphKey], path: Path | None
                         ) -> tuple[list[GraphKey], bool]:
    """(`covering_keys(run_attention, keys)`, whether it was read from `path`): a warm start
    skips the dry run over every bucket (1.5-2.4 s over ~2,000 buckets on an H200 host)."""
    return kept_covering(path, lambda: covering_keys(run_attention, keys))


def kept_covering(path: Path | None, find: Callable[[], list[GraphKey]]
                  ) -> tuple[list[GraphKey], bool]:
    """(the covering buckets kept at `path`, True), else (`find()`, False), kept there: the
    warm-up's file, read by it and written by it or by a precompile worker
    (`precompile_worker.keep_covering`)."""
    return kept(path, find, lambda found: json.dumps([list(k) for k in found]),
                _keys_from_json, "covering buckets")


def _keys_from_json(text: str) -> list[GraphKey]:
    keys = []
    for item in json.loads(text):
        if not (isinstance(item, list) and len(item) == 4
                and all(isinstance(v, int) for v in item)):
            raise ValueError(f"not a bucket: {item!r}")
        keys.append((item[0], item[1], item[2], item[3]))
    return keys


def new_specialisations(run: Callable[[K], object], keys: Sequence[K]
                        ) -> list[tuple[K, list[Specialisation]]]:
    """(key, the specialisations the dry run `run(key)` met first, in a fixed order) for each
    of `keys` that met one: every specialisation of the whole list exactly once."""
    return first_met(dry_runs(run, keys))


def dry_runs(run: Callable[[K], object], keys: Sequence[K]
             ) -> list[tuple[K, set[Specialisation]]]:
    """(key, the specialisations the dry run `run(key)` launches) for each of `keys`."""
    from parrot_kernels.launch import specialisations

    found = []
    for key in keys:
        with specialisations() as launched:
            run(key)
        found.append((key, launched))
    return found


def first_met(launches: Iterable[tuple[K, set[Specialisation]]]
              ) -> list[tuple[K, list[Specialisation]]]:
    """`new_specialisations` of dry runs already made: (key, those of its specialisations no
    earlier key launched, in a fixed order) for each key that has one."""
    found: list[tuple[K, list[Specialisation]]] = []
    seen: set[Specialisation] = set()
    for key, launched in launches:
        new = sorted(launched - seen, key=repr)
        if new:
            found.append((key, new))
            seen.update(new)
    return found


def prefill_variants(kernels: ModuleType | None) -> list[Any]:
    """The paged prefill kernel's tiles the warm-up's prefill runs (parrot_kernels.prefill
    PREFILL_TUNINGS), each once whole and once with its keys split in two ranges (the second
    empty on a one-block chunk): a short Fill after a long context launches the split variant,
    its own specialisation. [None]: one run on the plan's own choice (kernels without tunings)
    or through torch (`kernels` None)."""
    tunings = getattr(kernels, "PREFILL_TUNINGS", (None,))
    return [v for t in tunings for v in ((t,) if t is None else (t, replace(t, kv_splits=2)))]


def prefill_tiles(kernels: ModuleType) -> tuple[tuple[int | None, ...], ...]:
    """`prefill_variants` as a spec carries them: each PrefillTuning's fields."""
    return tuple(astuple(v) for v in prefill_variants(kernels) if v is not None)


def scratch_prefill_meta(kernels: ModuleType | None, variant: Any, block_size: int,
                         scratch_block: int, device: torch.device) -> AttentionMetadata:
    """Metadata of one prefill chunk of `block_size` tokens at position 0 into `scratch_block`
    (what is written goes there only), planned for the paged prefill kernel's tile `variant`
    (no plan with `kernels` None: through torch): what compiles a tile's kernels, in the
    warm-up's prefill and in the precompile workers (`precompile_worker.run_scratch_prefill`).
    The plan's tensors are always aligned (prefill.plan_prefill), so a tile is one
    specialisation whatever the chunk."""
    plan = None if kernels is None else kernels.plan_prefill(
        [(0, block_size, 0)], torch.tensor([[scratch_block]], dtype=torch.int32, device=device),
        variant)
    return AttentionMetadata(
        slot_mapping=torch.arange(scratch_block * block_size, (scratch_block + 1) * block_size,
                                  device=device),
        num_decode=0, decode_block_tables=None, decode_seq_lens=None, shared_prefix=None,
        prefills=[PrefillChunk(0, block_size, 0, torch.tensor([scratch_block], device=device))],
        prefill_plan=plan)


class WarmupCovering(NamedTuple):
    """The buckets whose covering the engine's warm-up looks up (warmup.compiled_keys of these
    limits, as the engine's sizing is predicted before its weights load) and the folder it
    keeps it in (warm_up's covering_cache)."""

    folder: str
    max_batch: int
    max_width: int
    max_rows: int
    min_prefix_blocks: int
    shared_prefix: bool
    defer_above: int | None

    def buckets(self) -> list[GraphKey]:
        return compiled_keys(self.max_batch, self.max_width, max_rows=self.max_rows,
                             shared_prefix=self.shared_prefix,
                             min_prefix_blocks=self.min_prefix_blocks,
                             defer_above=self.defer_above)


@dataclass(frozen=True)
class PrecompileSpec:
    """What a worker compiles for one model's heads on one GPU: the decode attention of
    `keys`, the small-batch linear's `linear` launches and the paged prefill's tiles."""

    device: str                 # "cuda:0" (or "cpu": the kernels interpreted, in tests)
    dtype: str                  # a torch dtype's name, e.g. "bfloat16"
    num_heads: int
    num_kv_heads: int
    head_dim: int
    block_size: int
    keys: tuple[GraphKey, ...]
    # (N, K, rows) of the small-batch linear launches the engine's linear choice times (the
    # model's projection shapes at each row bucket it measures); () for none
    linear: tuple[tuple[int, int, int], ...] = ()
    # the paged prefill kernel's tiles the warm-up's prefill runs (`prefill_tiles`: each a
    # PrefillTuning's fields); () where the model prefills through torch
    prefill: tuple[tuple[int | None, ...], ...] = ()
    # the warm-up's bucket list and folder: worker 0 keeps their covering there; None: not
    covering: WarmupCovering | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> PrecompileSpec:
        data = json.loads(text)
        covering = data.get("covering")
        return cls(**{**data, "keys": tuple(tuple(k) for k in data["keys"]),
                      "linear": tuple(tuple(t) for t in data.get("linear", ())),
                      "prefill": tuple(tuple(t) for t in data.get("prefill", ())),
                      "covering": None if covering is None else WarmupCovering(*covering)})

    def tasks(self) -> list[Task]:
        """What the workers run, each launching kernels: ("attention", *bucket),
        ("linear", N, K, rows) and ("prefill", i) (the tile `prefill[i]`)."""
        return ([("attention", *key) for key in self.keys]
                + [("linear", *launch) for launch in self.linear]
                + [("prefill", i) for i in range(len(self.prefill))])


@dataclass(frozen=True)
class PrecompileReport:
    workers: int
    keys: int                   # buckets the workers were given
    compiled: int               # specialisations the workers compiled (each by one)
    failed: int                 # workers that failed or timed out
    seconds: float              # from the workers' start to the last one's end
    # the slowest worker's seconds: starting (Python, torch, CUDA), its dry run, compiling
    slowest: tuple[float, float, float] = (0.0, 0.0, 0.0)
    early: bool = False         # started from the config before the engine's imports

    def describe(self) -> str:
        start, dry, compiling = self.slowest
        return (f"{self.workers} workers"
                + (" (started before the engine's imports)" if self.early else "")
                + f" compiled the {self.compiled} kernels of {self.keys} "
                f"attention buckets, the small-batch linear and the paged prefill in "
                f"{self.seconds:.1f} s (the "
                f"slowest: {start:.1f} s starting, {dry:.1f} s dry run, {compiling:.1f} s "
                "compiling)"
                + (f" ({self.failed} failed: the warm-up compiles the rest)"
                   if self.failed else ""))


def linear_launches(shape: ModelShape, buckets: Sequence[int], max_rows: int
                    ) -> list[tuple[int, int, int]]:
    """(N, K, rows) of every small-batch linear launch the linear choice times
    (linear_choice.measure_linear_choice: each projection shape at each row bucket up to the
    kernels' MAX_GEMV_ROWS)."""
    rows = sorted(b for b in set(buckets) if b <= max_rows)
    return [(n, k, r) for n, k in shape.projection_shapes() for r in rows]


def triton_cache_dir() -> Path:
    """Where Triton keeps compiled kernels (TRITON_CACHE_DIR, else its default)."""
    try:
        from triton import knobs
        return Path(knobs.cache.dir)
    except (ImportError, AttributeError):   # an older Triton: its default, found as 3.x does
        return triton_cache_guess()


def stamp_path(spec: PrecompileSpec) -> Path:
    """The file saying every kernel `spec` compiles is in Triton's cache."""
    import parrot_kernels

    parts = [spec.to_json()] + software(torch.device(spec.device), parrot_kernels)
    return triton_cache_dir() / "parrot-precompiled" / cache_key(parts)


class AttentionPrecompile:
    """Worker processes compiling `spec`'s covering buckets, `workers` shares of them; the
    stamp written when all of them succeed. `procs`: workers started already, each computing
    `spec` itself (early_precompile.py), adopted instead of starting new ones; `started`:
    their time.perf_counter() start."""

    def __init__(self, spec: PrecompileSpec, workers: int, stamp: Path | None = None, *,
                 procs: list[subprocess.Popen[str]] | None = None,
                 started: float | None = None) -> None:
        self.spec, self.stamp = spec, stamp
        self.adopted = procs is not None
        self.started = time.perf_counter() if started is None else started
        self.procs = procs if procs is not None else [
            spawn_worker(worker_command(i, workers, spec.to_json())) for i in range(workers)]

    def wait(self, timeout_s: float = WORKER_TIMEOUT_S) -> PrecompileReport:
        deadline = self.started + timeout_s
        compiled = failed = 0
        slowest = (0.0, 0.0, 0.0)
        for i, proc in enumerate(self.procs):
            try:
                out, err = proc.communicate(timeout=max(0.0, deadline - time.perf_counter()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                log.warning("attention precompile worker %d timed out after %.0f s", i,
                            timeout_s)
                failed += 1
                continue
            if proc.returncode != 0:
                log.warning("attention precompile worker %d failed (exit %d): %s", i,
                            proc.returncode, err.strip()[-2000:])
                failed += 1
                continue
            done = json.loads(out.strip().splitlines()[-1])
            compiled += int(done["compiled"])
            times = (float(done["start_s"]), float(done.get("dry_s", 0.0)),
                     float(done.get("compile_s", 0.0)))
            slowest = max(slowest, times, key=sum)
        if not failed and self.stamp is not None:
            try:
                self.stamp.parent.mkdir(parents=True, exist_ok=True)
                self.stamp.write_text(f"{compiled} kernels of {len(self.spec.keys)} buckets\n")
            except OSError as exc:
                log.warning("could not write the precompile stamp %s: %s", self.stamp, exc)
        return PrecompileReport(len(self.procs), len(self.spec.keys), compiled, failed,
                                time.perf_counter() - self.started, slowest, self.adopted)
