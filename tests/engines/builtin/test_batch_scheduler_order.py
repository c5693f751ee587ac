"""The builtin engine's batch scheduler through its public step (`schedule`), no model needed:
decodes go before prefill chunks, and KV pressure evicts the least recently used idle context."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")  # context.py types a torch.Generator

from parrot.engines.builtin.block_manager import BlockManager  # noqa: E402
from parrot.engines.builtin.channel import Channel  # noqa: E402
from parrot.engines.builtin.context import Context, Work, WorkKind  # noqa: E402
from parrot.engines.builtin.batch_scheduler import BatchScheduler  # noqa: E402

BLOCK = 4


def make_scheduler(num_blocks: int, max_batch_tokens: int = 64) -> BatchScheduler:
    return BatchScheduler(BlockManager(num_blocks, BLOCK), max_batch_tokens=max_batch_tokens,
                     max_num_seqs=8, max_context_len=256, eos_token_ids=(0,))


def computed_context(sched: BatchScheduler, context_id: str, num_tokens: int,
                     last_used: int = 0) -> Context:
    """An idle context at rest: every token but the pending last one is in KV."""
    ctx = Context(context_id, None, token_ids=list(range(1, num_tokens + 1)))
    sched.blocks.grow(ctx, num_tokens - 1)
    ctx.num_computed, ctx.last_used = num_tokens - 1, last_used
    sched.contexts[context_id] = ctx
    return ctx


def add_fill(sched: BatchScheduler, context_id: str, num_tokens: int, seq: int) -> Work:
    ctx = Context(context_id, None)
    sched.contexts[context_id] = ctx
    work = Work(WorkKind.FILL, ctx, seq, new_tokens=list(range(1, num_tokens + 1)))
    sched.add(work)
    return work


def test_a_decode_step_goes_before_an_older_prefill_that_would_eat_the_budget():
    sched = make_scheduler(num_blocks=32, max_batch_tokens=8)
    fill = add_fill(sched, "f", 20, seq=0)                     # older, 19 tokens to compute
    gen_ctx = computed_context(sched, "g", 5)
    gen = Work(WorkKind.GENERATE, gen_ctx, seq=1)
    sched.add(gen)
    batch = sched.schedule()
    assert batch is not None
    assert [(c.work, c.start, c.end, c.sample) for c in batch.chunks] == [
        (gen, 4, 5, True),     # one decode token, sampled
        (fill, 0, 7, False),   # the prefill gets what the decode left of the 8-token budget
    ]
    sched.check_invariants()


def test_kv_pressure_evicts_the_least_recently_used_idle_context():
    sched = make_scheduler(num_blocks=4)
    old = computed_context(sched, "old", 5, last_used=3)        # one block each
    new = computed_context(sched, "new", 5, last_used=7)
    add_fill(sched, "fresh", 10, seq=0)                         # needs 3 blocks, 2 are free
    batch = sched.schedule()
    assert batch is not None and [(c.start, c.end) for c in batch.chunks] == [(0, 9)]
    assert old.block_table == [] and old.num_computed == 0      # evicted: recomputed if used
    assert len(new.block_table) == 1 and new.num_computed == 4  # kept
    sched.check_invariants()


def test_decode_only_leaves_prefill_work_for_the_next_step():
    """While a decode step launched ahead is in flight the engine asks for the decodes alone:
    a waiting Fill is neither started nor chunked (and is reported as waiting), then runs in
    the next normal step; with no decode to run, decode_only schedules the prefill at once."""
    sched = make_scheduler(num_blocks=32)
    gen = Work(WorkKind.GENERATE, computed_context(sched, "g", 5), seq=0)
    sched.add(gen)
    sched.schedule()                     # started: decoding (its step's result not applied)
    assert not sched.has_prefill_work
    fill = add_fill(sched, "f", 6, seq=1)
    assert sched.has_prefill_work
    batch = sched.schedule(decode_only=True)
    assert batch is not None and batch.copies == []
    assert [(c.work, c.start, c.end) for c in batch.chunks] == [(gen, 4, 5)]
    assert not fill.is_started and sched.has_prefill_work
    batch = sched.schedule()
    assert batch is not None and [c.work for c in batch.chunks] == [gen, fill]

    alone = make_scheduler(num_blocks=32)
    only = add_fill(alone, "f", 6, seq=0)
    batch = alone.schedule(decode_only=True)
    assert batch is not None and [c.work for c in batch.chunks] == [only]


def test_a_fill_the_batch_ends_holds_nothing_back_after_it():
    """Once a step has run, a Fill whose last chunk it carried is done: no prefill waits (the
    decode step after it can be launched ahead); a Fill it carried only part of still waits."""
    sched = make_scheduler(num_blocks=32, max_batch_tokens=8)
    gen = Work(WorkKind.GENERATE, computed_context(sched, "g", 5), seq=0)
    sched.add(gen)
    sched.schedule()                                             # decoding
    whole = add_fill(sched, "f", 6, seq=1)
    batch = sched.schedule()
    assert batch is not None and [(c.work, c.end - c.start) for c in batch.chunks] == [
        (gen, 1), (whole, 5)]                                    # all but its pending token
    assert sched.has_prefill_work and not sched.prefill_waits_after(batch)

    sched = make_scheduler(num_blocks=32, max_batch_tokens=8)
    gen = Work(WorkKind.GENERATE, computed_context(sched, "g", 5), seq=0)
    sched.add(gen)
    sched.schedule()
    long = add_fill(sched, "l", 20, seq=1)                       # 7 of its 19 beside g
    batch = sched.schedule()
    assert batch is not None and [(c.work, c.end - c.start) for c in batch.chunks] == [
        (gen, 1), (long, 7)]
    assert sched.prefill_waits_after(batch)                      # its next chunk waits


def test_a_fork_waiting_for_a_busy_parent_is_not_prefill_work():
    sched = make_scheduler(num_blocks=32)
    parent = computed_context(sched, "p", 5)
    sched.add(Work(WorkKind.GENERATE, parent, seq=0))
    sched.schedule()                                             # the parent decodes: busy
    child = Context("c", "p", fork_from=parent)
    parent.num_waiting_children += 1
    sched.contexts["c"] = child
    sched.add(Work(WorkKind.FILL, child, 1, new_tokens=[7, 8, 9]))
    assert parent.is_busy and not sched.has_prefill_work


def test_no_prefill_work_while_the_decodes_take_every_seat():
    """A waiting Fill with no seat left (max_num_seqs decodes) cannot join the next step, so
    it does not hold back launch-ahead."""
    sched = BatchScheduler(BlockManager(64, BLOCK), max_batch_tokens=64, max_num_seqs=2,
                           max_context_len=256, eos_token_ids=(0,))
    for i in range(2):
        sched.add(Work(WorkKind.GENERATE, computed_context(sched, f"g{i}", 5), seq=i))
    sched.schedule()                                             # both decoding
    add_fill(sched, "f", 6, seq=2)
    assert not sched.has_prefill_work
    sched.works[0].fail(RuntimeError("gone"))                    # a seat frees up
    assert sched.has_prefill_work


def test_a_latency_critical_fill_prefills_before_older_throughput_fills():
    sched = make_scheduler(num_blocks=32, max_batch_tokens=8)
    older = add_fill(sched, "bulk", 20, seq=0)
    older.priority = 1                                          # THROUGHPUT_PRIORITY
    urgent = add_fill(sched, "chat", 6, seq=1)                  # LATENCY_PRIORITY (0)
    batch = sched.schedule()
    assert batch is not None
    assert [(c.work, c.start, c.end) for c in batch.chunks] == [
        (urgent, 0, 5),        # the latency-critical prompt first (its last token stays pending)
        (older, 0, 3),         # the older throughput fill gets what is left of the budget
    ]
    sched.check_invariants()


def test_fills_of_one_priority_keep_their_arrival_order():
    sched = make_scheduler(num_blocks=32, max_batch_tokens=8)
    first = add_fill(sched, "a", 6, seq=0)
    second = add_fill(sched, "b", 6, seq=1)
    first.priority = second.priority = 1
    batch = sched.schedule()
    assert batch is not None
    assert [(c.work, c.start, c.end) for c in batch.chunks] == [(first, 0, 5), (second, 0, 3)]


def _decoding(sched: BatchScheduler, context_id: str, num_tokens: int, seq: int) -> Work:
    """A started Generate whose context is computed up to its pending token."""

    from parrot.engines.builtin.detokenizer import TextStream
    from parrot.sampling import SamplingParams
    ctx = computed_context(sched, context_id, num_tokens)
    work = Work(WorkKind.GENERATE, ctx, seq,
                sampling=SamplingParams(max_tokens=100, ignore_eos=True))
    work.chunks = Channel()
    work.is_started, work.stream = True, TextStream(None, ctx.token_ids)
    sched.add(work)
    return work


@pytest.mark.parametrize("prefix_caching", [False, True])
async def test_a_decode_preempted_by_an_older_decode_in_the_same_step_runs_once(prefix_caching):
    """The older decode's next position needs a block and none is free: the newest running
    work (also decoding) gives its blocks back before its own turn. It is then no decode any
    more: it must not run as one, nor twice (as a decode and as a prefill chunk, sampling two
    tokens from one position)."""
    sched = BatchScheduler(BlockManager(4, BLOCK, prefix_caching=prefix_caching),
                           max_batch_tokens=64, max_num_seqs=8, max_context_len=256,
                           eos_token_ids=(0,))
    older = _decoding(sched, "older", 9, seq=1)     # 8 computed: 2 blocks; position 8 needs a 3rd
    newer = _decoding(sched, "newer", 6, seq=2)     # 5 computed: 2 blocks
    batch = sched.schedule()
    assert batch is not None
    runs = [(c.work.context.context_id, c.start, c.end, c.sample) for c in batch.chunks]
    assert runs[0] == ("older", 8, 9, True)
    assert [r[0] for r in runs].count("newer") <= 1, runs
    assert batch.decode_rows == 1                   # only the real decode counts as one
    assert all(c.end - c.start == 1 for c in batch.chunks[:batch.decode_rows])
    sched.postprocess(batch, [7 if c.sample else None for c in batch.chunks])
    assert older.num_generated == 1 and newer.num_generated == 0
    sched.check_invariants()


async def test_past_max_mixed_decode_rows_decodes_and_prefill_take_turns():
    """3 decode rows with max_mixed_decode_rows 2: a waiting Fill is not mixed in; the
    decodes run alone, then the Fill's chunk alone (the budget it would have had beside
    them), in turns, until it is done; then the decodes every step again."""
    import asyncio

    from parrot.engines.builtin.step_budget import StepBudget
    sched = BatchScheduler(BlockManager(64, BLOCK), max_batch_tokens=64, max_num_seqs=8,
                           max_context_len=256, eos_token_ids=(0,),
                           step_budget=StepBudget(64, step_tokens=13),
                           max_mixed_decode_rows=2)
    gens = [_decoding(sched, f"g{i}", 9, seq=i) for i in range(3)]
    fill = add_fill(sched, "fill", 25, seq=9)
    fill.fill_result = asyncio.get_running_loop().create_future()
    kinds = []
    while True:
        batch = sched.schedule()
        assert batch is not None
        decodes = [c for c in batch.chunks if c.work in gens]
        prefill = [c for c in batch.chunks if c.work is fill]
        assert not (decodes and prefill), "mixed"
        assert batch.decode_rows == len(decodes) and not batch.is_mixed
        kinds.append("d" if decodes else f"p{sum(c.end - c.start for c in prefill)}")
        sched.postprocess(batch, [7 if c.sample else None for c in batch.chunks])
        sched.check_invariants()
        if fill.state.is_finished and kinds[-1] == "d":
            break
    # 24 tokens before the pending one, 13 a turn (the budget's floor: step_tokens itself)
    assert kinds == ["d", "p13", "d", "p11", "d"]
    assert all(g.num_generated == 3 for g in gens)


async def test_at_most_max_mixed_decode_rows_steps_still_mix():
    import asyncio

    from parrot.engines.builtin.step_budget import StepBudget
    sched = BatchScheduler(BlockManager(64, BLOCK), max_batch_tokens=64, max_num_seqs=8,
                           max_context_len=256, eos_token_ids=(0,),
                           step_budget=StepBudget(64, step_tokens=13),
                           max_mixed_decode_rows=3)
    [_decoding(sched, f"g{i}", 9, seq=i) for i in range(3)]
    fill = add_fill(sched, "fill", 25, seq=9)
    fill.fill_result = asyncio.get_running_loop().create_future()
    batch = sched.schedule()
    assert batch is not None and batch.is_mixed and batch.prefill_tokens == 13
