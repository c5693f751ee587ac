"""Python wrapper: paged prefill attention, every prefill chunk of a step in one launch.

A step's prefill rows come as chunks of a flat batch: chunk c owns rows
[row_start, row_start + n) of q, which hold positions [pos_start, pos_start + n) of a context
whose pages are block_tables[c]. Its K/V, cached context and new tokens alike, are already in
the paged cache (the engine writes the new K/V before attention). Row i of the chunk attends
keys 0 .. pos_start + i. Shapes: q [T, Hq, D] (any row and head strides, contiguous last dim);
caches [num_blocks, block_size, Hkv, D]; block tables int32 [C, max_blocks].

Against torch SDPA per chunk (the engine's other path), this reads the cached context in
place instead of gathering a copy of it for every chunk in every layer, and makes one launch
per layer instead of several per chunk. The plan (`plan_prefill`) is built once per step and
reused by every layer.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from .launch import launcher
from .decode import LOG2E, _check, _use_triton
from .plan import _num_sms
from .reference import reference_paged_prefill_attention

# Key splits (a short Fill after a long context): split a step's keys when its tiles give at
# most one program per SM, into ranges of at least SPLIT_MIN_KEYS keys, until there are about
# SPLIT_PROGRAMS_PER_SM programs per SM. Measured on an H200, one layer (32 heads x 128,
# docs/results/paged_prefill_h200_splits.md): a reviser's 240 tokens over 3,900 (128
# programs whole) 186 -> 109 us in 9 ranges, two 60-token queries over 3,300 (64 programs)
# 101 -> 90 us; but a 1,024-token chunk over 3,000 (256 programs whole) 216 -> 278 us in 3:
# its partials (every row's) cost more to write and merge than the wider launch saves.
SPLIT_PROGRAMS_PER_SM = 4
SPLIT_MIN_KEYS = 256


@dataclass(frozen=True)
class PrefillTuning:
    """Tile of the prefill kernel: query rows x keys per program step, warps, pipeline
    stages. Default: the short-chunk tile below."""

    block_m: int = 64
    block_n: int = 64
    num_warps: int = 4
    num_stages: int = 2
    kv_splits: int | None = None   # key ranges per tile; None: chosen per launch (key_splits)


# Swept on an H200 over ten step shapes of the paper's workloads (the kernel with its unmasked
# blocks, docs/results/paged_prefill_h200_unmasked.md; the first sweep, 32 and 8 key/value
# heads: paged_prefill_h200.md): where the chunks are long, a 128-row tile of 32-key steps
# with 8 warps is the fastest on five of the seven long-chunk shapes (copilot's 100-row
# forks 587 against 635 us for the 128 x 64 x 4 warps tile used before, four fresh 2,048-token
# prompts 441 against 489, four fresh 1,000-token ones 148 against 171); the 64-row tile where
# they are short (gpts' 60-row forks 117 us: a 128-row tile would be half empty). The warm-up
# compiles both.
SHORT_CHUNKS = PrefillTuning(block_m=64, block_n=64, num_warps=4, num_stages=2)
LONG_CHUNKS = PrefillTuning(block_m=128, block_n=32, num_warps=8, num_stages=2)
PREFILL_TUNINGS = (SHORT_CHUNKS, LONG_CHUNKS)


def tuning_for(chunks: Sequence[tuple[int, int, int]]) -> PrefillTuning:
    """The tile for a step: the long-chunk one when its chunks average more rows than the
    short tile holds."""
    rows = sum(n for _, n, _ in chunks)
    return LONG_CHUNKS if rows > SHORT_CHUNKS.block_m * len(chunks) else SHORT_CHUNKS


@dataclass(frozen=True)
class PrefillPlan:
    """One step's chunks, on the device, for every layer's launch."""

    chunks: tuple[tuple[int, int, int], ...]   # (row_start, num_rows, pos_start), host copy
    block_tables: torch.Tensor                 # int32 [C, max_blocks]
    chunk_rows: torch.Tensor                   # int32 [C]
    chunk_pos: torch.Tensor                    # int32 [C]
    chunk_lens: torch.Tensor                   # int32 [C]
    tile_chunk: torch.Tensor                   # int32 [num_tiles]: the chunk of each tile
    tile_m: torch.Tensor                       # int32 [num_tiles]: its first row in the chunk
    tuning: PrefillTuning
    max_keys: int = 0                          # keys the longest tile reads
    # (heads, head_dim, device) -> the launch's key splits and its workspace, made by the
    # step's first layer and reused by the others (one stream: a layer's merge has read the
    # workspace before the next layer's partials write it)
    _launches: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def num_tiles(self) -> int:
        return int(self.tile_chunk.shape[0])

    def launch(self, num_heads: int, head_dim: int, device: torch.device
               ) -> tuple[int, int, torch.Tensor | None]:
        """(key ranges, keys per range, fp32 workspace or None when unsplit) for q's heads."""
        key = (num_heads, head_dim, device)
        if key not in self._launches:
            splits, length = key_splits(self, num_heads, _num_sms(device))
            # [split, tile, row of the tile, head] partials: head_dim outputs + the LSE
            ws = None if splits == 1 else torch.empty(
                splits * self.num_tiles * self.tuning.block_m * num_heads * (head_dim + 1),
                dtype=torch.float32, device=device)
            self._launches[key] = (splits, length, ws)
        return self._launches[key]


