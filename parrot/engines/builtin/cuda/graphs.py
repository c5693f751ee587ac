"""CUDA graphs for decode-only steps (gpt-fast / vLLM style).

A decode step of a 7B model is ~15 kernels per layer; launched eagerly from Python it costs
~30 ms on an H200 whatever the batch, 10x the weight-read floor. Here the forward pass of a
decode-only step is captured once per bucket and replayed:

* buckets: batch B -> the next power of two (capped at `max_batch`); block-table widths -> the
  next power of two (capped at the context's block count); for shared-prefix steps also the
  group count G -> the next power of two (at most the batch bucket). The kernels' launch plan
  reads only these shapes (parrot_kernels/plan.py), so it is fixed per bucket. The eager kernel path
  pads its tables to the same width buckets (runner.py), so an unpadded batch gets the same
  plan, and bitwise the same result, in a graph and eagerly.
* static buffers, allocated once for the largest bucket: token ids, positions, slots, block
  tables, lengths, and the group metadata (indptr, prefix/suffix tables and lengths). A bucket's
  graph reads leading slices of them. A replay writes the step into their host mirror and
  copies it over in two copies (staging.py).
* padding rows (B < bucket): token 0 at position 0, writing its K/V into the KV cache's scratch
  block, attending that one slot; they join the last group of a shared-prefix step, and padding
  groups are empty. Table entries past a row's length are never read, so only the used columns
  are written.
* a graph holds the whole decode step after the input copy: the forward pass, the LM head
  (float32 logits) and the greedy argmax, so a greedy step reads back only its B token ids
  (one device-to-host copy per step, no per-row sync); sampled rows draw from the logits.
* graphs are captured into one memory pool shared by all buckets (they replay one at a time):
  at start-up every paged bucket (`capture_all`, warmup.py), else on a bucket's first step
  (an eager warm-up first, so Triton compiles outside the capture) — except a shared-prefix
  step for which a captured bucket at most `WIDER_BUCKET_FACTOR` times wider exists: it
  replays that one; failing that, for its first `STOPGAP_STEPS` steps, a captured bucket of
  any larger batch and group count (the warm-up captures a few at the largest batch up to
  64 rows, warmup.py `stopgap_keys`), so a shape that lasts a step or two never stalls the
  engine.

`capture=False` runs the same buffers and padding without capturing (the CPU tests).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from parrot.engines.builtin.llama.attention import AttentionMetadata, SharedPrefixMeta
from parrot.engines.builtin.llama.cascade import GroupedRows
from parrot.engines.builtin.cuda.buckets import (WIDER_BUCKET_FACTOR, GraphKey, batch_bucket,
                                                next_pow2, width_bucket)
from parrot.engines.builtin.cuda.graph_capture import GraphBuckets, capture_graph
from parrot.engines.builtin.kv_cache import KVCache
from parrot.engines.builtin.llama.model import LlamaModel
from parrot.engines.builtin.cuda.staging import StaticInputs

log = logging.getLogger(__name__)

# A shared-prefix step with no such bucket replays a "stopgap": a captured bucket of any larger
# batch and group count (tables still at most WIDER_BUCKET_FACTOR wider), for its bucket's
# first STOPGAP_STEPS steps; then its own is captured. Most such shapes last a step or two
# (reviewers whose Fills land a step apart, live multi_agent: 3 captures, 112 ms, in a 9.7-s
# run), and a capture stalls the engine ~30-40 ms. A stopgap step is slower than its own:
# measured live on an H200 (LLaMA-7B, 16 rows sharing 3.4k tokens replayed at 64 rows), 5.4
# against 4.05 ms. So a shape that lasts has paid about one capture after ~24 stopgap steps
# and gets its own then (ski rental: never more than twice the cost of knowing the future).
STOPGAP_STEPS = 24


@dataclass(frozen=True)
class DecodeRows:
    """A decode-only step as host lists, one entry per row in batch order."""

    token_ids: list[int]
    positions: list[int]
    slots: list[int]
    tables: list[list[int]]             # blocks covering each row's seq_len
    seq_lens: list[int]                 # the new token included
    groups: GroupedRows | None          # rows grouped for the shared-prefix kernel


def graph_key(rows: DecodeRows, max_batch: int, max_width: int) -> GraphKey | None:
    """The bucket of a step, or None when it cannot run in a graph."""
    bb = batch_bucket(len(rows.token_ids), max_batch)
    if bb is None:
        return None
    g = rows.groups
    if g is None:
        width = max(len(t) for t in rows.tables)
        return None if width > max_width else (bb, 0, 0, width_bucket(width, max_width))
    num_groups = len(g.prefix_lens)
    pwidth = max(len(t) for t in g.prefix_tables)
    swidth = max(len(t) for t in g.suffix_tables)
    if num_groups > bb or max(pwidth, swidth) > max_width:
        return None
    return (bb, min(next_pow2(num_groups), bb), width_bucket(pwidth, max_width),
            width_bucket(swidth, max_width))


def predicted_rows_index(predicted: DecodeRows, real: DecodeRows) -> list[int] | None:
    """Which rows of the predicted step the real step is, in order, or None when it is not
    the prediction: the real step may leave out rows that finished (EOS, a stop token or a
    stop string: known only once the token is read) but every row it has must be a predicted
    row, field by field. Shared-prefix steps must match exactly (their groups are planned
    over all rows)."""
    n = len(predicted.token_ids)
    if predicted == real:
        return list(range(n))
    if predicted.groups is not None or real.groups is not None:
        return None
    index, j = [], 0
    for i, slot in enumerate(real.slots):
        while j < n and predicted.slots[j] != slot:   # a slot is one row's next position
            j += 1
        if j == n or (predicted.token_ids[j], predicted.positions[j], predicted.seq_lens[j],
                      predicted.tables[j]) != (real.token_ids[i], real.positions[i],
                                               real.seq_lens[i], real.tables[i]):
            return None
        index.append(j)
        j += 1
    return index


@dataclass(frozen=True)
class StepOutput:
    """A decode step's results for its rows: float32 logits [n, V], greedy token ids [n]."""

    logits: torch.Tensor
    greedy: torch.Tensor


