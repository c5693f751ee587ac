"""Start-up warm-up on CUDA: nothing compiles or captures inside the first requests.

Before `build_engine` returns (so before an engine server answers /healthz), every paged
decode bucket (batch bucket x table-width bucket) is captured as a CUDA graph over padding
rows, largest first so the smaller ones reuse the shared pool's memory; the shared-prefix
attention runs once for every bucket a step can map to (batch, group count, prefix width,
suffix width), which compiles each Triton specialisation those buckets use (their graphs are
then captured on first use, a ~10-40 ms cost instead of seconds of JIT), and a few
shared-prefix buckets at the largest batch up to 64 rows are captured as stopgaps
(`stopgap_keys`: a step whose own bucket is not captured replays one of them instead of
stalling, graphs.py); one eager
prefill chunk initialises the prefill path (SDPA, the GEMM heuristics); and every token
bucket of the prefill graphs (prefill_graphs.py) is captured, largest first. Padding rows
write their K/V only into the KV cache's scratch block, so the cache is untouched.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from parrot.engines.builtin.cuda.precompile import (cached_covering_keys, covering_cache_path,
                                                     prefill_variants, run_padded_attention,
                                                     scratch_prefill_meta)
from parrot.engines.builtin.cuda.buckets import (compiled_keys,
                                                  deferred_keys, paged_keys, stopgap_keys)
from parrot.engines.builtin.cuda.buckets import GraphKey
from parrot.engines.builtin.cuda.graphs import DecodeGraphs
from parrot.engines.builtin.cuda.prefill_graphs import PrefillGraphs
from parrot.engines.builtin.observe.startup_clock import StartupClock

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WarmupReport:
    seconds: float
    graphs: int             # buckets captured
    failed: int             # buckets whose capture failed (they run eagerly)
    shared_shapes: int      # shared-prefix attention shapes compiled
    graph_seconds: float = 0.0
    shared_seconds: float = 0.0
    prefill_buckets: int = 0    # prefill-graph token buckets captured
    prefill_failed: int = 0
    prefill_seconds: float = 0.0
    stopgaps: int = 0           # of the decode graphs, shared-prefix stopgaps
    deferred: int = 0           # paged buckets left to capture while idle
    covering: int = 0           # of the shared_shapes, the buckets run (precompile.py)

    def describe(self) -> str:
        text = (f"warm-up {self.seconds:.1f} s: {self.graphs} decode graphs captured"
                f"{f' ({self.stopgaps} shared-prefix stopgaps)' if self.stopgaps else ''}"
                f"{f' ({self.failed} failed, eager)' if self.failed else ''}"
                f"{f', {self.deferred} deferred to idle time' if self.deferred else ''} "
                f"({self.graph_seconds:.1f} s), {self.shared_shapes} more attention shapes "
                f"compiled through {self.covering} covering buckets "
                f"({self.shared_seconds:.1f} s)")
        if self.prefill_buckets or self.prefill_failed:
            text += (f", {self.prefill_buckets} prefill-graph buckets captured"
                     f"{f' ({self.prefill_failed} failed, eager)' if self.prefill_failed else ''}"
                     f" ({self.prefill_seconds:.1f} s)")
        return text


def warm_up(graphs: DecodeGraphs, *, shared_prefix: bool, min_prefix_blocks: int,
            max_decode_rows: int | None = None,
            prefill_graphs: PrefillGraphs | None = None,
            clock: StartupClock | None = None,
            defer_above: int | None = None,
            covering_cache: Path | None = None) -> WarmupReport:
    """max_decode_rows: the most decode rows a step can have (the scheduler's max_num_seqs;
    None: the graphs' largest bucket). Eager steps pad their rows to the same buckets
    (runner.py), so their attention shapes are compiled here too, also past the graphs'.
    clock: the engine's start-up clock (its phases logged with progress); None: timed only.
    defer_above: paged buckets of more rows are left to `graphs.deferred` (captured while the
    engine is idle, or by the first step that needs one; `deferred_keys`); their attention is
    compiled here, so such a capture compiles nothing. None: every bucket now.
    covering_cache: a folder where the buckets covering the compile phase's specialisations
    are kept (found by a dry run over every bucket the first time; read by later starts)."""
    clock = clock or StartupClock("warm-up", quiet=True)
    started = time.perf_counter()
    all_stopgaps = (stopgap_keys(graphs.max_batch, graphs.max_width, min_prefix_blocks)
                    if shared_prefix else [])
    deferred = deferred_keys(graphs.max_batch, graphs.max_width, defer_above, all_stopgaps)
    later = set(deferred)
    stopgaps = [k for k in all_stopgaps if k not in later]
    keys = sorted(set(paged_keys(graphs.max_batch, graphs.max_width)) - later,
                  reverse=True) + stopgaps
    graphs.deferred = list(deferred)
    max_rows = max(graphs.max_batch, max_decode_rows or 0)
    failed = 0
    with torch.inference_mode():
        with clock.phase("capture", "capturing decode graphs", len(keys)) as progress:
            for key in keys:
                graphs.fill_padding(key)
                failed += graphs.capture(key) is None
                progress.step()
        captured = time.perf_counter()
        uncaptured = compiled_keys(graphs.max_batch, graphs.max_width, max_rows=max_rows,
                                   shared_prefix=shared_prefix,
                                   min_prefix_blocks=min_prefix_blocks, defer_above=defer_above)
        # Only the buckets that launch a specialisation no earlier one did (precompile.py):
        # the JIT's in-memory cache serves the others' launches. Kept by an earlier start, or
        # by this one's precompile worker 0 (its dry run met these buckets).
        with clock.phase("covering", f"finding the buckets covering {len(uncaptured)}"):
            covering, _ = cached_covering_keys(
                functools.partial(compile_attention, graphs, dry=True), uncaptured,
                covering_cache_path(covering_cache, graphs.kv.layers[0][0],
                                    graphs.model.shape.num_heads, uncaptured))
        with clock.phase("compile", f"compiling the decode attention of {len(covering)} "
                         f"buckets covering {len(uncaptured)}",
                         len(covering)) as progress:
            for key in covering:
                compile_attention(graphs, key)
                progress.step()
        compiled = time.perf_counter()
        with clock.phase("prefill", "running one prefill per prefill-kernel tile"):
            prefill(graphs)
        prefilled = time.perf_counter()
        prefill_failed = 0
        if prefill_graphs is not None:
            with clock.phase("prefill graphs", "capturing prefill graphs"):
                prefill_failed = prefill_graphs.capture_all()
        if graphs.model.device.type == "cuda":
            torch.cuda.synchronize(graphs.model.device)
    prefill_buckets = 0 if prefill_graphs is None else prefill_graphs.num_captured
    report = WarmupReport(time.perf_counter() - started, len(keys) - failed, failed,
                          len(uncaptured), captured - started,
                          compiled - captured, prefill_buckets, prefill_failed,
                          time.perf_counter() - prefilled, len(stopgaps), len(deferred),
                          len(covering))
    log.info("%s", report.describe())
    return report


def compile_attention(graphs: DecodeGraphs, key: GraphKey, dry: bool = False) -> None:
    """Run the decode attention of one bucket on layer 0 (reads only; compiles its kernels;
    `dry`: for a dry run, precompile.run_padded_attention)."""
    model = graphs.model
    k_cache, v_cache = graphs.kv.layers[0]
    run_padded_attention(model.decode, key, k_cache, v_cache, graphs.scratch_block,
                         num_heads=model.shape.num_heads, scale=model.scale, dry=dry)


def prefill(graphs: DecodeGraphs) -> None:
    """One eager prefill chunk of block_size tokens at position 0 into the scratch block;
    through the paged prefill kernel when the model runs it, once per tile the kernel's plan
    can choose, whole and split (precompile.prefill_variants: each its own specialisation,
    compiled ahead by the precompile workers on a cold start; this also runs the rest of the
    prefill path: the GEMMs' heuristics, the fused ops at a prefill's shapes)."""
    model, bs = graphs.model, graphs.kv.block_size
    dev = model.device
    kernels = model.prefill_kernels
    for variant in prefill_variants(kernels):
        meta = scratch_prefill_meta(kernels, variant, bs, graphs.scratch_block, dev)
        hidden = model.forward(torch.zeros(bs, dtype=torch.int64, device=dev),
                               torch.arange(bs, device=dev), graphs.kv.layers, meta)
        model.logits(hidden[-1:])
