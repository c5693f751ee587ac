"""Fork/release of block tables over the shared block allocator."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from parrot.engines.builtin.block_manager import BlockManager


@dataclass
class Seq:
    block_table: list[int] = field(default_factory=list)
    num_computed: int = 0
    num_registered: int = 0
    num_queried: int = 0


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


@dataclass
class TokenSeq(Seq):
    token_ids: list[int] = field(default_factory=list)
    block_digests: list[bytes] = field(default_factory=list)


def computed(bm: BlockManager, tokens: list[int]) -> TokenSeq:
    """A context whose every token but the pending last one was computed."""
    seq = TokenSeq(token_ids=list(tokens))
    bm.reuse_cached(seq)
    bm.grow(seq, len(tokens) - 1)
    seq.num_computed = len(tokens) - 1
    bm.register_computed(seq)
    return seq


def test_prefix_caching_reuses_the_longest_computed_prefix_but_never_the_pending_block():
    bm = BlockManager(num_blocks=16, block_size=4, prefix_caching=True)
    first = computed(bm, list(range(14)))        # 13 computed: blocks 0-2 full and named
    assert bm.allocator.num_cached_blocks == 3
    same_start = TokenSeq(token_ids=list(range(10)) + [99, 98, 97])
    assert bm.reuse_cached(same_start) == 8      # blocks 0-1; block 2 differs at token 10
    assert same_start.block_table == first.block_table[:2]
    assert [bm.allocator.ref_count(b) for b in first.block_table[:3]] == [2, 2, 1]
    whole = TokenSeq(token_ids=list(range(13)))  # pending token 12: block 3's, never reused
    assert bm.reuse_cached(whole) == 12 and whole.block_table == first.block_table[:3]
    exact = TokenSeq(token_ids=list(range(12)))  # pending token 11 sits in block 2
    assert bm.reuse_cached(exact) == 8
    other = TokenSeq(token_ids=[1] + list(range(1, 14)))
    assert bm.reuse_cached(other) == 0 and not other.block_table   # the chain differs
    # looked up: every context's whole blocks before its pending token, the first's too
    assert (bm.cache_query_tokens, bm.cache_hit_tokens) == (12 + 12 + 12 + 8 + 12, 8 + 12 + 8)


def test_a_context_looked_up_again_before_it_holds_blocks_is_counted_once():
    # a miss is looked up again at the context's turn (a twin may have computed it since):
    # the same tokens count once as queried; grown tokens and a context released count again
    bm = BlockManager(num_blocks=16, block_size=4, prefix_caching=True)
    late = TokenSeq(token_ids=list(range(9)))
    assert bm.reuse_cached(late) == 0 and bm.reuse_cached(late) == 0
    assert (bm.cache_query_tokens, bm.cache_hit_tokens) == (8, 0)
    computed(bm, list(range(14)))                # its twin computes blocks 0-2 meanwhile
    late.token_ids.extend(range(9, 13))          # and the context grew to 13 tokens
    assert bm.reuse_cached(late) == 12
    assert (bm.cache_query_tokens, bm.cache_hit_tokens) == (8 + 12 + 4, 12)
    bm.release(late)                             # preempted: its next lookup counts anew
    assert bm.reuse_cached(late) == 12
    assert (bm.cache_query_tokens, bm.cache_hit_tokens) == (8 + 12 + 4 + 12, 24)


def test_a_freed_contexts_prefix_stays_cached_and_is_evicted_tail_first_when_needed():
    bm = BlockManager(num_blocks=5, block_size=4, prefix_caching=True)
    gone = computed(bm, list(range(17)))         # 16 computed: 4 full blocks, all named
    table = list(gone.block_table)
    bm.release(gone)
    assert bm.allocator.num_free_blocks == 5     # cached blocks count as free
    grab = Seq()
    bm.grow(grab, 8)                             # 2 blocks: the plain free one, then table[3]
    assert grab.block_table[1] == table[3]
    again = TokenSeq(token_ids=list(range(17)))
    assert bm.reuse_cached(again) == 12          # the last named block went first
    assert again.block_table == table[:3]
    bm.allocator.check_invariants()


def test_without_prefix_caching_nothing_is_named_or_reused():
    bm = BlockManager(num_blocks=16, block_size=4)
    computed(bm, list(range(14)))
    assert bm.allocator.num_cached_blocks == 0
    assert bm.reuse_cached(TokenSeq(token_ids=list(range(14)))) == 0
    assert bm.cache_query_tokens == 0


def test_a_blocks_name_covers_every_token_before_it():
    """Equal block content after a different prefix is different KV: never reused."""
    bm = BlockManager(num_blocks=16, block_size=4, prefix_caching=True)
    a, b, c = [1, 1, 1, 1], [2, 2, 2, 2], [3, 3, 3, 3]
    after_b = computed(bm, b + c + [0])          # [B, C] named first
    after_a = computed(bm, a + c + [0])          # [A, C]: its C is other KV, named too
    assert after_a.block_table[1] != after_b.block_table[1]
    new = TokenSeq(token_ids=a + c + [9, 9])
    assert bm.reuse_cached(new) == 8 and new.block_table == after_a.block_table[:2]
