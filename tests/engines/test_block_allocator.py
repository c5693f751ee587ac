"""The reference-counted block allocator shared by the builtin and the simulated engine."""

from __future__ import annotations

import subprocess
import sys

import pytest

from parrot.engines.block_allocator import BlockAllocator
from parrot.engines.builtin.block_manager import BlockManager
from parrot.engines.sim_blocks import KVSpace


def test_check_act_share_release_and_double_free():
    alloc = BlockAllocator(4)
    assert alloc.can_allocate(4) and not alloc.can_allocate(5)
    blocks = alloc.allocate(3)
    assert (blocks, alloc.num_free_blocks, alloc.num_used_blocks) == ([0, 1, 2], 1, 3)
    alloc.share([1])
    assert alloc.ref_count(1) == 2
    alloc.release([1])
    assert (alloc.ref_count(1), alloc.num_free_blocks) == (1, 1)
    alloc.release([1])
    assert (alloc.ref_count(1), alloc.num_free_blocks) == (0, 2)
    with pytest.raises(AssertionError, match="double free"):
        alloc.release([1])
    with pytest.raises(AssertionError, match="share of free block 1"):
        alloc.share([1])
    with pytest.raises(AssertionError):
        alloc.allocate(3)
    assert alloc.allocate(2) == [1, 3]  # freed blocks are reused
    alloc.check_invariants()


def test_rejects_an_empty_pool():
    with pytest.raises(ValueError, match="num_blocks must be >= 1"):
        BlockAllocator(0)


def test_both_engines_use_this_allocator():
    assert type(BlockManager(8, 16).allocator) is BlockAllocator
    assert type(KVSpace(8, 16).pool) is BlockAllocator


def test_the_simulator_does_not_import_torch():
    code = ("import sys, parrot.engines.simulated, parrot.engines.block_allocator; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_a_named_block_outlives_its_last_reference_until_an_allocation_needs_it():
    alloc = BlockAllocator(4)
    a, b, c = alloc.allocate(3)
    assert alloc.cache_block(a, b"A") and alloc.cache_block(b, b"B")
    assert not alloc.cache_block(c, b"A"), "a digest names one block"
    assert not alloc.cache_block(a, b"C"), "a block keeps its first name"
    alloc.release([b, a])                        # tail first, as a block table is released
    assert (alloc.num_free_blocks, alloc.num_cached_blocks) == (3, 2)
    assert alloc.lookup([b"A", b"B", b"X", b"A"]) == [a, b]   # the leading run only
    alloc.share([a])                             # found: back in use, no longer evictable
    assert alloc.ref_count(a) == 1 and alloc.num_free_blocks == 2
    alloc.check_invariants()
    # plain free blocks go first; then the least recently released named one (b)
    assert alloc.allocate(1) == [3]
    assert alloc.allocate(1) == [b] and alloc.lookup([b"A", b"B"]) == [a]
    assert (alloc.num_cache_evictions, alloc.num_cached_blocks) == (1, 1)
    assert not alloc.can_allocate(1)
    alloc.check_invariants()


def test_share_of_a_free_unnamed_block_is_still_refused():
    alloc = BlockAllocator(2)
    (a,) = alloc.allocate(1)
    alloc.cache_block(a, b"A")
    alloc.release([a])
    (b,) = alloc.allocate(1)                     # the plain free one
    alloc.release([b])
    with pytest.raises(AssertionError, match=f"share of free block {b}"):
        alloc.share([b])
    with pytest.raises(AssertionError, match="cache_block of free block"):
        alloc.cache_block(b, b"B")