_ALIGN = 4     # int32 entries per 16 bytes


def plan_prefill(chunks: Sequence[tuple[int, int, int]], block_tables: torch.Tensor,
                 tuning: PrefillTuning | None = None) -> PrefillPlan:
    """The launch plan of `chunks` (row_start, num_rows, pos_start) over `block_tables`.

    Tiles whose rows see the most keys go first, so the longest programs do not start last
    (the tail of the launch). One host-to-device copy carries all the metadata."""
    chunks = tuple((int(r), int(n), int(p)) for r, n, p in chunks)
    tuning = tuning or tuning_for(chunks)
    if block_tables.dim() != 2 or block_tables.shape[0] != len(chunks):
        raise ValueError(f"block_tables must be [{len(chunks)}, max_blocks], got "
                         f"{tuple(block_tables.shape)}")
    if block_tables.dtype != torch.int32 or (block_tables.shape[1] > 1
                                             and block_tables.stride(1) != 1):
        raise ValueError("block_tables must be int32 with a contiguous last dim")
    if block_tables.data_ptr() % (4 * _ALIGN):
        block_tables = block_tables.clone()        # aligned, like the metadata below
    tiles = []
    for c, (row, n, pos) in enumerate(chunks):
        if n < 1 or row < 0 or pos < 0:
            raise ValueError(f"chunk {c}: rows from {row}, {n} rows at position {pos}")
        tiles += [(pos + min(m + tuning.block_m, n), c, m) for m in range(0, n, tuning.block_m)]
    tiles.sort(key=lambda t: -t[0])
    # Each segment starts on a 16-byte boundary: Triton specialises a pointer argument on
    # its 16-byte alignment, so views at offsets of (chunks, tiles) x 4 bytes would compile
    # a new variant for every new alignment mix while serving (measured on an H200: 64
    # ragged Fills ran at 46% of the fixed-length rate).
    segments = ([r for r, _, _ in chunks], [p for _, _, p in chunks], [n for _, n, _ in chunks],
                [c for _, c, _ in tiles], [m for _, _, m in tiles])
    padded = [-(-len(seg) // _ALIGN) * _ALIGN for seg in segments]
    meta = [v for seg, size in zip(segments, padded) for v in seg + [0] * (size - len(seg))]
    flat = torch.tensor(meta, dtype=torch.int32).to(block_tables.device, non_blocking=True)
    views = [view[:len(seg)] for view, seg in zip(torch.split(flat, padded), segments)]
    return PrefillPlan(chunks, block_tables, chunk_rows=views[0], chunk_pos=views[1],
                       chunk_lens=views[2], tile_chunk=views[3], tile_m=views[4], tuning=tuning,
                       max_keys=tiles[0][0] if tiles else 0)


def key_splits(plan: PrefillPlan, num_heads: int, num_sms: int) -> tuple[int, int]:
    """(key ranges per tile, keys per range) of a launch: (1, 0) when the tiles alone fill
    the GPU or the keys are too few to split (host-known sizes only: no sync)."""
    t = plan.tuning
    programs = plan.num_tiles * num_heads
    if t.kv_splits is not None:
        n = t.kv_splits
    elif programs > num_sms or programs == 0:
        n = 1
    else:
        n = min(-(-SPLIT_PROGRAMS_PER_SM * num_sms // programs), plan.max_keys // SPLIT_MIN_KEYS)
    if n <= 1:
        return 1, 0
    length = -(-max(1, plan.max_keys) // n)
    length = -(-length // t.block_n) * t.block_n
    if t.kv_splits is not None:
        return n, length           # as asked, empty ranges included (the warm-up's)
    return -(-plan.max_keys // length), length


def paged_prefill_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            plan: PrefillPlan, scale: float, *,
                            out: torch.Tensor | None = None) -> torch.Tensor:
    """The attention output of every chunk's rows, written into `out` ([T, Hq, D], q's dtype;
    allocated when None). Rows of q in no chunk are left as they are in `out`."""
    _check(q, k_cache, v_cache, (), out, rows="T")   # the plan checked its tables
    if plan.chunks and max(r + n for r, n, _ in plan.chunks) > q.shape[0]:
        raise ValueError(f"the plan's chunks reach past q's {q.shape[0]} rows")
    if out is None:
        out = torch.empty_like(q)
    if not plan.chunks:
        return out
    if not _use_triton(q):
        ref = reference_paged_prefill_attention(q, k_cache, v_cache, plan.chunks,
                                                plan.block_tables, scale, dtype=torch.float32)
        for row, n, _ in plan.chunks:
            out[row:row + n] = ref[row:row + n].to(out.dtype)
        return out
    from . import _jit_prefill as jit  # lazy: TRITON_INTERPRET must be read after conftest

    t = plan.tuning
    hq, d = q.shape[1], q.shape[2]
    splits, split_len, ws = plan.launch(hq, d, q.device)
    if ws is not None:
        ws_lse, ws_out = ws[:ws.numel() // (d + 1)], ws[ws.numel() // (d + 1):]
    else:
        ws_out = ws_lse = out          # unused
    launcher(jit._paged_prefill_kernel)((plan.num_tiles, hq, splits),
        q, k_cache, v_cache, out, plan.tile_chunk, plan.tile_m, plan.chunk_rows, plan.chunk_pos,
        plan.chunk_lens, plan.block_tables, scale * LOG2E, ws_out, ws_lse, split_len,
        plan.num_tiles,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        out.stride(0), out.stride(1), plan.block_tables.stride(0),
        GQA=hq // k_cache.shape[2], HEAD_DIM=d, PAGE=k_cache.shape[1],
        BLOCK_M=t.block_m, BLOCK_N=t.block_n, SPLIT=splits > 1, num_warps=t.num_warps,
        num_stages=t.num_stages)
    if splits > 1:
        launcher(jit._merge_prefill_splits_kernel)((plan.num_tiles, hq),
            ws_out, ws_lse, out, plan.tile_chunk, plan.tile_m, plan.chunk_rows,
            plan.chunk_lens, splits, plan.num_tiles, out.stride(0), out.stride(1),
            HEAD_DIM=d, BLOCK_M=t.block_m, num_warps=4)
    return out