@dataclass
class _Graph:
    step: Callable[[], StepOutput]        # the eager step over the static buffers
    graph: torch.cuda.CUDAGraph | None = None
    output: StepOutput | None = None      # the graph's outputs [bucket, ...]

    def replay(self) -> StepOutput:
        if self.graph is None:
            return self.step()
        self.graph.replay()
        assert self.output is not None
        return self.output


class DecodeGraphs(GraphBuckets[GraphKey, _Graph]):
    """Static decode buffers and one graph per bucket, captured on first use."""

    kind = "decode graph"

    def __init__(self, model: LlamaModel, kv_cache: KVCache, *, max_batch: int, max_width: int,
                 capture: bool = True) -> None:
        if kv_cache.scratch_block is None:
            raise ValueError("CUDA graphs need a KV cache with a scratch block")
        super().__init__()
        self.model, self.kv = model, kv_cache
        self.max_batch, self.max_width = max_batch, max_width
        self.capture_graphs = capture
        self.scratch_block = kv_cache.scratch_block
        self.num_replays = 0
        self._pool = torch.cuda.graph_pool_handle() if capture else None
        self.num_ahead_hits = 0
        self.num_ahead_misses = 0       # launched ahead, then a different step came
        self.num_ahead_fed = 0          # of the launches ahead, queued before the tokens were read
        self.num_ahead_partial_hits = 0  # of the hits, steps that left out finished rows
        self.num_wider_replays = 0      # shared-prefix steps replayed on a wider bucket
        # (own bucket, stopgap?) -> the captured bucket it replays; cleared on every capture
        self._wider: dict[tuple[GraphKey, bool], GraphKey | None] = {}
        self._stopgap_steps: dict[GraphKey, int] = {}     # steps each own bucket replayed one
        self.num_stopgap_replays = 0    # of the wider replays, those on a stopgap
        self._ahead: tuple[DecodeRows, StepOutput] | None = None   # launched, not yet used
        # buckets the warm-up left to capture while the engine is idle (`capture_deferred`):
        # batches too rare to delay the start-up for; a step that needs one first captures it
        self.deferred: list[GraphKey] = []
        self.idle_captures = 0
        self.inputs = StaticInputs(max_batch, max_width, model.device)
        views = self.inputs.views
        self.input_ids, self.positions, self.slots = (views["input_ids"], views["positions"],
                                                      views["slots"])
        self.tables = views["tables"]    # paged tables, or the suffix tables of a grouped step
        self.seq_lens = views["seq_lens"]  # paged lengths, or the suffix lengths
        self.indptr = views["indptr"]
        self.prefix_tables, self.prefix_lens = views["prefix_tables"], views["prefix_lens"]
        # a fed launch-ahead reads a step's greedy tokens back through here while the next
        # step runs (a blocking read would wait for that step too)
        on_cuda = model.device.type == "cuda"
        self._host_tokens = torch.zeros(max_batch, dtype=torch.int64, pin_memory=on_cuda)
        self._tokens_read = torch.cuda.Event() if on_cuda else None

    @property
    def num_graphs(self) -> int:
        return len(self._graphs)

    def run(self, rows: DecodeRows) -> StepOutput | None:
        """Logits and greedy tokens of the step's n rows, or None: run it eagerly."""
        ahead, self._ahead = self._ahead, None
        n = len(rows.token_ids)
        index = None if ahead is None else predicted_rows_index(ahead[0], rows)
        if ahead is not None and index is not None:   # launched ahead (lookahead.py)
            self.num_replays += 1
            self.num_ahead_hits += 1
            logits, greedy = ahead[1].logits, ahead[1].greedy
            if index == list(range(n)):
                return StepOutput(logits[:n], greedy[:n])
            self.num_ahead_partial_hits += 1
            rows_used = torch.tensor(index, device=greedy.device)   # finished rows left out
            return StepOutput(logits.index_select(0, rows_used), greedy.index_select(0, rows_used))
        self.num_ahead_misses += ahead is not None
        own = graph_key(rows, self.max_batch, self.max_width)
        key = self._bucket(own)
        if key is None:
            return None
        self.fill(rows, key)
        graph = self._graphs.get(key) or self.capture_at_runtime(key)
        if graph is None:
            return None
        self.num_replays += 1
        self.num_wider_replays += key != own
        self._count_stopgap(own, key)
        out = graph.replay()
        return StepOutput(out.logits[:n], out.greedy[:n])

    def launch_ahead(self, rows: DecodeRows) -> None:
        """Start `rows` (a predicted next step) on the GPU without waiting; `run` uses it only
        for an identical step. Only buckets already captured (never a capture here)."""
        if (captured := self._captured(rows)) is not None:
            key, graph = captured
            self.fill(rows, key)
            self._ahead = (rows, graph.replay())

    def _captured(self, rows: DecodeRows) -> tuple[GraphKey, _Graph] | None:
        """The bucket `rows` run in and its graph when it is captured (launch-ahead never
        captures: a capture stalls, and the prediction may be wrong)."""
        own = graph_key(rows, self.max_batch, self.max_width)
        key = self._bucket(own)
        graph = None if key is None else self._graphs.get(key)
        if key is None or graph is None:
            return None
        self._count_stopgap(own, key)       # the caller replays it
        return key, graph

    def _count_stopgap(self, own: GraphKey | None, key: GraphKey) -> None:
        """A step of bucket `own` replays `key`: count it when `key` is own's stopgap (steps
        launched ahead count too, or a lasting shape would never get its own graph)."""
        if own is not None and key != own and key == self._wider.get((own, True)):
            self._stopgap_steps[own] = self._stopgap_steps.get(own, 0) + 1
            self.num_stopgap_replays += 1

    def _bucket(self, key: GraphKey | None) -> GraphKey | None:
        """The bucket a step of bucket `key` runs in (None: eagerly): its own, or for a
        shared-prefix step whose own is not captured a captured wider one
        (`WIDER_BUCKET_FACTOR`), else for its first `STOPGAP_STEPS` steps a stopgap."""
        if key is None or key in self._failed:
            return None
        if not key[1] or key in self._graphs:
            return key
        near = self._cached_wider(key, stopgap=False)
        if near is not None:
            return near
        if self._stopgap_steps.get(key, 0) >= STOPGAP_STEPS:
            return key                  # it lasted: its own is captured (run)
        return self._cached_wider(key, stopgap=True) or key

    def _cached_wider(self, key: GraphKey, *, stopgap: bool) -> GraphKey | None:
        if (key, stopgap) not in self._wider:
            self._wider[key, stopgap] = self.narrowest_wider(key, stopgap=stopgap)
        return self._wider[key, stopgap]

    def narrowest_wider(self, key: GraphKey, *, stopgap: bool = False) -> GraphKey | None:
        """The narrowest captured bucket that holds a step of bucket `key`: at most
        WIDER_BUCKET_FACTOR larger in every dimension, or for a stopgap in the tables only."""
        bb, gb, pw, sw = key
        f = WIDER_BUCKET_FACTOR
        fb = self.max_batch if stopgap else f     # a batch is at most max_batch
        fits = [k for k in self._graphs if bb <= k[0] <= fb * bb and gb <= k[1] <= fb * gb
                and pw <= k[2] <= f * pw and sw <= k[3] <= f * sw]
        if stopgap:     # fewest groups first: a bucket of about as many groups as rows reads
            # each row's prefix on its own (parrot_kernels/plan.py choose_shared_prefix_strategy)
            return min(fits, key=lambda k: (k[1], k[0], k[2] + k[3]), default=None)
        return min(fits, key=lambda k: (k[0], k[2] + k[3], k[1]), default=None)

    def launch_ahead_fed(self, rows: DecodeRows, source: StepOutput) -> list[int]:
        """Queue `rows` (the predicted next step) on the GPU right behind the step whose
        outputs are `source`, its token ids copied on the device from `source.greedy`
        (`rows.token_ids` is ignored), then read this step's greedy tokens back and return
        them while the predicted step runs. `run` uses the prediction, with the tokens read,
        for the same step or the same step less finished rows. `source` is not valid after
        this call (a replay of the same bucket overwrites it). Only captured buckets (the
        tokens are read back either way)."""
        n = len(source.greedy)
        host_tokens = self._host_tokens[:n]
        host_tokens.copy_(source.greedy, non_blocking=True)   # queued before the next replay
        if self._tokens_read is not None:
            self._tokens_read.record()
        outputs = None
        if (captured := self._captured(rows)) is not None:
            key, graph = captured
            self.fill(rows, key)
            self.input_ids[:n].copy_(source.greedy)            # after the upload it overwrites
            outputs = graph.replay()
            self.num_ahead_fed += 1
        if self._tokens_read is not None:
            self._tokens_read.synchronize()
        tokens = host_tokens.tolist()
        if outputs is not None:
            self._ahead = (replace(rows, token_ids=tokens), outputs)
        return tokens

    @property
    def has_ahead(self) -> bool:
        """A step launched ahead is waiting to be used (or dropped) by the next step."""
        return self._ahead is not None

    def drop_ahead(self) -> None:
        self.num_ahead_misses += self._ahead is not None
        self._ahead = None

    def capture_deferred(self) -> bool:
        """Capture the next deferred bucket not captured yet (over padding rows, as the warm-up
        does); whether any is left. Only while no step runs: a step launched ahead is dropped
        first (nothing runs, so nothing would use it) and the GPU synchronised, so the static
        buffers and their host mirrors are free."""
        while self.deferred and self.deferred[0] in self._graphs:
            self.deferred.pop(0)        # a step captured it first
        if not self.deferred:
            return False
        key = self.deferred.pop(0)
        self.drop_ahead()
        if self.model.device.type == "cuda":
            torch.cuda.synchronize(self.model.device)
        started = time.perf_counter()
        with torch.inference_mode():
            self.fill_padding(key)
            captured = self.capture(key) is not None
        self.idle_captures += captured
        log.info("%s bucket %s captured while idle in %.1f ms (%d left)", self.kind, key,
                 1000 * (time.perf_counter() - started), len(self.deferred))
        return bool(self.deferred)

    def capture(self, key: GraphKey) -> _Graph | None:
        graph = super().capture(key)
        if graph is not None:
            self._wider.clear()         # a step may now fit a bucket that did not exist
        return graph

    def release(self, key: GraphKey) -> None:
        super().release(key)
        self._wider.clear()             # a step may have replayed the released bucket

    def fill_padding(self, key: GraphKey) -> None:
        """Every row of the bucket a padding row (scratch slot, length 1; all in the last
        group): a harmless step to capture or compile a bucket with before any request."""
        gb = key[1]
        if not gb:
            self.fill(DecodeRows([], [], [], [], [], None), key)
            return
        self.fill(DecodeRows([], [], [], [], [], GroupedRows(
            indptr=[0] * (gb + 1), prefix_tables=[[]] * gb, prefix_lens=[0] * gb,
            suffix_tables=[], suffix_lens=[])), key)

    def fill(self, rows: DecodeRows, key: GraphKey) -> None:
        """Copy the step into the static buffers, padded to the bucket."""
        bb, gb = key[0], key[1]
        n = len(rows.token_ids)
        scratch = self.scratch_block
        h = self.inputs.host
        h["input_ids"][:n], h["input_ids"][n:bb] = rows.token_ids, 0
        h["positions"][:n], h["positions"][n:bb] = rows.positions, 0
        h["slots"][:n], h["slots"][n:bb] = rows.slots, scratch * self.kv.block_size
        g = rows.groups
        tables, lens = (rows.tables, rows.seq_lens) if g is None else (g.suffix_tables,
                                                                       g.suffix_lens)
        self.inputs.write_rows(h["tables"], tables)
        h["tables"][n:bb, 0] = scratch
        h["seq_lens"][:n], h["seq_lens"][n:bb] = lens, 1
        if g is not None:
            num_groups = len(g.prefix_lens)
            h["indptr"][:num_groups + 1] = g.indptr
            h["indptr"][num_groups + 1:gb + 1] = n
            h["indptr"][gb] = bb            # padding rows join the last group
            self.inputs.write_rows(h["prefix_tables"], g.prefix_tables)
            h["prefix_lens"][:num_groups], h["prefix_lens"][num_groups:gb] = g.prefix_lens, 0
        self.inputs.upload()

    def meta(self, key: GraphKey) -> AttentionMetadata:
        """The attention metadata of a bucket: views of the static buffers."""
        bb, gb, pwidth, width = key
        shared = None
        if gb:
            shared = SharedPrefixMeta(
                group_indptr=self.indptr[:gb + 1], prefix_block_tables=self.prefix_tables[
                    :gb, :pwidth], prefix_lens=self.prefix_lens[:gb],
                suffix_block_tables=self.tables[:bb, :width], suffix_lens=self.seq_lens[:bb])
        return AttentionMetadata(
            slot_mapping=self.slots[:bb], num_decode=bb,
            decode_block_tables=None if gb else self.tables[:bb, :width],
            decode_seq_lens=None if gb else self.seq_lens[:bb], shared_prefix=shared,
            prefills=[])

    def _capture(self, key: GraphKey) -> _Graph:
        bb = key[0]
        meta = self.meta(key)
        ids, positions = self.input_ids[:bb], self.positions[:bb]

        def step() -> StepOutput:
            hidden = self.model.forward(ids, positions, self.kv.layers, meta)   # [bb, H]
            logits = self.model.logits(hidden)                                 # [bb, V] fp32
            return StepOutput(logits, torch.argmax(logits, dim=-1))

        entry = _Graph(step)
        if not self.capture_graphs:
            return entry
        # The warm-up runs the step itself (the buffers hold it): it writes the same K/V the
        # replay writes again, and compiles the Triton kernels outside the capture.
        with torch.cuda.device(self.model.device):
            step()
            torch.cuda.synchronize()
            entry.graph, entry.output = capture_graph(step, self._pool)
        return entry
