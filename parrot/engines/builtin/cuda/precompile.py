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
* `AttentionPrecompile`: worker processes (`python -m parrot.engines.builtin.cuda.precompile`),
  each compiling its share of the specialisations (each one by exactly one worker: the
  bucket that first met it runs with only that launch made,
  `parrot_kernels.launch.launching_only`) into Triton's disk cache while the
  engine loads its weights. The engine joins them before it sizes its KV cache from the free
  memory (each worker's CUDA context holds some), then its own warm-up finds the kernels on
  disk. An optimisation only: a worker that fails or times out is logged, and the warm-up
  compiles what is missing itself. When every worker succeeded, a stamp in Triton's cache
  directory (`stamp_path`: the spec, torch, Triton and the kernels' source) says so, and
  later starts with the same stamp start no workers (a warm start would pay their start for
  nothing); clearing Triton's cache clears the stamp with it.

The workers also compile the small-batch linear kernels the engine's linear choice times
(`PrecompileSpec.linear`: the model's projection shapes at each row bucket up to the kernels'
`MAX_GEMV_ROWS`; 5.0 s of the same cold start, one specialisation after another), dealt with
the attention's specialisations the same way.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TypeVar

import torch

from parrot.engines.builtin.cuda.graphs import GraphKey
from parrot.engines.builtin.llama.attention import AttentionMetadata, DecodeFn, SharedPrefixMeta
from parrot.engines.builtin.llama.shapes import ModelShape
from parrot.engines.builtin.start_cache import cache_key, kept, software

log = logging.getLogger(__name__)

K = TypeVar("K")

# Workers at most: each compiles on one CPU core (Triton's compiler is single-threaded), and
# the engine's own process keeps one.
MAX_WORKERS = 8
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
    return kept(path, lambda: covering_keys(run_attention, keys),
                lambda found: json.dumps([list(k) for k in found]), _keys_from_json,
                "covering buckets")


def _keys_from_json(text: str) -> list[GraphKey]:
    keys = []
    for item in json.loads(text):
        if not (isinstance(item, list) and len(item) == 4
                and all(isinstance(v, int) for v in item)):
            raise ValueError(f"not a bucket: {item!r}")
        keys.append((item[0], item[1], item[2], item[3]))
    return keys


def new_specialisations(run: Callable[[K], object], keys: Sequence[K]
                        ) -> list[tuple[K, list[tuple[object, ...]]]]:
    """(key, the specialisations the dry run `run(key)` met first, in a fixed order) for each
    of `keys` that met one: every specialisation of the whole list exactly once."""
    from parrot_kernels.launch import specialisations

    found: list[tuple[K, list[tuple[object, ...]]]] = []
    seen: set[tuple[object, ...]] = set()
    for key in keys:
        with specialisations() as launched:
            run(key)
        new = sorted(launched - seen, key=repr)
        if new:
            found.append((key, new))
            seen.update(new)
    return found


@dataclass(frozen=True)
class PrecompileSpec:
    """What a worker compiles: the attention of `keys` for one model's heads on one GPU."""

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

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> PrecompileSpec:
        data = json.loads(text)
        return cls(**{**data, "keys": tuple(tuple(k) for k in data["keys"]),
                      "linear": tuple(tuple(t) for t in data.get("linear", ()))})

    def tasks(self) -> list[tuple[int | str, ...]]:
        """What the workers run, each launching kernels: ("attention", *bucket) and
        ("linear", N, K, rows)."""
        return ([("attention", *key) for key in self.keys]
                + [("linear", *launch) for launch in self.linear])


@dataclass(frozen=True)
class PrecompileReport:
    workers: int
    keys: int                   # buckets the workers were given
    compiled: int               # specialisations the workers compiled (each by one)
    failed: int                 # workers that failed or timed out
    seconds: float              # from the workers' start to the last one's end
    # the slowest worker's seconds: starting (Python, torch, CUDA), its dry run, compiling
    slowest: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def describe(self) -> str:
        start, dry, compiling = self.slowest
        return (f"{self.workers} workers compiled the {self.compiled} kernels of {self.keys} "
                f"attention buckets and the small-batch linear in {self.seconds:.1f} s (the "
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
    except (ImportError, AttributeError):
        return Path(os.environ.get("TRITON_CACHE_DIR") or Path.home() / ".triton" / "cache")


def stamp_path(spec: PrecompileSpec) -> Path:
    """The file saying every kernel `spec` compiles is in Triton's cache."""
    import parrot_kernels

    parts = [spec.to_json()] + software(torch.device(spec.device), parrot_kernels)
    return triton_cache_dir() / "parrot-precompiled" / cache_key(parts)


class AttentionPrecompile:
    """Worker processes compiling `spec`'s covering buckets, `workers` shares of them; the
    stamp written when all of them succeed."""

    def __init__(self, spec: PrecompileSpec, workers: int, stamp: Path | None = None) -> None:
        self.spec, self.stamp = spec, stamp
        self.started = time.perf_counter()
        self.procs = [subprocess.Popen(
            [sys.executable, "-m", __name__, str(i), str(workers), spec.to_json(),
             repr(time.time())],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True) for i in range(workers)]

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
            times = (float(done["start_s"]), float(done["dry_s"]), float(done["compile_s"]))
            slowest = max(slowest, times, key=sum)
        if not failed and self.stamp is not None:
            try:
                self.stamp.parent.mkdir(parents=True, exist_ok=True)
                self.stamp.write_text(f"{compiled} kernels of {len(self.spec.keys)} buckets\n")
            except OSError as exc:
                log.warning("could not write the precompile stamp %s: %s", self.stamp, exc)
        return PrecompileReport(len(self.procs), len(self.spec.keys), compiled, failed,
                                time.perf_counter() - self.started, slowest)


def default_workers() -> int:
    return max(1, min(MAX_WORKERS, (os.cpu_count() or 2) - 1))


def compile_share(spec: PrecompileSpec, worker: int, workers: int,
                  times: dict[str, float] | None = None) -> int:
    """In a worker: compile every `workers`-th of the specialisations `spec.tasks()` launch,
    from `worker` on, into Triton's disk cache, on a KV cache of one block and zero weights
    (a kernel's specialisation depends on neither the cache's size nor the values).
    Returns how many it compiled; `times` gets the seconds of the dry run and of the
    compiling ("dry_s", "compile_s")."""
    import parrot_kernels
    from parrot.engines.builtin.llama.attention import make_decode_fn
    device = torch.device(spec.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dtype = getattr(torch, spec.dtype)
    cache = torch.zeros(2, 1, spec.block_size, spec.num_kv_heads, spec.head_dim, dtype=dtype,
                        device=device)
    decode = make_decode_fn(parrot_kernels)

    def run(task: tuple[int | str, ...], dry: bool = False) -> object:
        kind, *args = task
        if kind == "attention":
            key: GraphKey = (int(args[0]), int(args[1]), int(args[2]), int(args[3]))
            return run_padded_attention(decode, key, cache[0], cache[1], scratch_block=0,
                                        num_heads=spec.num_heads,
                                        scale=spec.head_dim ** -0.5, dry=dry)
        # zeros (garbage could hold NaNs the interpreter warns of), freed at once: a worker
        # holds one projection's weight at a time
        n, k, rows = (int(a) for a in args)
        return parrot_kernels.small_batch_linear(
            torch.zeros(rows, k, dtype=dtype, device=device),
            torch.zeros(n, k, dtype=dtype, device=device))

    started = time.perf_counter()
    # Every specialisation once, dealt round-robin over the workers: each compiles its own
    # (a bucket shares kernels with others; running whole buckets, several workers would
    # compile the shared ones at once), running the bucket that first met it with only
    # those launches made (parrot_kernels.launch.launching_only).
    from parrot_kernels.launch import launching_only

    found = new_specialisations(functools.partial(run, dry=True), spec.tasks())
    dealt = [(task, one) for task, specs in found for one in specs][worker::workers]
    mine: dict[tuple[int | str, ...], set[tuple[object, ...]]] = {}
    for task, one in dealt:
        mine.setdefault(task, set()).add(one)
    covered = time.perf_counter()
    for task, specs in mine.items():
        with launching_only(specs):
            run(task)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    if times is not None:
        times.update(dry_s=covered - started, compile_s=time.perf_counter() - covered)
    return len(dealt)


def main() -> int:
    """A worker: `python -m parrot.engines.builtin.cuda.precompile WORKER WORKERS SPEC
    SPAWNED` (SPAWNED: the parent's time.time() when it started it); prints one JSON line."""
    worker, workers = int(sys.argv[1]), int(sys.argv[2])
    spec = PrecompileSpec.from_json(sys.argv[3])
    times: dict[str, float] = {}
    start_s = time.time() - float(sys.argv[4])
    compiled = compile_share(spec, worker, workers, times)
    print(json.dumps({"compiled": compiled, "start_s": start_s, **times}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
