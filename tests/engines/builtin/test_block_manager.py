"""Fork/release of block tables over the shared block allocator."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from parrot.engines.builtin.block_manager import BlockManager


@dataclass
class Seq:
    block_table: list[int] = field(default_factory=list)
    num_computed: int = 0


def test_fork_shares_full_blocks_and_copies_the_partial_one():
    bm = BlockManager(num_blocks=10, block_size=4)
    parent = Seq()
    bm.grow(parent, 10)                      # 3 blocks
    parent.num_computed = 10                 # 2 full + 2 tokens
    child = Seq()
    bm.fork(parent, child)
    assert child.block_table[:2] == parent.block_table[:2]
    assert child.block_table[2] not in parent.block_table and child.num_computed == 10
    assert [bm.allocator.ref_count(b) for b in parent.block_table] == [2, 2, 2]  # src pinned
    copies = bm.take_copies()
    assert copies == [(parent.block_table[2], child.block_table[2])]
    bm.copies_done(copies)
    assert bm.allocator.ref_count(parent.block_table[2]) == 1
    assert bm.release(parent) == 1          # only the unshared partial block comes back
    assert bm.release(child) == 3
    assert bm.allocator.num_free_blocks == 10
    bm.allocator.check_invariants()


def test_fork_without_a_free_block_recomputes_the_tail():
    bm = BlockManager(num_blocks=3, block_size=4)
    parent = Seq()
    bm.grow(parent, 10)
    parent.num_computed = 10
    child = Seq()
    bm.fork(parent, child)
    assert (child.block_table, child.num_computed) == (parent.block_table[:2], 8)


def test_randomized_grow_fork_release_never_leaks():
    rng = random.Random(5)
    bm = BlockManager(num_blocks=32, block_size=4)
    seqs: list[Seq] = []
    for _ in range(2000):
        op = rng.random()
        if op < 0.4 and seqs:                                  # grow and compute
            s = rng.choice(seqs)
            target = s.num_computed + rng.randrange(1, 9)
            if bm.can_grow(s, target):
                bm.grow(s, target)
                s.num_computed = target
        elif op < 0.6 and seqs:
            child = Seq()
            bm.fork(rng.choice(seqs), child)
            seqs.append(child)
        elif op < 0.8 and seqs:
            bm.release(seqs.pop(rng.randrange(len(seqs))))
        elif op < 0.9:
            seqs.append(Seq())
        else:
            bm.copies_done(bm.take_copies())
        alloc = bm.allocator
        alloc.check_invariants()
        holders = [0] * alloc.num_blocks_total
        for s in seqs:
            for b in s.block_table:
                holders[b] += 1
        for b in bm.pending_copy_sources():
            holders[b] += 1
        assert holders == [alloc.ref_count(b) for b in range(alloc.num_blocks_total)]
    for s in seqs:
        bm.release(s)
    bm.copies_done(bm.take_copies())
    assert bm.allocator.num_free_blocks == 32
