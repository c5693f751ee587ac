"""The attention precompile's plan and the build's side of it: what the workers compile for a
config (`precompile_plan`, the same in the engine and in workers started from the config),
starting or adopting them (`start_attention_precompile`) and joining them
(`join_precompile`). precompile.py runs the workers; early_precompile.py starts them before
the engine's imports."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import NamedTuple

import torch

from parrot.engines.builtin.config import BuiltinEngineConfig
from parrot.engines.builtin.cuda.buckets import attention_keys
from parrot.engines.builtin.cuda.early_precompile import EarlyPrecompile, default_workers
from parrot.engines.builtin.cuda.precompile import (WORKER_BYTES, AttentionPrecompile,
                                                    PrecompileReport, PrecompileSpec,
                                                    WarmupCovering, linear_launches,
                                                    prefill_tiles, stamp_path,
                                                    workers_for_memory)
from parrot.engines.builtin.llama.attention import load_kernels
from parrot.engines.builtin.llama.loader import peek_shape, resolve_device, resolve_dtype
from parrot.engines.builtin.sizing import batch_buckets, context_limit, size_serving

log = logging.getLogger(__name__)


def wants_paged_prefill(config: BuiltinEngineConfig, device: torch.device) -> bool:
    """Whether the model prefills through the kernels' paged prefill wherever they have it:
    asked for, or by default on CUDA (load_bundle)."""
    choice = config.prefill_attention
    return choice == "paged" or (choice == "auto" and device.type == "cuda")


def covering_folder(config: BuiltinEngineConfig) -> Path:
    """Where the warm-up keeps its covering buckets (warmup.warm_up's covering_cache; the
    precompile's worker 0 writes them there on a cold start)."""
    return config.resolved_cache_dir() / "attention_covering"


# What precompile_plan sizes with: more memory than any GPU has, so an auto limit takes the
# largest value the engine's sizing can give it.
UNBOUNDED_BYTES = 1 << 62


class PrecompilePlan(NamedTuple):
    spec: PrecompileSpec         # what the workers compile
    stamp: Path                  # the file saying an earlier start compiled all of it
    weight_bytes: int            # the model's weights (what the workers must fit beside)


def precompile_plan(config: BuiltinEngineConfig) -> PrecompilePlan | None:
    """What the precompile workers compile, and its stamp, for an engine that will warm up on
    CUDA on the Triton kernels, bounded from the config alone (the sizing is not known before
    the weights are loaded: with auto limits, the largest they can take): the decode attention
    of every bucket the warm-up can run, the small-batch linear the linear choice times and
    the paged prefill's tiles; else None. The engine runs it, and so do workers started from
    the config (early_precompile.py): the same spec either way."""
    device = resolve_device(config.device)
    kernels = load_kernels()
    if (device.type != "cuda" or not torch.cuda.is_available() or not config.warmup
            or not config.cuda_graphs or config.attention_backend == "torch"
            or kernels is None):
        return None
    shape = peek_shape(config)
    if shape is None:
        return None
    bs = config.block_size
    dtype = resolve_dtype(config.dtype, device)
    # the engine's own sizing rule, with all the memory there could be (the weights are not
    # loaded yet): the limits it gives, or the largest an auto limit can take
    try:
        size = size_serving(config, shape, dtype_bytes=dtype.itemsize, on_cuda=True,
                            free_bytes=UNBOUNDED_BYTES)
    except ValueError:
        return None       # no KV block: the engine's own sizing says why
    seqs, graph_rows = size.max_num_seqs, size.graph_max_batch
    width = -(-min(context_limit(config, shape), size.kv_tokens) // bs)
    keys = attention_keys(seqs, graph_rows, width, config.shared_prefix_min_blocks,
                          shared_prefix=True)
    # what choose_linear_layers times (the model's small-batch linear: fused ops on CUDA)
    linear = linear_launches(shape, batch_buckets(graph_rows),
                             getattr(kernels, "MAX_GEMV_ROWS", 0)) \
        if config.fused_ops else []
    # what the warm-up's prefill runs when the model prefills through the kernel
    prefill = (prefill_tiles(kernels) if wants_paged_prefill(config, device)
               and hasattr(kernels, "paged_prefill_attention") else ())
    # the bucket list the warm-up finds the covering of, at the same limits (a KV cache
    # too small for the longest context, or an auto max_num_seqs below the largest, makes
    # it another list: that start finds no file and finds the covering itself)
    covering = WarmupCovering(
        str(covering_folder(config)), max_batch=graph_rows, max_width=width,
        max_rows=seqs, min_prefix_blocks=config.shared_prefix_min_blocks,
        shared_prefix=True,
        defer_above=config.eager_graph_rows if config.lazy_graphs else None)
    spec = PrecompileSpec(
        device=f"cuda:{torch.cuda.current_device() if device.index is None else device.index}",
        dtype=str(dtype).removeprefix("torch."),
        num_heads=shape.num_heads, num_kv_heads=shape.num_kv_heads,
        head_dim=shape.head_dim, block_size=bs, keys=tuple(keys), linear=tuple(linear),
        prefill=prefill, covering=covering)
    return PrecompilePlan(spec, stamp_path(spec), shape.num_parameters() * dtype.itemsize)


def start_attention_precompile(config: BuiltinEngineConfig, *, workers: int | None = None,
                               early: EarlyPrecompile | None = None
                               ) -> AttentionPrecompile | None:
    """Workers compiling `precompile_plan`'s spec while the engine loads its weights, as many
    as the GPU's memory holds beside the weights, unless its stamp says an earlier start
    compiled it all; else None. `early`: workers started from the config before the engine's
    imports (early_precompile.py), adopted here instead of starting others (trimmed to what
    the memory holds; stopped, whatever happens, when none is adopted). Never fails the
    start: any error is logged and it returns None."""
    try:
        started = _start_workers(config, workers, early)
    except Exception:  # noqa: BLE001 - an optimisation never stops the engine
        log.exception("starting the attention precompile workers failed; the warm-up "
                      "compiles alone")
        started = None
    if early is not None and started is None:
        early.stop()
    return started


def _start_workers(config: BuiltinEngineConfig, workers: int | None,
                   early: EarlyPrecompile | None) -> AttentionPrecompile | None:
    plan = precompile_plan(config)
    if plan is None:
        return None
    spec, stamp = plan.spec, plan.stamp
    if stamp.is_file():
        log.info("attention kernels precompiled before (%s): no precompile workers", stamp)
        if early is not None:
            early.mark()
        return None
    free, _total = torch.cuda.mem_get_info(torch.device(spec.device))
    itemsize = getattr(torch, spec.dtype).itemsize
    largest_linear = max((n * k * itemsize for n, k, _ in spec.linear), default=0)
    wanted = len(early.procs) if early is not None else workers or default_workers()
    # early workers' CUDA contexts may already hold some of `free`: count them back in
    held = 0 if early is None else sum(p.poll() is None for p in early.procs) * WORKER_BYTES
    count = workers_for_memory(wanted, free + held, plan.weight_bytes, largest_linear)
    if count == 0:
        log.info("no attention precompile workers: %.1f GiB free, the weights take %.1f",
                 free / 2 ** 30, plan.weight_bytes / 2 ** 30)
        return None
    if early is None:
        return AttentionPrecompile(spec, count, stamp)
    early.keep(count)
    # a trimmed set leaves the stopped workers' shares to the warm-up: no stamp
    return AttentionPrecompile(spec, count, stamp if count == wanted else None,
                               procs=early.procs, started=early.started)


def join_precompile(precompile: AttentionPrecompile, early: EarlyPrecompile | None
                    ) -> PrecompileReport:
    """Wait for the precompile workers; when they were started early and compiled all of the
    spec (its stamp written), mark the config so the next start starts none before its
    imports."""
    report = precompile.wait()
    if early is not None and precompile.stamp is not None and not report.failed:
        early.mark()
    return report
