"""Stall-free batching: the step budget's rule (step_budget.py), and the batch scheduler under
it: a long prompt is split into chunks that join the running decodes, no step exceeds the
budget, and every decode runs in every step."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("torch")  # context.py types a torch.Generator

from parrot.engines.builtin.block_manager import BlockManager  # noqa: E402
from parrot.engines.builtin.channel import Channel  # noqa: E402
from parrot.engines.builtin.context import Context, Work, WorkKind  # noqa: E402
from parrot.engines.builtin.batch_scheduler import BatchScheduler  # noqa: E402
from parrot.engines.builtin.step_budget import (MIN_PREFILL_TOKENS,  # noqa: E402
                                                StepBudget)
from parrot.sampling import SamplingParams  # noqa: E402
from parrot.speed_profile import SpeedProfile  # noqa: E402

# decode: 10 ms empty, +1 ms per 1,000 context tokens; prefill 0.02 ms a token
PROFILE = SpeedProfile(0.02, ((0, 10.0), (100_000, 110.0)))
# decode 10 ms whatever the context; prefill 1/64 ms a token (exact in binary)
FLAT = SpeedProfile(1 / 64, ((0, 10.0), (100_000, 10.0)))


def test_no_decode_rows_take_the_whole_step():
    for budget in (StepBudget(4096), StepBudget(4096, step_tokens=256),
                   StepBudget(4096, profile=PROFILE)):
        assert budget.prefill_tokens(0, 0) == 4096


def test_a_fixed_budget_counts_decodes_and_prefill():
    budget = StepBudget(4096, step_tokens=512)
    assert budget.mode == "fixed"
    assert budget.prefill_tokens(1, 100) == 511
    assert budget.prefill_tokens(256, 10**6) == 256
    # decodes alone over the budget: prompts still advance by the floor
    assert budget.prefill_tokens(600, 0) == MIN_PREFILL_TOKENS
    assert StepBudget(4096, step_tokens=16).prefill_tokens(40, 0) == 16   # below the floor


def test_auto_prices_the_step_against_the_itl_target():
    budget = StepBudget(8192, itl_target_ms=50.0, profile=PROFILE)
    assert budget.mode == "itl"
    assert budget.prefill_tokens(1, 0) == 2000             # (50 - 10) / 0.02
    assert budget.prefill_tokens(64, 20_000) == 1000        # (50 - 30) / 0.02: more KV, less
    assert budget.prefill_tokens(256, 100_000) == MIN_PREFILL_TOKENS   # decode alone is over
    assert StepBudget(1024, profile=PROFILE).prefill_tokens(24, 0) == 1000   # the hard cap
    # the floor never breaks the hard cap either
    assert StepBudget(100, profile=PROFILE).prefill_tokens(90, 100_000) == 10


def test_auto_without_a_profile_keeps_max_batch_tokens():
    budget = StepBudget(2048)
    assert budget.mode == "unbounded" and budget.prefill_tokens(10, 50_000) == 2038
    assert budget.with_profile(PROFILE).mode == "itl"
    assert "ITL target 50 ms" in budget.with_profile(PROFILE).describe()


def test_bad_budgets_are_refused():
    for kwargs in ({"step_tokens": 0}, {"itl_target_ms": 0.0}):
        with pytest.raises(ValueError):
            StepBudget(64, **kwargs)


def _generate(sched: BatchScheduler, context_id: str, num_tokens: int, seq: int) -> Work:
    """A Generate on a computed context (every token but the pending last one in KV)."""
    ctx = Context(context_id, None, token_ids=list(range(1, num_tokens + 1)))
    sched.blocks.grow(ctx, num_tokens - 1)
    ctx.num_computed = num_tokens - 1
    sched.contexts[context_id] = ctx
    work = Work(WorkKind.GENERATE, ctx, seq, sampling=SamplingParams(max_tokens=1000,
                                                                      ignore_eos=True))
    work.chunks = Channel()
    sched.add(work)
    return work


@pytest.mark.parametrize("budget", [StepBudget(4096, step_tokens=80),
                                    StepBudget(4096, itl_target_ms=11.5625, profile=FLAT)])
async def test_a_long_prompt_is_chunked_beside_decodes_that_run_every_step(budget):
    block = 4
    sched = BatchScheduler(BlockManager(512, block), max_batch_tokens=4096, max_num_seqs=16,
                           max_context_len=1024, eos_token_ids=(0,), step_budget=budget)
    gens = [_generate(sched, f"g{i}", 9, seq=i) for i in range(3)]
    ctx = Context("long", None)
    sched.contexts["long"] = ctx
    fill = Work(WorkKind.FILL, ctx, 3, new_tokens=list(range(1, 301)))
    fill.fill_result = asyncio.get_running_loop().create_future()
    sched.add(fill)
    # fixed: 80 tokens less 3 decodes; auto: (11.5625 ms - the 10-ms decode step) / (1/64) ms
    per_step = 77 if budget.mode == "fixed" else 100
    chunks = []
    while not fill.state.is_finished:
        batch = sched.schedule()
        assert batch is not None
        decodes = [c for c in batch.chunks if c.end - c.start == 1]
        prefill = [c for c in batch.chunks if c.end - c.start > 1]
        assert [c.work for c in decodes] == gens                   # every stream, every step
        # what the budget priced: the decodes, the context they attend, the prefill beside
        assert (batch.decode_rows, batch.decode_kv_tokens, batch.prefill_tokens) == (
            3, sum(c.end for c in decodes), sum(c.end - c.start for c in prefill))
        assert batch.is_mixed
        assert sum(c.end - c.start for c in prefill) <= budget.prefill_tokens(
            3, sum(c.end for c in decodes))
        if budget.step_tokens is not None:
            assert batch.num_tokens <= budget.step_tokens
        chunks += [(c.start, c.end) for c in prefill]
        sched.postprocess(batch, [7 if c.sample else None for c in batch.chunks])
        sched.check_invariants()
    # the 299 tokens before the pending one, in consecutive chunks of the budget
    assert chunks == [(s, min(s + per_step, 299)) for s in range(0, 299, per_step)]
    assert all(g.num_generated == len(chunks) for g in gens)


