"""Find decode rows that share a prefix of KV blocks, for the shared-prefix decode kernel.

Forked contexts share their parent's full blocks, so rows forked from one parent have block
tables that start with the same block ids. Rows are grouped by their first block; a group whose
common full-block prefix holds at least `min_tokens` tokens and has at least `min_group` rows
reads that prefix once. Every other row forms a group of its own with an empty prefix.
Pure Python over lists, so the planning is unit-tested without a kernel.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PrefixPlan:
    order: list[int]                    # decode rows, group members contiguous
    group_sizes: list[int]              # rows per group, in order
    prefix_blocks: list[int]            # shared full blocks per group (0: no sharing)

    @property
    def num_groups(self) -> int:
        return len(self.group_sizes)


def plan_shared_prefix(tables: list[list[int]], seq_lens: list[int], block_size: int, *,
                       min_tokens: int, min_group: int) -> PrefixPlan | None:
    """A grouping of the rows, or None when no group is worth the shared-prefix kernel."""
    buckets: dict[int, list[int]] = {}
    for row, table in enumerate(tables):
        if table:
            buckets.setdefault(table[0], []).append(row)
    order: list[int] = []
    sizes: list[int] = []
    prefixes: list[int] = []
    grouped: set[int] = set()
    for rows in buckets.values():
        if len(rows) < min_group:
            continue
        # Only full blocks strictly before each row's last token can be shared.
        common = min((seq_lens[r] - 1) // block_size for r in rows)
        first = tables[rows[0]]
        for r in rows[1:]:
            common = _common_length(first, tables[r], common)
        if common * block_size < min_tokens:
            continue
        order.extend(rows)
        sizes.append(len(rows))
        prefixes.append(common)
        grouped.update(rows)
    if not sizes:
        return None
    for row in range(len(tables)):
        if row not in grouped:
            order.append(row)
            sizes.append(1)
            prefixes.append(0)
    return PrefixPlan(order, sizes, prefixes)


def _common_length(a: list[int], b: list[int], limit: int) -> int:
    """The longest k <= limit with a[:k] == b[:k]. Rows forked from one parent agree up to
    their shared blocks, so one slice comparison (in C) usually settles it; else a binary
    search (a common prefix of length k implies one of every shorter length). It runs once
    per grouped row on every decode step with sharing, over tables of hundreds of blocks."""
    if a[:limit] == b[:limit]:
        return limit
    lo, hi = 0, limit - 1          # a[:lo] == b[:lo]; a[:hi + 1] != b[:hi + 1]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass(frozen=True)
class GroupedRows:
    """The shared-prefix kernel's inputs as host lists (rows already in plan order)."""

    indptr: list[int]                   # [G + 1]: rows indptr[g]:indptr[g + 1] form group g
    prefix_tables: list[list[int]]      # [G][shared blocks]
    prefix_lens: list[int]              # [G] tokens (whole blocks)
    suffix_tables: list[list[int]]      # [B][own blocks after the prefix]
    suffix_lens: list[int]              # [B] tokens after the prefix (the new token included)


def split_groups(tables: list[list[int]], seq_lens: list[int], group_sizes: list[int],
                 prefix_blocks: list[int], block_size: int) -> GroupedRows:
    """Cut each row's table into its group's shared prefix and its own suffix."""
    indptr, prefix_tables, prefix_lens, suffix_tables, suffix_lens = [0], [], [], [], []
    row = 0
    for size, blocks in zip(group_sizes, prefix_blocks):
        prefix_tables.append(tables[row][:blocks])
        prefix_lens.append(blocks * block_size)
        for r in range(row, row + size):
            suffix_tables.append(tables[r][blocks:])
            suffix_lens.append(seq_lens[r] - blocks * block_size)
        row += size
        indptr.append(row)
    return GroupedRows(indptr, prefix_tables, prefix_lens, suffix_tables, suffix_lens)


def pad_groups(groups: GroupedRows, batch: int, num_groups: int, pad_block: int
               ) -> GroupedRows:
    """The rows padded to `batch` and the groups to `num_groups` the way a CUDA-graph bucket
    pads them (graphs.py `fill`): padding groups are empty (no prefix), padding rows join the
    last group with a one-token suffix in `pad_block` (read, never written; their outputs are
    dropped). An eager step padded this way gets its bucket's kernel launch plan, so it runs
    the Triton specialisations the start-up warm-up compiled (never a JIT mid-serving)."""
    n, g = len(groups.suffix_lens), len(groups.prefix_lens)
    if batch < n or not g <= num_groups <= batch:
        raise ValueError(f"cannot pad {n} rows in {g} groups to {batch} rows in {num_groups}")
    indptr = groups.indptr + [n] * (num_groups - g)
    indptr[num_groups] = batch
    return GroupedRows(indptr, groups.prefix_tables + [[]] * (num_groups - g),
                       groups.prefix_lens + [0] * (num_groups - g),
                       groups.suffix_tables + [[pad_block]] * (batch - n),
                       groups.suffix_lens + [1] * (batch - n))
