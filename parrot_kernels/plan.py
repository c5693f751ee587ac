"""Launch planning for the decode kernels: split counts, block sizes, strategy, workspace.

Everything here reads host-known shapes only (batch, groups, table widths, head counts), never
device-side lengths, so a plan is fixed per CUDA-graph bucket and costs no host sync.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

MIN_SPLIT_TOKENS = 256  # shortest KV range worth a program of its own
# Per-row launches (paged, or the per_row shared-prefix strategy) do not split KV once the rows
# alone give at least this many programs per SM: a table is padded to its power-of-two width
# bucket, so a row fills (W/2, W] of it and a split of W/2 leaves the second program nearly
# empty, while the merge launch costs as much as the split saves. H200 sweep, MHA, contexts
# 544/1100/3000, B = 1..64 (docs/results/attention_sweep_h200.md): one split was the fastest
# or within 1% at every B >= 8, 3-12% ahead of the token-count rule below.
ONE_SPLIT_PROGRAMS_PER_SM = 1
# ... and from this many programs per SM the loop steps 64 tokens in 3 stages instead of 128 in
# 2 (fewer registers: more programs resident; same sweep: 4-10% faster at B >= 16, slower at
# B = 8, where two programs per SM need the longer step's bytes in flight).
SHORT_STEP_PROGRAMS_PER_SM = 3
# Otherwise split KV until there are about this many programs per SM. Per-row launches with
# fewer rows than SMs want many (B <= 4 in the sweep above: 4-16 splits were fastest); the
# cascade wants few, long prefix splits (each split adds a slot of B x Hq x D fp32 partials to
# write and merge).
ROW_PROGRAMS_PER_SM = 16
CASCADE_PROGRAMS_PER_SM = 4
# "auto" runs the cascade (prefix tiles + per-row suffixes + merge) only when sharing saves at
# least this many bytes of KV reads, (B - G) * max_prefix_len * (K+V bytes per token). Below
# it the prefix is small and stays in L2 for the per-row kernel, and the cascade's merge
# launch costs more than it saves (H200: GQA 32/8, P=1008: B=8 saves 29 MB, cascade 1-2 us
# slower; B=16 saves 62 MB, cascade 1.14-1.28x faster than paged).
CASCADE_MIN_SAVED_BYTES = 48 * 2**20
# A prefix tile stacks (rows of one group) x (GQA heads) as tl.dot's M. When a group's rows
# fit SMALL_TILE_M (the smallest M tl.dot takes), the tile is that small and steps 64 prefix
# tokens: a 64-row tile would hold 16 rows and 48 of padding. H200 sweep, MHA 32x128, one
# group, tables at the engine's bucket widths (docs/KERNELS.md "Small prefix groups"):
# B=8/P=3696/S=140 47.4 -> 37.4 us, B=16/P=6000/S=200 65.5 -> 58.3, B=16/P=3696/S=140
# 46.4 -> 44.0; at 32 rows a 32-row tile was slower than the default (48.8 -> 52.0 us).
SMALL_TILE_M = 16
SMALL_TILE_BLOCK_N = 64


@dataclass(frozen=True)
class KernelTuning:
    """Launch knobs; the defaults are what the H200 benchmark chose (docs/KERNELS.md)."""
    split_tokens: int | None = None  # KV tokens per program (rounded to block_n); None: auto
    # KV tokens per loop step of the per-row programs; None: 128 alone, 64 beside prefix tiles
    block_n: int | None = None
    # KV tokens per loop step of the prefix tiles; None: 32 when the per-row work dominates
    # (fewer registers, more per-row programs resident), 64 when the tiles' tl.dot dominates
    tile_block_n: int | None = None
    # prefix tile rows: (requests of one group) x (GQA heads), >= 16; None: SMALL_TILE_M when
    # a group's rows fit it, else 64
    block_m: int | None = None
    fuse: bool = True  # prefix tiles and per-row programs in one launch (else two)
    use_dot: bool = True  # per-row programs: tl.dot, GQA heads padded to 16 (else CUDA cores)
    num_warps: int = 4
    tile_num_warps: int | None = None  # prefix tiles' warps when not fused (None: num_warps)
    num_stages: int | None = None  # None: 3 with the short per-row step (see above), else 2


@dataclass(frozen=True)
class Plan:
    n_tiles: int  # prefix row tiles per kv head (0: no tile programs)
    prefix_splits: int
    prefix_split_len: int
    row_splits: int
    row_split_len: int
    row_has_prefix: bool  # per-row programs read their group's prefix themselves
    block_n: int
    tile_block_n: int
    num_stages: int = 2
    block_m: int = 64       # prefix tile rows (requests x GQA heads), a power of two >= GQA

    @property
    def direct_out(self) -> bool:
        return self.n_tiles == 0 and self.row_splits == 1

    @property
    def num_slots(self) -> int:
        return 0 if self.direct_out else self.prefix_splits * (self.n_tiles > 0) + self.row_splits


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def triton_next_pow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1): Triton block sizes."""
    return 1 << max(0, (n - 1).bit_length())


def _round_up(a: int, b: int) -> int:
    return _cdiv(a, b) * b


@functools.cache
def _num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 4  # interpreter: keep grids small
    return torch.cuda.get_device_properties(device).multi_processor_count


def _splits(max_len: int, chunk: int, block_n: int) -> tuple[int, int]:
    """(number of splits, tokens per split) covering max_len in chunks of about chunk."""
    n = max(1, _cdiv(max_len, chunk))
    length = _round_up(max(1, _cdiv(max_len, n)), block_n)
    return max(1, _cdiv(max_len, length)), length


