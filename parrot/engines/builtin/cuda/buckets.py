"""The decode buckets: the bucket a step's batch and table widths map to (`batch_bucket`,
`width_bucket`; graphs.py keys its graphs by them, and the eager kernel path pads to them),
and the buckets a CUDA engine's start-up works over: every (batch, group count, prefix width,
suffix width) a step can map to, which of them are captured as graphs, which only compiled,
which deferred to idle time. Plain arithmetic and lists of keys (no torch work): the warm-up
(warmup.py) runs them, and the precompile workers (precompile.py) predict the same lists
before the engine is sized.
"""

from __future__ import annotations

from parrot.engines.builtin.sizing import batch_buckets, pow2_buckets

# (batch bucket, group bucket (0: paged), prefix table width (0: paged), table width)
GraphKey = tuple[int, int, int, int]

# A shared-prefix step whose own bucket is not captured replays a captured bucket up to this
# many times its batch, group count and table widths instead of stalling the engine to capture
# its own (~40 ms, several decode steps): their combinations are too many to capture at
# start-up, and a live gpts run on two engines captured 41 while serving (1.7 s of a 20-s
# run). The wider bucket pads the same way (padding rows on the scratch block, empty groups,
# table entries past a row's length never read); its launch plan is a larger problem's, so the
# step reads the same KV in a few more, partly idle programs, and its GEMMs (weight-bound at
# decode batches) take a few more rows. A bucket of the step's own batch is preferred.
WIDER_BUCKET_FACTOR = 2


def next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def batch_bucket(n: int, max_batch: int) -> int | None:
    """The graph batch size for n decode rows, or None when n is over the largest bucket."""
    return None if n > max_batch else min(next_pow2(n), max_batch)


def width_bucket(width: int, max_width: int | None) -> int:
    """Block-table width (blocks) the kernel path pads `width` to."""
    padded = next_pow2(max(1, width))
    return padded if max_width is None else max(width, min(padded, max_width))


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


def compiled_keys(max_batch: int, max_width: int, *, max_rows: int, shared_prefix: bool,
                  min_prefix_blocks: int, defer_above: int | None) -> list[GraphKey]:
    """The buckets whose decode attention `warm_up` compiles without capturing them, in its
    order: the deferred ones (`deferred_keys`), the paged ones past the graphs' `max_batch`
    (eager steps of up to `max_rows` rows) and the shared-prefix ones. Their covering buckets
    are what it compiles; a precompile worker finds them for it
    (`precompile_worker.keep_covering`)."""
    stopgaps = stopgap_keys(max_batch, max_width, min_prefix_blocks) if shared_prefix else []
    eager_only = deferred_keys(max_batch, max_width, defer_above, stopgaps) + [
        k for k in paged_keys(max_rows, max_width) if k[0] > max_batch]
    shared = shared_keys(max_rows, max_width, min_prefix_blocks) if shared_prefix else []
    return list(dict.fromkeys(eager_only + shared))     # deferred stopgaps in both
