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
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from parrot.engines.builtin.llama.attention import AttentionMetadata, PrefillChunk
from parrot.engines.builtin.cuda.precompile import (cached_covering_keys, covering_cache_path,
                                                     run_padded_attention)
from parrot.engines.builtin.cuda.graphs import WIDER_BUCKET_FACTOR, DecodeGraphs, GraphKey
from parrot.engines.builtin.cuda.prefill_graphs import PrefillGraphs
from parrot.engines.builtin.sizing import batch_buckets, pow2_buckets
from parrot.engines.builtin.observe.startup_clock import StartupClock

log = logging.getLogger(__name__)


def width_buckets(max_width: int) -> list[int]:
    """Every table width the kernel path pads to."""
    return pow2_buckets(max_width)


def paged_keys(max_batch: int, max_width: int) -> list[GraphKey]:
    return [(b, 0, 0, w) for b in batch_buckets(max_batch) for w in width_buckets(max_width)]


def prefix_widths(max_width: int, min_prefix_blocks: int) -> list[int]:
    """The prefix-table widths of shared-prefix buckets: at least the shortest prefix worth
    sharing."""
    return [w for w in width_buckets(max_width) if w >= min_prefix_blocks] or [max_width]


def shared_keys(max_batch: int, max_width: int, min_prefix_blocks: int) -> list[GraphKey]:
    """Buckets of shared-prefix steps: group counts up to the batch bucket, prefix widths of
    at least the shortest prefix worth sharing."""
    return [(b, g, p, s) for b in batch_buckets(max_batch) if b >= 2
            for g in batch_buckets(b) for p in prefix_widths(max_width, min_prefix_blocks)
            for s in width_buckets(max_width)]


# Group-count buckets of the stopgaps: one shared prefix (a system prompt, a team's history)
# and up to 8 in one batch (several apps on one engine); a step of more groups captures its own.
STOPGAP_GROUPS = (1, 8)
# The stopgaps' batch: the largest bucket up to 64 rows. A stopgap pads a step's rows to its
# batch, and the ski rental of graphs.py STOPGAP_STEPS was set by a 16-row step on a 64-row
# stopgap (5.4 against 4.05 ms on an H200). At 256 rows the GEMMs are compute-bound (~180 FLOP
# per weight byte there), so a small step replayed at 256 rows would cost more per step than
# the capture it saves; and 30 captures of 256-row graphs would lengthen every start-up. A
# shared-prefix step of more than 64 rows without its own bucket captures it (~40 ms, once).
STOPGAP_MAX_BATCH = 64


def covering_widths(widths: list[int], factor: int) -> list[int]:
    """Few of `widths` such that every width has a chosen one at least as wide and at most
    `factor` times as wide (for powers of two and factor 2: every other one)."""
    chosen: list[int] = []
    for w in widths:
        if not any(w <= c <= factor * w for c in chosen):
            chosen.append(max(c for c in widths if c <= factor * w))
    return chosen


def stopgap_keys(max_batch: int, max_width: int, min_prefix_blocks: int) -> list[GraphKey]:
    """Shared-prefix buckets at the largest batch up to STOPGAP_MAX_BATCH that every
    shared-prefix bucket of up to 8 groups and as many rows fits as a stopgap (graphs.py
    `STOPGAP_STEPS`): group counts 1 and 8, and prefix and suffix widths covering every width
    within WIDER_BUCKET_FACTOR."""
    max_batch = min(max_batch, STOPGAP_MAX_BATCH)
    if max_batch < 2:
        return []
    prefixes = covering_widths(prefix_widths(max_width, min_prefix_blocks), WIDER_BUCKET_FACTOR)
    suffixes = covering_widths(width_buckets(max_width), WIDER_BUCKET_FACTOR)
    return [(max_batch, g, p, s) for g in STOPGAP_GROUPS if g <= max_batch
            for p in prefixes for s in suffixes]


# With `lazy_graphs`, decode graphs of more than `eager_graph_rows` rows (config.py) are
# captured after start-up: the engine is usually idle for a while after it turns healthy (the
# manager registering it, clients connecting), which is when they are captured; a step that
# needs one first captures it itself.


def deferred_keys(max_batch: int, max_width: int, above: int | None,
                  stopgaps: list[GraphKey] | tuple[GraphKey, ...] = ()) -> list[GraphKey]:
    """The paged buckets of more than `above` rows, in the order they are captured later:
    fewer rows first (a load reaches 128 rows before 256), then narrower tables; then the
    `stopgaps` of more than `above` rows (until one is captured, a shared-prefix step
    without its own graph captures its own)."""
    if above is None:
        return []
    return (sorted(k for k in paged_keys(max_batch, max_width) if k[0] > above)
            + [k for k in stopgaps if k[0] > above])


def attention_keys(max_rows: int, graph_max_batch: int, max_width: int,
                   min_prefix_blocks: int, shared_prefix: bool) -> list[GraphKey]:
    """Every bucket whose decode attention a warm-up with these limits runs: captured, deferred
    or only compiled (what the precompile workers compile ahead of it, precompile.py)."""
    keys = paged_keys(max(max_rows, graph_max_batch), max_width)
    if shared_prefix:
        keys += stopgap_keys(graph_max_batch, max_width, min_prefix_blocks)
        keys += shared_keys(max(max_rows, graph_max_batch), max_width, min_prefix_blocks)
    return list(dict.fromkeys(keys))


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
        eager_only = deferred + [k for k in paged_keys(max_rows, graphs.max_width)
                                 if k[0] > graphs.max_batch]
        shared = (shared_keys(max_rows, graphs.max_width, min_prefix_blocks)
                  if shared_prefix else [])
        uncaptured = list(dict.fromkeys(eager_only + shared))   # deferred stopgaps in both
        # Only the buckets that launch a specialisation no earlier one did (precompile.py):
        # the JIT's in-memory cache serves the others' launches.
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
    can choose (its specialisations: the plan's tensors are always aligned)."""
    model, bs = graphs.model, graphs.kv.block_size
    dev = model.device
    scratch = graphs.scratch_block
    slots = torch.arange(scratch * bs, (scratch + 1) * bs, device=dev)
    kernels = model.prefill_kernels
    tunings = getattr(kernels, "PREFILL_TUNINGS", (None,))
    # each tile once whole and once with its keys split in two ranges (the second empty
    # here): a short Fill after a long context launches the split variant (prefill.py)
    variants = [v for t in tunings for v in ((t,) if t is None else (t, replace(t, kv_splits=2)))]
    plans = [None] if kernels is None else [
        kernels.plan_prefill([(0, bs, 0)], torch.tensor([[scratch]], dtype=torch.int32,
                                                          device=dev), variant)
        for variant in variants]
    for plan in plans:
        meta = AttentionMetadata(slot_mapping=slots, num_decode=0, decode_block_tables=None,
                                 decode_seq_lens=None, shared_prefix=None,
                                 prefills=[PrefillChunk(0, bs, 0,
                                                        torch.tensor([scratch], device=dev))],
                                 prefill_plan=plan)
        hidden = model.forward(torch.zeros(bs, dtype=torch.int64, device=dev),
                               torch.arange(bs, device=dev), graphs.kv.layers, meta)
        model.logits(hidden[-1:])