# Every layer of a step asks for the same plan: kept by its (hashable) arguments.
@functools.lru_cache(maxsize=4096)
def make_plan(batch: int, groups: int, kvh: int, gqa: int, max_prefix: int, max_rows: int,
          cascade: bool, row_has_prefix: bool, tuning: KernelTuning, device: torch.device
          ) -> Plan:
    """max_rows: KV tokens a per-row program may see (suffix, or prefix + suffix)."""
    # a group holds at most every row but one per other group (a correct tile count either
    # way: a group with more rows takes more tiles)
    small = cascade and (batch - groups + 1) * gqa <= SMALL_TILE_M
    block_m = max(tuning.block_m or (SMALL_TILE_M if small else 64), triton_next_pow2(gqa))
    n_tiles = groups + max(batch - groups, 0) // max(1, block_m // gqa) if cascade else 0
    tile_work, row_work = n_tiles * kvh * max_prefix, batch * kvh * max_rows
    sms = _num_sms(device)
    row_programs = batch * kvh
    short_step = not cascade and row_programs >= SHORT_STEP_PROGRAMS_PER_SM * sms
    block_n = tuning.block_n or (64 if cascade or short_step else 128)
    tile_block_n = tuning.tile_block_n or (
        SMALL_TILE_BLOCK_N if small and tuning.block_m is None
        else 32 if row_work >= tile_work else 64)
    num_stages = tuning.num_stages or (3 if short_step else 2)
    if tuning.split_tokens is not None:
        chunk = tuning.split_tokens
    elif not cascade and row_programs >= ONE_SPLIT_PROGRAMS_PER_SM * sms:
        chunk = max_rows
    else:
        per_sm = CASCADE_PROGRAMS_PER_SM if cascade else ROW_PROGRAMS_PER_SM
        chunk = max(MIN_SPLIT_TOKENS, _cdiv(tile_work + row_work, per_sm * sms))
    p_splits, p_len = _splits(max_prefix, chunk, tile_block_n) if cascade else (0, tile_block_n)
    r_splits, r_len = _splits(max_rows, chunk, block_n)
    return Plan(n_tiles, p_splits, p_len, r_splits, r_len, row_has_prefix, block_n,
                 tile_block_n, num_stages, block_m)


def choose_shared_prefix_strategy(batch: int, num_groups: int, max_prefix_tokens: int,
                                  kv_token_bytes: int) -> str:
    """The "auto" dispatch: "cascade" when sharing saves enough KV reads, else "per_row".

    kv_token_bytes: K + V bytes of one token of one layer (2 * Hkv * D * itemsize). Host-known
    sizes only (max_prefix_tokens = prefix table width x block size), so the choice is fixed
    for a CUDA-graph bucket.
    """
    saved = (batch - num_groups) * max_prefix_tokens * kv_token_bytes
    return "cascade" if saved >= CASCADE_MIN_SAVED_BYTES else "per_row"


def shared_plan(q, k_cache, group_indptr, prefix_block_tables, suffix_block_tables,
                 strategy: str, tuning: KernelTuning) -> Plan:
    if strategy not in ("auto", "cascade", "per_row"):
        raise ValueError(f"strategy must be 'auto', 'cascade' or 'per_row', got {strategy!r}")
    batch, page, kvh = q.shape[0], k_cache.shape[1], k_cache.shape[2]
    groups = group_indptr.shape[0] - 1
    max_prefix = prefix_block_tables.shape[1] * page
    max_suffix = suffix_block_tables.shape[1] * page
    if strategy == "auto":
        token_bytes = 2 * kvh * k_cache.shape[3] * k_cache.element_size()
        strategy = choose_shared_prefix_strategy(batch, groups, max_prefix, token_bytes)
    cascade = max_prefix > 0 and strategy == "cascade"
    rows = max_suffix if cascade else max_prefix + max_suffix
    return make_plan(batch, groups, kvh, q.shape[1] // kvh, max_prefix, rows, cascade,
                 not cascade and max_prefix > 0, tuning, q.device)


def paged_plan(q, k_cache, block_tables, tuning: KernelTuning) -> Plan:
    kvh = k_cache.shape[2]
    max_len = block_tables.shape[1] * k_cache.shape[1]
    return make_plan(q.shape[0], 0, kvh, q.shape[1] // kvh, 0, max_len, False, False, tuning,
                 q.device)


def workspace_numel(plan: Plan, q: torch.Tensor) -> int:
    return plan.num_slots * q.shape[0] * q.shape[1] * (q.shape[2] + 1)


def paged_decode_workspace_numel(q, k_cache, block_tables, *, tuning: KernelTuning | None = None
                                 ) -> int:
    """fp32 elements of ``workspace`` paged_decode_attention needs for these shapes (may be 0)."""
    return workspace_numel(paged_plan(q, k_cache, block_tables, tuning or KernelTuning()), q)


def shared_prefix_decode_workspace_numel(q, k_cache, group_indptr, prefix_block_tables,
                                         suffix_block_tables, *, strategy: str = "auto",
                                         tuning: KernelTuning | None = None) -> int:
    """fp32 elements of ``workspace`` shared_prefix_decode_attention needs for these shapes."""
    plan = shared_plan(q, k_cache, group_indptr, prefix_block_tables, suffix_block_tables,
                        strategy, tuning or KernelTuning())
    return workspace_numel(plan, q)


