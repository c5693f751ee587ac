"""ModelRunner: one scheduled Batch -> input tensors -> forward pass -> sampled tokens.

A decode-only step runs in a CUDA graph when the engine has them (graphs.py); every other
step of up to `prefill_graph_max_tokens` rows (prefill chunks, mixed steps, decode batches over
the largest decode bucket) runs its layers as piecewise graphs between eager attention calls
(prefill_graphs.py); larger steps, and everything on the CPU, run eagerly.

`step` is the blocking call the engine makes through `asyncio.to_thread`; it reads only the
Batch (snapshots taken on the loop) and the sampling state of the works in it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch

from parrot.engines.builtin.llama.attention import AttentionMetadata, PrefillChunk, SharedPrefixMeta
from parrot.engines.builtin.llama.cascade import (GroupedRows, pad_groups, plan_shared_prefix,
                                                  split_groups)
from parrot.engines.builtin.cuda.buckets import batch_bucket, next_pow2, width_bucket
from parrot.engines.builtin.cuda.graphs import DecodeGraphs, DecodeRows, StepOutput
from parrot.engines.builtin.kv_cache import KVCache
from parrot.engines.builtin.cuda.lookahead import ends_regardless, finishes, next_rows
from parrot.engines.builtin.llama.model import LlamaModel
from parrot.engines.builtin.cuda.prefill_graphs import PrefillGraphs
from parrot.engines.builtin.sampler import sample, sample_on_device
from parrot.engines.builtin.batch_scheduler import Batch, ScheduledChunk
from parrot.engines.builtin.cuda.staging import StaticInputs, upload_packed

log = logging.getLogger(__name__)


@dataclass
class HostInputs:
    """One step as host lists; rows: the decodes (grouped when sharing a prefix), then the
    prefill chunks."""

    token_ids: list[int]
    positions: list[int]
    slots: list[int]
    decode_tables: list[list[int]]   # blocks covering each decode row's seq_len
    decode_lens: list[int]
    groups: GroupedRows | None
    prefills: list[tuple[int, int, int, list[int]]]  # row_start, row_end, pos_start, blocks
    order: list[int]                 # batch.chunks index of each chunk, in row order
    sample_rows: list[int]           # row of the last token of each sampling chunk
    sample_chunks: list[int]         # batch.chunks index of each sampling chunk


@dataclass
class StepInputs:
    input_ids: torch.Tensor          # [T] int64
    positions: torch.Tensor          # [T] int64
    meta: AttentionMetadata
    order: list[int]                 # batch.chunks index of each chunk, in row order
    sample_rows: list[int]           # row of the last token of each sampling chunk
    sample_chunks: list[int]         # batch.chunks index of each sampling chunk


class ModelRunner:
    def __init__(self, model: LlamaModel, kv_cache: KVCache, *, use_shared_prefix: bool,
                 shared_prefix_min_tokens: int, shared_prefix_min_group: int,
                 max_blocks: int | None = None, graphs: DecodeGraphs | None = None,
                 max_decode_rows: int | None = None,
                 eos_token_ids: frozenset[int] = frozenset(),
                 max_context_len: int | None = None, launch_ahead: bool = True,
                 prefill_graphs: PrefillGraphs | None = None) -> None:
        self.model = model
        self.kv = kv_cache
        self.device = model.device
        self.block_size = kv_cache.block_size
        self.use_shared_prefix = use_shared_prefix
        self.min_tokens = shared_prefix_min_tokens
        self.min_group = shared_prefix_min_group
        # The kernel path pads decode tables to power-of-two widths: the kernels' launch plan
        # depends on the widths, and bucketing them gives a step the same plan eagerly and in
        # a CUDA graph (graphs.py), so both compute bitwise the same. The torch path gathers
        # every column, so it keeps exact widths.
        self.bucket_widths = use_shared_prefix
        self.max_blocks = max_blocks
        self.max_decode_rows = max_decode_rows   # the scheduler's max_num_seqs (row buckets)
        self.graphs = graphs
        self.eos_token_ids, self.max_context_len = eos_token_ids, max_context_len
        self.launch_ahead = launch_ahead
        # Set by the engine before each step: prefill work will join the next step, so a
        # decode step launched ahead now would be wasted (the next step is not the prediction)
        self.hold_ahead = False
        self.prefill_graphs = prefill_graphs
        self.num_graph_steps = 0     # steps replayed from a CUDA graph (the rest ran eagerly)
        self.num_piecewise_steps = 0  # of the others, steps run through prefill_graphs
        self.last_groups: GroupedRows | None = None  # the last step's shared-prefix plan

    @property
    def has_ahead(self) -> bool:
        """A decode step launched ahead is in flight: the next step should be that one."""
        return self.graphs is not None and self.graphs.has_ahead

    @property
    def has_deferred_captures(self) -> bool:
        """Decode-graph buckets the warm-up left for idle time (graphs.py `deferred`)."""
        return self.graphs is not None and bool(self.graphs.deferred)

    def capture_deferred(self) -> None:
        """Capture one deferred bucket (the engine calls it, in its worker thread, only when
        no step is scheduled). A failure is logged and ends the deferred captures: those
        buckets are captured by the first step that needs them, as before."""
        assert self.graphs is not None
        try:
            self.graphs.capture_deferred()
        except Exception:  # noqa: BLE001 - an optimisation never stops the engine
            log.exception("capturing a deferred decode graph failed; the rest are captured "
                          "on first use")
            self.graphs.deferred.clear()

    @torch.inference_mode()
    def step(self, batch: Batch) -> list[int | None]:
        """Run fork copies, then the forward pass; sampled[i] belongs to batch.chunks[i]."""
        if batch.copies:
            self.kv.copy_blocks(batch.copies)
        sampled: list[int | None] = [None] * len(batch.chunks)
        host = self.prepare_host(batch) if batch.chunks else None
        self.last_groups = None if host is None else host.groups
        if self.graphs is not None and (batch.copies or host is None or host.prefills):
            # a step launched ahead is used only by the very next step, and only when that is
            # the identical graph step (its outputs are the graph's buffers, reused later)
            self.graphs.drop_ahead()
        if host is None:
            return sampled
        index = self._sample_index(host)     # before any forward is queued
        out = rows = None
        if self.graphs is not None and not host.prefills:
            rows = self._decode_rows(host)
            out = self.graphs.run(rows)
        self.num_graph_steps += out is not None
        if out is not None and rows is not None and self.launch_ahead and not self.hold_ahead:
            assert self.graphs is not None
            predicted = self._fed_prediction(batch, host, rows)
            if predicted is not None:   # the next step queued behind this one, fed its tokens
                tokens = self.graphs.launch_ahead_fed(predicted,
                                                      self._fed_source(batch, host, out))
                for i, token in zip(host.sample_chunks, tokens):
                    sampled[i] = token
                return sampled
        if out is None:
            hidden = self._forward(host)
        if host.sample_rows:
            works = [batch.chunks[i].work for i in host.sample_chunks]
            params = [w.sampling for w in works]
            generators = [w.generator for w in works]
            grammars = [w.grammar for w in works]
            if out is not None:   # a graph step: logits and argmax of every row are computed
                pick = (lambda t: t) if index is None else (lambda t: t.index_select(0, index))
                tokens = sample(pick(out.logits), params, generators, greedy=pick(out.greedy),
                                grammars=grammars)
            else:
                picked = hidden if index is None else hidden.index_select(0, index)
                tokens = sample(self.model.logits(picked), params, generators,     # [N, V]
                                grammars=grammars)
            for i, token in zip(host.sample_chunks, tokens):
                sampled[i] = token
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        if self.launch_ahead and not self.hold_ahead and self.graphs is not None:
            if out is not None and rows is not None:
                self._launch_ahead(batch, host, rows, sampled)
            elif host.prefills and host.decode_lens and host.groups is None:
                # A mixed step whose prefill ends here (hold_ahead: none waits): its decode
                # rows' next step, as after a decode step; a shared-prefix step is grouped
                # otherwise beside a prefill, so it is not predicted from one.
                self._launch_ahead(batch, host, self._decode_rows(host), sampled)
        return sampled

    @staticmethod
    def _decode_rows(host: HostInputs) -> DecodeRows:
        """The step's decode rows (its first rows: all of a decode step's, a mixed step's
        before its prefill chunks), as a decode graph takes them."""
        n = len(host.decode_lens)
        if n == len(host.token_ids):      # a decode step: its lists as they are
            return DecodeRows(host.token_ids, host.positions, host.slots, host.decode_tables,
                              host.decode_lens, host.groups)
        return DecodeRows(host.token_ids[:n], host.positions[:n], host.slots[:n],
                          host.decode_tables, host.decode_lens, host.groups)

    def _sample_index(self, host: HostInputs) -> torch.Tensor | None:
        """The rows to sample on the device; None when none or every row samples. Made
        before the step's forward is queued: this blocking copy made after it would wait for
        the whole forward before the LM head could be queued."""
        if not host.sample_rows or host.sample_rows == list(range(len(host.token_ids))):
            return None
        return torch.tensor(host.sample_rows, device=self.device)

    def _forward(self, host: HostInputs) -> torch.Tensor:
        """The hidden states of a step no decode graph took: through the prefill graphs where
        its rows fit a bucket (their fixed buffers take the token ids, positions and slots:
        none of the eager step's tensors are made), else eagerly."""
        graphs, n = self.prefill_graphs, len(host.token_ids)
        if graphs is not None and graphs.takes(n):
            hidden = graphs.run(host.token_ids, host.positions, host.slots,
                                self.attention_meta(host, graphs.slots[:n]))
            if hidden is not None:
                self.num_piecewise_steps += 1
                return hidden
        inputs = self.to_device(host)
        return self.model.forward(inputs.input_ids, inputs.positions, self.kv.layers,
                                  inputs.meta)

    def _fed_prediction(self, batch: Batch, host: HostInputs, rows: DecodeRows
                        ) -> DecodeRows | None:
        """The next step's rows (token ids to be fed on the device) when it can be queued
        before this step's tokens are read: every row samples, none under a grammar (its mask
        is made on the host), and some row goes on whatever its token is (a row that ends
        rides along, and the real step leaves it out: lookahead.py)."""
        if host.sample_rows != list(range(len(rows.token_ids))):
            return None
        ending = 0
        for i in host.sample_chunks:
            work = batch.chunks[i].work
            if work.grammar is not None:
                return None
            ending += ends_regardless(work, self.max_context_len)
        if ending == len(host.sample_chunks) or (ending and rows.groups is not None):
            return None   # a step nobody wants; a shared-prefix step is used only as is
        return self._next_rows(batch, host, rows, rows.token_ids)

    @staticmethod
    def _fed_source(batch: Batch, host: HostInputs, out: StepOutput) -> StepOutput:
        """What a fed launch-ahead copies the next step's token ids from: each row's token on
        the device (the graph's argmax for a greedy row; sampler.py: a sampled row draws its
        uniform here, once, as `sample` would have)."""
        works = [batch.chunks[i].work for i in host.sample_chunks]
        return StepOutput(out.logits, sample_on_device(
            out.logits, [w.sampling for w in works], [w.generator for w in works],
            greedy=out.greedy))

    def _next_rows(self, batch: Batch, host: HostInputs, rows: DecodeRows,
                   tokens: list[int]) -> DecodeRows | None:
        """lookahead.next_rows with each row's blocks (row order), reserved next one included."""
        owned = [batch.chunks[i].block_table for i in host.order]
        return next_rows(rows, tokens, self.block_size, owned)

    def _launch_ahead(self, batch: Batch, host: HostInputs, rows: DecodeRows,
                      sampled: list[int | None]) -> None:
        """Start the predicted next decode step (lookahead.py) when every row samples and
        some row is not known to finish (those that are ride along; the real step leaves them
        out)."""
        assert self.graphs is not None
        if len(host.sample_rows) != len(rows.token_ids):
            return
        tokens = [sampled[i] for i in host.sample_chunks]
        if any(token is None for token in tokens):
            return
        ending = sum(finishes(batch.chunks[i].work, token, self.eos_token_ids,  # type: ignore[arg-type]
                              self.max_context_len)
                     for i, token in zip(host.sample_chunks, tokens))
        if ending == len(tokens) or (ending and rows.groups is not None):
            return   # a step nobody wants; a shared-prefix step is used only as is
        nxt = self._next_rows(batch, host, rows, tokens)   # type: ignore[arg-type]
        if nxt is not None:
            self.graphs.launch_ahead(nxt)

    def prepare(self, batch: Batch) -> StepInputs:
        """The eager step's device inputs."""
        return self.to_device(self.prepare_host(batch))

    def prepare_host(self, batch: Batch) -> HostInputs:
        chunks = batch.chunks
        decode = [i for i, c in enumerate(chunks) if c.end - c.start == 1]
        prefill = [i for i, c in enumerate(chunks) if c.end - c.start > 1]
        tables = [chunks[i].block_table[:self._num_blocks(chunks[i].end)] for i in decode]
        lens = [chunks[i].end for i in decode]
        groups = None
        if self.use_shared_prefix and len(decode) >= self.min_group:
            plan = plan_shared_prefix(tables, lens, self.block_size, min_tokens=self.min_tokens,
                                      min_group=self.min_group)
            if plan is not None:
                decode = [decode[r] for r in plan.order]
                tables = [tables[r] for r in plan.order]
                lens = [lens[r] for r in plan.order]
                groups = split_groups(tables, lens, plan.group_sizes, plan.prefix_blocks,
                                      self.block_size)
        order = decode + prefill
        host = HostInputs([], [], [], tables, lens, groups, [], order, [], [])
        for i in order:
            c = chunks[i]
            row = len(host.token_ids)
            host.token_ids.extend(c.token_ids)
            host.positions.extend(range(c.start, c.end))
            host.slots.extend(self._slots(c))
            if c.end - c.start > 1:
                host.prefills.append((row, len(host.token_ids), c.start,
                                      c.block_table[:self._num_blocks(c.end)]))
            if c.sample:
                host.sample_rows.append(len(host.token_ids) - 1)
                host.sample_chunks.append(i)
        return host

    def to_device(self, host: HostInputs) -> StepInputs:
        # the int64 inputs in one upload (numpy converts a list of Python ints ~4x faster
        # than torch.tensor: to_device of four 1,000-token chunks 0.72 -> 0.22 ms on the
        # 2-core development VM)
        ids, positions, slots = upload_packed(
            [np.asarray(values, dtype=np.int64)
             for values in (host.token_ids, host.positions, host.slots)], self.device)
        return StepInputs(ids, positions, self.attention_meta(host, slots), host.order,
                          host.sample_rows, host.sample_chunks)

    def attention_meta(self, host: HostInputs, slot_mapping: torch.Tensor
                       ) -> AttentionMetadata:
        """The step's attention metadata on the device, with `slot_mapping` (the step's
        slots already on the device)."""
        has_decode = bool(host.decode_lens)
        g = host.groups
        tables, lens = host.decode_tables, host.decode_lens
        if self.bucket_widths and has_decode:
            # The kernel path pads the decode rows (and groups) to the CUDA-graph bucket of
            # their count too: the launch plan, and so the Triton specialisation, depends on
            # them, and the warm-up compiled the buckets' plans only. Padding rows read one
            # slot of block 0 (never written); the attention drops their outputs.
            n = len(lens)
            bb = next_pow2(n) if self.max_decode_rows is None else (
                batch_bucket(n, self.max_decode_rows) or n)
            tables = tables + [[0]] * (bb - len(lens))
            lens = lens + [1] * (bb - len(lens))
            if g is not None:
                g = pad_groups(g, bb, min(next_pow2(len(g.prefix_lens)), bb), 0)
        # every int32 array of the step in one upload (staging.upload_packed)
        arrays = [self._table(tables), np.asarray(lens, dtype=np.int32)] if has_decode else []
        if g is not None:
            arrays += [np.asarray(g.indptr, dtype=np.int32), self._table(g.prefix_tables),
                       np.asarray(g.prefix_lens, dtype=np.int32),
                       self._table(g.suffix_tables), np.asarray(g.suffix_lens, dtype=np.int32)]
        kernels = self.model.prefill_kernels
        paged = kernels is not None and bool(host.prefills)
        if paged:
            arrays.append(self._table([t for *_, t in host.prefills]))
        views = upload_packed(arrays, self.device) if arrays else []
        decode_tables, decode_lens = views[:2] if has_decode else (None, None)
        shared = None if g is None else SharedPrefixMeta(
            group_indptr=views[2], prefix_block_tables=views[3], prefix_lens=views[4],
            suffix_block_tables=views[5], suffix_lens=views[6])
        plan = None
        if paged:
            assert kernels is not None
            # one plan for every layer's launch; the chunks' tables are rows of its one copy
            table = views[-1]
            plan = kernels.plan_prefill([(start, end - start, pos)
                                         for start, end, pos, _ in host.prefills], table)
            prefills = [PrefillChunk(start, end, pos, table[c])
                        for c, (start, end, pos, _) in enumerate(host.prefills)]
        else:
            prefills = [PrefillChunk(start, end, pos, self._tensor(table))
                        for start, end, pos, table in host.prefills]
        return AttentionMetadata(
            slot_mapping=slot_mapping, num_decode=len(host.decode_lens),
            decode_block_tables=decode_tables, decode_seq_lens=decode_lens,
            shared_prefix=shared, prefills=prefills, prefill_plan=plan)

    def _num_blocks(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def _slots(self, c: ScheduledChunk) -> list[int]:
        bs, table = self.block_size, c.block_table
        return [table[p // bs] * bs + p % bs for p in range(c.start, c.end)]

    def _tensor(self, values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.int64, device=self.device)

    def _table(self, tables: list[list[int]]) -> np.ndarray:
        """[rows, width] int32, padded with block 0 (masked out by the sequence lengths)."""
        width = max(1, max(len(t) for t in tables))
        if self.bucket_widths:
            width = width_bucket(width, self.max_blocks)
        out = np.zeros((len(tables), width), dtype=np.int32)
        StaticInputs.write_rows(out, tables)
        return out
