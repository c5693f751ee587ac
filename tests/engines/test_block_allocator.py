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
