"""Random paged KV caches for the kernel tests: shuffled pages, garbage in unused table slots."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class SharedBatch:
    q: torch.Tensor  # [B, Hq, D]
    k_cache: torch.Tensor  # [num_blocks, block_size, Hkv, D]
    v_cache: torch.Tensor
    group_indptr: torch.Tensor  # [G + 1] int32
    prefix_block_tables: torch.Tensor  # [G, max_prefix_blocks] int32
    prefix_lens: torch.Tensor  # [G] int32
    suffix_block_tables: torch.Tensor  # [B, max_suffix_blocks] int32
    suffix_lens: torch.Tensor  # [B] int32
    scale: float

    def shared_args(self) -> tuple:
        return (self.q, self.k_cache, self.v_cache, self.group_indptr, self.prefix_block_tables,
                self.prefix_lens, self.suffix_block_tables, self.suffix_lens, self.scale)

    def paged_args(self) -> tuple:
        """The same attention as a plain paged batch: each row's table is prefix ++ suffix."""
        page = self.k_cache.shape[1]
        rows, lens = [], []
        indptr = self.group_indptr.tolist()
        for g in range(len(indptr) - 1):
            p_blocks = int(self.prefix_lens[g]) // page
            for b in range(indptr[g], indptr[g + 1]):
                s_blocks = -(-int(self.suffix_lens[b]) // page)
                rows.append(self.prefix_block_tables[g, :p_blocks].tolist()
                            + self.suffix_block_tables[b, :s_blocks].tolist())
                lens.append(int(self.prefix_lens[g]) + int(self.suffix_lens[b]))
        width = max(1, max(len(r) for r in rows))
        table = torch.zeros(len(rows), width, dtype=torch.int32)
        for b, r in enumerate(rows):
            table[b, :len(r)] = torch.tensor(r, dtype=torch.int32)
            table[b, len(r):] = self.k_cache.shape[0] - 1  # garbage, must not be read
        dev = self.q.device
        return (self.q, self.k_cache, self.v_cache, table.to(dev),
                torch.tensor(lens, dtype=torch.int32, device=dev), self.scale)


def make_shared_batch(*, group_sizes: list[int], prefix_blocks: list[int],
                      suffix_lens: list[int], num_kv_heads: int, gqa: int, head_dim: int,
                      block_size: int, dtype: torch.dtype, device: str = "cpu",
                      seed: int = 0) -> SharedBatch:
    """group_sizes[g] rows share prefix_blocks[g] full pages; row b has suffix_lens[b] tokens."""
    assert len(group_sizes) == len(prefix_blocks) and sum(group_sizes) == len(suffix_lens)
    gen = torch.Generator().manual_seed(seed)
    batch, hq = len(suffix_lens), num_kv_heads * gqa
    suffix_blocks = [-(-s // block_size) for s in suffix_lens]
    used = sum(prefix_blocks) + sum(suffix_blocks)
    num_blocks = used + 3  # spare blocks hold garbage that a correct kernel never reads
    perm = torch.randperm(num_blocks, generator=gen).to(torch.int32)
    cache_shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.randn(cache_shape, generator=gen).to(dtype)
    v_cache = torch.randn(cache_shape, generator=gen).to(dtype)
    q = torch.randn(batch, hq, head_dim, generator=gen).to(dtype)

    def table(lengths: list[int], start: int) -> torch.Tensor:
        width = max(1, max(lengths, default=0) + 1)  # one garbage column past the longest
        t = perm[-1].repeat(len(lengths), width).clone()
        for i, n in enumerate(lengths):
            t[i, :n] = perm[start:start + n]
            start += n
        return t

    prefix_table = table(prefix_blocks, 0)
    suffix_table = table(suffix_blocks, sum(prefix_blocks))
    indptr = torch.tensor([0] + torch.tensor(group_sizes).cumsum(0).tolist(), dtype=torch.int32)
    return SharedBatch(
        q=q.to(device), k_cache=k_cache.to(device), v_cache=v_cache.to(device),
        group_indptr=indptr.to(device), prefix_block_tables=prefix_table.to(device),
        prefix_lens=torch.tensor([n * block_size for n in prefix_blocks], dtype=torch.int32,
                                 device=device),
        suffix_block_tables=suffix_table.to(device),
        suffix_lens=torch.tensor(suffix_lens, dtype=torch.int32, device=device),
        scale=head_dim ** -0.5)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double().cpu(), ref.double().cpu()
    assert torch.isfinite(out).all(), "non-finite output (unwritten or NaN)"
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def poisoned_like(q: torch.Tensor) -> torch.Tensor:
    return torch.full_like(q, float("nan"))
