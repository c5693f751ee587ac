"""ModelRunner: one scheduled Batch -> input tensors -> forward pass -> sampled tokens.

`step` is the blocking call the engine makes through `asyncio.to_thread`; it reads only the
Batch (snapshots taken on the loop) and the sampling state of the works in it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from parrot.engines.builtin.attention import AttentionMetadata, PrefillChunk, SharedPrefixMeta
from parrot.engines.builtin.cascade import plan_shared_prefix
from parrot.engines.builtin.kv_cache import KVCache
from parrot.engines.builtin.model import LlamaModel
from parrot.engines.builtin.sampler import sample
from parrot.engines.builtin.scheduler import Batch, ScheduledChunk


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
                 shared_prefix_min_tokens: int, shared_prefix_min_group: int) -> None:
        self.model = model
        self.kv = kv_cache
        self.device = model.device
        self.block_size = kv_cache.block_size
        self.use_shared_prefix = use_shared_prefix
        self.min_tokens = shared_prefix_min_tokens
        self.min_group = shared_prefix_min_group

    @torch.inference_mode()
    def step(self, batch: Batch) -> list[int | None]:
        """Run fork copies, then the forward pass; sampled[i] belongs to batch.chunks[i]."""
        if batch.copies:
            self.kv.copy_blocks(batch.copies)
        sampled: list[int | None] = [None] * len(batch.chunks)
        if not batch.chunks:
            return sampled
        inputs = self.prepare(batch)
        hidden = self.model.forward(inputs.input_ids, inputs.positions, self.kv.layers,
                                    inputs.meta)
        if inputs.sample_rows:
            rows = torch.tensor(inputs.sample_rows, device=self.device)
            logits = self.model.logits(hidden.index_select(0, rows))          # [N, V]
            works = [batch.chunks[i].work for i in inputs.sample_chunks]
            tokens = sample(logits, [w.sampling for w in works], [w.generator for w in works])
            for i, token in zip(inputs.sample_chunks, tokens):
                sampled[i] = token
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return sampled

    def prepare(self, batch: Batch) -> StepInputs:
        chunks = batch.chunks
        decode = [i for i, c in enumerate(chunks) if c.end - c.start == 1]
        prefill = [i for i, c in enumerate(chunks) if c.end - c.start > 1]
        tables = [chunks[i].block_table[:self._num_blocks(chunks[i].end)] for i in decode]
        lens = [chunks[i].end for i in decode]
        shared = None
        if self.use_shared_prefix and len(decode) >= self.min_group:
            plan = plan_shared_prefix(tables, lens, self.block_size, min_tokens=self.min_tokens,
                                      min_group=self.min_group)
            if plan is not None:
                decode = [decode[r] for r in plan.order]
                tables = [tables[r] for r in plan.order]
                lens = [lens[r] for r in plan.order]
                shared = self._shared_prefix_meta(tables, lens, plan.group_sizes,
                                                  plan.prefix_blocks)
        order = decode + prefill
        ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        sample_rows: list[int] = []
        sample_chunks: list[int] = []
        prefills: list[PrefillChunk] = []
        for i in order:
            c = chunks[i]
            row = len(ids)
            ids.extend(c.token_ids)
            positions.extend(range(c.start, c.end))
            slots.extend(self._slots(c))
            if c.end - c.start > 1:
                prefills.append(PrefillChunk(row, len(ids), c.start, self._tensor(
                    c.block_table[:self._num_blocks(c.end)])))
            if c.sample:
                sample_rows.append(len(ids) - 1)
                sample_chunks.append(i)
        meta = AttentionMetadata(
            slot_mapping=self._tensor(slots), num_decode=len(decode),
            decode_block_tables=self._padded(tables) if decode else None,
            decode_seq_lens=self._tensor(lens, torch.int32) if decode else None,
            shared_prefix=shared, prefills=prefills)
        return StepInputs(self._tensor(ids), self._tensor(positions), meta, order, sample_rows,
                          sample_chunks)

    def _num_blocks(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def _slots(self, c: ScheduledChunk) -> list[int]:
        bs, table = self.block_size, c.block_table
        return [table[p // bs] * bs + p % bs for p in range(c.start, c.end)]

    def _tensor(self, values: list[int], dtype: torch.dtype = torch.int64) -> torch.Tensor:
        return torch.tensor(values, dtype=dtype, device=self.device)

    def _padded(self, tables: list[list[int]]) -> torch.Tensor:
        """[B, max_blocks] int32, padded with block 0 (masked out by the sequence lengths)."""
        width = max(1, max(len(t) for t in tables))
        return self._tensor([t + [0] * (width - len(t)) for t in tables], torch.int32)

    def _shared_prefix_meta(self, tables: list[list[int]], lens: list[int], sizes: list[int],
                            prefix_blocks: list[int]) -> SharedPrefixMeta:
        bs = self.block_size
        indptr, prefix_tables, prefix_lens, suffix_tables, suffix_lens = [0], [], [], [], []
        row = 0
        for size, pblocks in zip(sizes, prefix_blocks):
            prefix_tables.append(tables[row][:pblocks])
            prefix_lens.append(pblocks * bs)
            for r in range(row, row + size):
                suffix_tables.append(tables[r][pblocks:])
                suffix_lens.append(lens[r] - pblocks * bs)
            row += size
            indptr.append(row)
        return SharedPrefixMeta(
            group_indptr=self._tensor(indptr, torch.int32),
            prefix_block_tables=self._padded(prefix_tables),
            prefix_lens=self._tensor(prefix_lens, torch.int32),
            suffix_block_tables=self._padded(suffix_tables),
            suffix_lens=self._tensor(suffix_lens, torch.int32))
