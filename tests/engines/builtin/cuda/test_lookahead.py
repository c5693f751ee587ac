"""Launch-ahead of decode graph steps (lookahead.py): the prediction, when it is skipped, and
that results are used only for an identical step -- through the graph path on the CPU
(`capture=False`: the same buffers and padding, replays run eagerly)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
import torch

from parrot.engines.builtin.llama.cascade import split_groups
from parrot.engines.builtin.context import Context, Work, WorkKind
from parrot.engines.builtin.cuda.graphs import DecodeGraphs, DecodeRows, predicted_rows_index
from parrot.engines.builtin.kv_cache import KVCache
from parrot.engines.builtin.cuda.lookahead import finishes, next_rows
from parrot.engines.protocol import FillRequest, GenerateRequest
from parrot.sampling import SamplingParams

BS = 4


def test_next_rows_continues_every_row():
    rows = DecodeRows([7, 8], [4, 9], [20 + 0, 31], [[5, 6], [3, 7, 7]], [5, 10], None)
    nxt = next_rows(rows, [11, 12], BS)
    assert nxt == DecodeRows([11, 12], [5, 10], [21, 32], [[5, 6], [3, 7, 7]], [6, 11], None)
    assert next_rows(DecodeRows([1], [3], [15], [[3]], [4], None), [2], BS) is None  # new block


def test_next_rows_crosses_into_a_reserved_block():
    rows = DecodeRows([7, 8], [3, 9], [5 * BS + 3, 31], [[5], [3, 7, 7]], [4, 10], None)
    assert next_rows(rows, [11, 12], BS) is None                     # row 0 needs block 1
    assert next_rows(rows, [11, 12], BS, [[5], [3, 7, 7]]) is None   # none reserved
    nxt = next_rows(rows, [11, 12], BS, [[5, 9], [3, 7, 7]])
    assert nxt == DecodeRows([11, 12], [4, 10], [9 * BS, 32], [[5, 9], [3, 7, 7]], [5, 11],
                             None)


def test_next_rows_keeps_groups():
    tables, lens = [[5, 6, 7], [5, 6, 8]], [10, 11]
    groups = split_groups(tables, lens, [2], [2], BS)
    rows = DecodeRows([1, 2], [9, 10], [7 * BS + 1, 8 * BS + 2], tables, lens, groups)
    nxt = next_rows(rows, [3, 4], BS)
    assert nxt.groups.suffix_lens == [x + 1 for x in groups.suffix_lens]
    assert nxt.groups.prefix_tables == groups.prefix_tables and nxt.seq_lens == [11, 12]


def test_next_rows_crosses_a_reserved_block_in_a_group():
    tables, lens = [[5, 6, 7], [5, 6, 8]], [12, 10]       # row 0's next token starts block 3
    groups = split_groups(tables, lens, [2], [2], BS)
    rows = DecodeRows([1, 2], [11, 9], [7 * BS + 3, 8 * BS + 1], tables, lens, groups)
    assert next_rows(rows, [3, 4], BS, [[5, 6, 7], [5, 6, 8]]) is None   # none reserved
    nxt = next_rows(rows, [3, 4], BS, [[5, 6, 7, 9], [5, 6, 8]])
    assert nxt.tables == [[5, 6, 7, 9], [5, 6, 8]] and nxt.slots == [9 * BS, 8 * BS + 2]
    # what the runner re-plans for that step: the same groups, row 0's suffix one block longer
    assert nxt.groups == split_groups(nxt.tables, [13, 11], [2], [2], BS)


def test_finishes():
    ctx = Context("c", None)
    ctx.token_ids = [1, 2, 3]
    work = Work(WorkKind.GENERATE, ctx, 1, sampling=SamplingParams(max_tokens=3,
                                                                    stop_token_ids=(9,)))
    eos = frozenset({2})
    assert not finishes(work, 5, eos, 100)
    assert finishes(work, 9, eos, 100)                  # a stop token id
    assert finishes(work, 2, eos, 100)                  # EOS
    assert finishes(work, 5, eos, 4)                    # the window fills up
    work.num_generated = 2
    assert finishes(work, 5, eos, 100)                  # max_tokens
    ignoring = Work(WorkKind.GENERATE, ctx, 2, sampling=SamplingParams(max_tokens=9,
                                                                        ignore_eos=True))
    assert not finishes(ignoring, 2, eos, 100)


def uncaptured_graphs(model, kv, **_) -> DecodeGraphs:
    return DecodeGraphs(model, kv, max_batch=4, max_width=8, capture=False)


def graph_engine(make_engine, bundle, *, launch_ahead: bool = True, **params):
    """(engine, its graphs): the engine as build_engine makes it on CUDA (the graph path, next
    blocks reserved), on graphs that do not capture."""
    engine = make_engine(bundle, decode_graphs=uncaptured_graphs, **params)
    engine.runner.launch_ahead = launch_ahead
    return engine, engine.runner.graphs


def graphs_for(bundle) -> DecodeGraphs:
    kv = KVCache(bundle.shape, 40, BS, bundle.model.dtype, bundle.model.device,
                 scratch_block=True)
    return DecodeGraphs(bundle.model, kv, max_batch=4, max_width=8, capture=False)


def test_a_wrong_prediction_is_not_used(kernel_bundle):
    rows = DecodeRows([5, 6], [4, 5], [10 * BS, 11 * BS + 1], [[1, 10], [2, 11]], [5, 6], None)
    other = DecodeRows([5, 7], [4, 5], [10 * BS, 11 * BS + 1], [[1, 10], [2, 11]], [5, 6], None)
    graphs = graphs_for(kernel_bundle)
    torch.manual_seed(0)
    graphs.kv.data.normal_()
    state = graphs.kv.data.clone()
    expected = graphs.run(other).logits.clone()
    graphs.kv.data.copy_(state)
    graphs.launch_ahead(rows)
    got = graphs.run(other)
    assert graphs.num_ahead_hits == 0
    torch.testing.assert_close(got.logits, expected)
    graphs.launch_ahead(other)
    assert torch.equal(graphs.run(other).logits, got.logits) and graphs.num_ahead_hits == 1
    graphs.launch_ahead(other)
    graphs.drop_ahead()                      # an eager step came in between: never reused
    graphs.run(other)
    assert graphs.num_ahead_hits == 1 and graphs.num_ahead_misses == 2


async def test_an_eager_step_discards_the_prediction(make_engine, kernel_bundle):
    engine, graphs = graph_engine(make_engine, kernel_bundle, block_size=BS)
    runner = engine.runner
    seen = []
    step = runner.step

    def checked(batch):
        eager = any(c.end - c.start > 1 for c in batch.chunks)
        pending, hits, misses = graphs.has_ahead, graphs.num_ahead_hits, graphs.num_ahead_misses
        result = step(batch)
        if eager:   # nothing launched before it is used (a step launched after it may be)
            assert graphs.num_ahead_hits == hits
            assert graphs.num_ahead_misses == misses + pending
            seen.append(pending)
        return result

    runner.step = checked
    await engine.fill(FillRequest("a", token_ids=(1, 2, 3, 4, 5, 6)))
    stream = engine.generate(GenerateRequest("a", sampling=SamplingParams(max_tokens=30,
                                                                         ignore_eos=True)))
    for _ in range(4):
        await anext(stream)
    await engine.fill(FillRequest("b", token_ids=tuple(range(7, 20))))   # prefill steps
    await stream.aclose()
    assert len(seen) >= 2                                # the two fills were checked


async def run_staggered(engine, late: bool) -> list[tuple[int, ...]]:
    await engine.fill(FillRequest("sys", token_ids=tuple(range(10, 31))))
    for i in range(3):
        await engine.fill(FillRequest(f"c{i}", "sys", token_ids=(40 + i, 50 + i)))
    runs = [asyncio.create_task(engine.generate_all(GenerateRequest(
        c, sampling=SamplingParams(max_tokens=n, ignore_eos=True))))
        for c, n in (("c1", 5), ("c2", 12))]
    first: list[int] = []
    async for chunk in engine.generate(GenerateRequest(
            "c0", sampling=SamplingParams(max_tokens=9, ignore_eos=True))):
        first.extend(chunk.token_ids)
        if late and len(first) == 3:   # arrives mid-generation: its fork + prefill break the
            runs.append(asyncio.create_task(engine.generate_all(GenerateRequest(  # prediction
                "late", parent_context_id="sys",
                sampling=SamplingParams(max_tokens=6, ignore_eos=True)))))
    return [tuple(first)] + [r.token_ids for r in await asyncio.gather(*runs)]


@pytest.mark.parametrize("late", [False, True])
async def test_engine_with_launch_ahead_matches_without(make_engine, kernel_bundle, late):
    common = dict(block_size=BS, shared_prefix_min_tokens=8, shared_prefix_min_group=2)
    plain, graphs_plain = graph_engine(make_engine, kernel_bundle, launch_ahead=False,
                                       **common)
    expected = await run_staggered(plain, late)
    engine, graphs = graph_engine(make_engine, kernel_bundle, **common)
    assert await run_staggered(engine, late) == expected
    assert graphs_plain.num_ahead_hits == 0
    assert graphs.num_ahead_hits > 0                     # most steps came from the prediction
    assert not graphs.has_ahead                          # nothing launched past the end
    # the late request's prefill waits one step instead of wasting the launched one
    assert graphs.num_ahead_misses == 0


async def test_prefill_arriving_during_a_launched_step_waits_one_step(make_engine,
                                                                      kernel_bundle):
    """A request arriving while a decode step is launched ahead waits one step: that step is
    the launched one (used: a hit), nothing is launched ahead while its prefill waits, and
    the step after carries the prefill beside the running decode. Without the wait the
    launched step is wasted; launched again while the prefill waits, it would wait until the
    decodes end."""
    engine, graphs = graph_engine(make_engine, kernel_bundle, block_size=BS,
                                  shared_prefix_min_tokens=8, shared_prefix_min_group=2)
    runner = engine.runner
    steps: list[tuple[bool, bool, int, int]] = []   # (launched step pending, has prefill,
    #                                                   hits, decode rows)
    step = runner.step

    def recorded(batch):
        pending = graphs.has_ahead
        prefill = bool(batch.copies) or any(c.end - c.start > 1 for c in batch.chunks)
        result = step(batch)
        steps.append((pending, prefill, graphs.num_ahead_hits,
                      sum(c.end - c.start == 1 for c in batch.chunks)))
        return result

    runner.step = recorded
    await engine.fill(FillRequest("a", token_ids=tuple(range(10, 31))))
    got: list[int] = []
    late = None
    async for chunk in engine.generate(GenerateRequest(
            "a", sampling=SamplingParams(max_tokens=12, ignore_eos=True))):
        got.extend(chunk.token_ids)
        if len(got) == 4:    # mid-generation, a decode step launched ahead
            late = asyncio.create_task(engine.fill(FillRequest("b",
                                                               token_ids=tuple(range(40, 53)))))
    assert late is not None and (await late).num_filled_tokens == 13 and len(got) == 12
    first = next(i for i, step in enumerate(steps) if step[1] and i > 1)
    before, waited, carried = steps[first - 2], steps[first - 1], steps[first]
    assert waited[:2] == (True, False) and waited[2] == before[2] + 1   # used, decodes only
    assert carried[:2] == (False, True) and carried[3] == 1             # beside the decode
    assert graphs.num_ahead_misses == 0


async def test_rows_of_different_lengths_cross_blocks_ahead(make_engine, kernel_bundle):
    """Rows whose next position starts a new block continue into the reserved block."""
    async def run(engine) -> list[tuple[int, ...]]:
        for i, n in enumerate((5, 6, 7, 9)):        # block boundaries at different steps
            await engine.fill(FillRequest(f"r{i}", token_ids=tuple(range(3, 3 + n))))
        params = SamplingParams(max_tokens=14, ignore_eos=True)
        results = await asyncio.gather(*(engine.generate_all(GenerateRequest(f"r{i}",
                                                                             sampling=params))
                                         for i in range(4)))
        engine.check_invariants()
        return [r.token_ids for r in results]

    plain, _ = graph_engine(make_engine, kernel_bundle, launch_ahead=False, block_size=BS)
    expected = await run(plain)
    engine, graphs = graph_engine(make_engine, kernel_bundle, block_size=BS)
    assert await run(engine) == expected
    # 14 tokens: 13 steps after the first, each row crossing a block every 4 steps; all but
    # the last (rows finish) come from the prediction
    assert graphs.num_ahead_hits == 12 and graphs.num_ahead_misses == 0


def test_predicted_rows_index_allows_finished_rows_to_leave():
    p = DecodeRows([5, 6, 7], [4, 5, 9], [40, 45, 61], [[10], [11], [12, 15]], [5, 6, 10], None)
    assert predicted_rows_index(p, p) == [0, 1, 2]
    less = DecodeRows([5, 7], [4, 9], [40, 61], [[10], [12, 15]], [5, 10], None)
    assert predicted_rows_index(p, less) == [0, 2]
    assert predicted_rows_index(p, replace(less, token_ids=[5, 8])) is None     # other token
    assert predicted_rows_index(p, replace(less, slots=[61, 40], token_ids=[7, 5],
                                           positions=[9, 4], seq_lens=[10, 5],
                                           tables=[[12, 15], [10]])) is None   # reordered
    extra = DecodeRows([5, 6, 7, 1], [4, 5, 9, 0], [40, 45, 61, 70], [[10], [11], [12, 15], [17]],
                       [5, 6, 10, 1], None)
    assert predicted_rows_index(p, extra) is None                               # a new row


def test_a_fed_prediction_serves_the_step_less_its_finished_rows(kernel_bundle):
    rows = DecodeRows([5, 6, 7], [4, 5, 6], [10 * BS, 11 * BS + 1, 12 * BS + 2],
                      [[1, 10], [2, 11], [3, 12]], [5, 6, 7], None)
    graphs = graphs_for(kernel_bundle)
    torch.manual_seed(0)
    graphs.kv.data.normal_()
    first = graphs.run(rows)
    greedy = first.greedy.tolist()
    nxt = next_rows(rows, [0, 0, 0], BS)
    state = graphs.kv.data.clone()
    assert graphs.launch_ahead_fed(nxt, first) == greedy      # this step's tokens, read back
    assert graphs.num_ahead_fed == 1
    fed = replace(nxt, token_ids=greedy)
    less = DecodeRows(*(getattr(fed, f)[::2] for f in ("token_ids", "positions", "slots",
                                                        "tables", "seq_lens")), None)
    got = graphs.run(less)                                   # row 1 finished: left out
    assert graphs.num_ahead_hits == 1 and graphs.num_ahead_misses == 0
    graphs.kv.data.copy_(state)
    expected = graphs.run(fed)                               # the full step, run for real
    torch.testing.assert_close(got.logits, expected.logits[::2])
    assert got.greedy.tolist() == expected.greedy[::2].tolist()


async def test_steps_are_queued_before_their_tokens_are_read_greedy_or_sampled(make_engine,
                                                                               kernel_bundle):
    """The fed path serves greedy steps and steps with sampled rows (their tokens drawn on
    the device, each request's uniforms drawn once a token): both give the tokens of an engine
    without launch-ahead."""
    async def run(engine, temperature: float) -> list[tuple[int, ...]]:
        for i, n in enumerate((5, 7)):
            await engine.fill(FillRequest(f"r{i}", token_ids=tuple(range(3, 3 + n))))
        results = await asyncio.gather(*(engine.generate_all(GenerateRequest(
            f"r{i}", sampling=SamplingParams(max_tokens=10, ignore_eos=True, seed=i,
                                             temperature=temperature if i else 0.0)))
            for i in range(2)))
        return [r.token_ids for r in results]

    for temperature in (0.0, 0.8):
        plain, _ = graph_engine(make_engine, kernel_bundle, launch_ahead=False, block_size=BS)
        engine, graphs = graph_engine(make_engine, kernel_bundle, block_size=BS)
        tokens = await run(engine, temperature)
        assert tokens == await run(plain, temperature)
        assert graphs.num_ahead_hits == 8 and graphs.num_ahead_misses == 0
        assert graphs.num_ahead_fed == 8, temperature
        stats = await engine.stats()                  # reported to the manager and /metrics
        assert (stats.counter("ahead_hits"), stats.counter("ahead_misses")) == (8, 0)
    # the sampled run did sample: request 1's tokens differ from its greedy ones
    assert tokens != await run(graph_engine(make_engine, kernel_bundle, block_size=BS)[0], 0.0)


async def test_a_row_ending_on_a_stop_token_leaves_the_fed_prediction(make_engine, kernel_bundle):
    """A stop token is known only once read: the step queued ahead still serves the other
    rows (the finished one is left out), and every token is as without launch-ahead."""
    async def run(engine, stop: tuple[int, ...]) -> list[tuple[int, ...]]:
        for i, n in enumerate((5, 6, 7)):
            await engine.fill(FillRequest(f"r{i}", token_ids=tuple(range(3, 3 + n))))
        results = await asyncio.gather(*(engine.generate_all(GenerateRequest(
            f"r{i}", sampling=SamplingParams(max_tokens=12, ignore_eos=True,
                                             stop_token_ids=stop if i == 1 else ())))
            for i in range(3)))
        return [r.token_ids for r in results]

    probe, _ = graph_engine(make_engine, kernel_bundle, block_size=BS)
    stop = (( await run(probe, ()))[1][4],)                 # row 1's fifth token
    plain, _ = graph_engine(make_engine, kernel_bundle, launch_ahead=False, block_size=BS)
    expected = await run(plain, stop)
    assert len(expected[1]) < 12                            # row 1 did end on it
    engine, graphs = graph_engine(make_engine, kernel_bundle, block_size=BS)
    assert await run(engine, stop) == expected
    # every step but the first of each bucket (captured while running: no warm-up here) came
    # from the prediction, one of them with row 1 left out
    assert graphs.num_ahead_misses == 0 and graphs.num_ahead_partial_hits == 1
    assert graphs.num_ahead_hits == engine.runner.num_graph_steps - graphs.runtime_captures


async def test_rows_that_end_ride_along_in_the_prediction(make_engine, kernel_bundle):
    """A row known to end with its next token (max_tokens) rides along in the step launched
    ahead and the real step leaves it out (a partial hit), so the host's time between the
    steps stays hidden where rows end one after another; only the step after the last, where
    every row ends, is not launched ahead."""
    async def run(engine, tag: str) -> list[tuple[int, ...]]:
        for i in range(3):
            await engine.fill(FillRequest(f"{tag}{i}",
                                          token_ids=tuple(range(3 + i, 9 + 2 * i))))
        results = await asyncio.gather(*(engine.generate_all(GenerateRequest(
            f"{tag}{i}", sampling=SamplingParams(max_tokens=n, ignore_eos=True)))
            for i, n in enumerate((4, 7, 10))))
        engine.check_invariants()
        return [r.token_ids for r in results]

    plain, _ = graph_engine(make_engine, kernel_bundle, launch_ahead=False, block_size=BS)
    expected = await run(plain, "a")
    engine, graphs = graph_engine(make_engine, kernel_bundle, block_size=BS)
    assert await run(engine, "a") == expected     # its buckets of 1-3 rows are made here
    hits, partial, fed = (graphs.num_ahead_hits, graphs.num_ahead_partial_hits,
                          graphs.num_ahead_fed)
    assert await run(engine, "b") == expected
    assert [len(tokens) for tokens in expected] == [4, 7, 10]
    # 10 decode steps: every one after the first from the prediction, two of them the
    # prediction less the row that ended (r0's, then r1's)
    assert (graphs.num_ahead_hits - hits, graphs.num_ahead_partial_hits - partial) == (9, 2)
    assert graphs.num_ahead_fed - fed == 9      # greedy rows: each queued behind its step
    assert graphs.num_ahead_misses == 0 and not graphs.has_ahead


async def test_the_decode_step_after_a_mixed_step_that_ends_a_fill_is_launched_ahead(
        make_engine, kernel_bundle):
    """A Fill that joins a running decode and ends in that mixed step leaves the next step
    predictable (the decodes continue): it is launched ahead right after the mixed step and
    used (a hit), where before a mixed step nothing was, so the step after it exposed the
    host's time. The tokens are those of an engine without launch-ahead."""
    async def run(engine, record=None) -> tuple[tuple[int, ...], int]:
        if record is not None:
            step = engine.runner.step

            def recorded(batch):
                result = step(batch)
                record.append((batch.is_mixed, engine.runner.graphs.has_ahead,
                               engine.runner.graphs.num_ahead_hits))
                return result
            engine.runner.step = recorded
        await engine.fill(FillRequest("a", token_ids=(1, 2, 3, 4, 5, 6)))
        got: list[int] = []
        filled = None
        async for chunk in engine.generate(GenerateRequest(
                "a", sampling=SamplingParams(max_tokens=16, ignore_eos=True))):
            got.extend(chunk.token_ids)
            if len(got) == 4:                      # joins the decode: one mixed step
                filled = asyncio.create_task(engine.fill(FillRequest(
                    "b", token_ids=tuple(range(7, 20)))))
        assert filled is not None and (await filled).num_filled_tokens == 13
        return tuple(got), 0

    plain, _ = graph_engine(make_engine, kernel_bundle, launch_ahead=False, block_size=BS)
    expected, _ = await run(plain)
    engine, graphs = graph_engine(make_engine, kernel_bundle, block_size=BS)
    steps: list[tuple[bool, bool, int]] = []   # (mixed, launched ahead after it, hits)
    assert await run(engine, steps) == (expected, 0)
    mixed = [i for i, step in enumerate(steps) if step[0]]
    assert len(mixed) == 1 and mixed[0] + 1 < len(steps)
    at, after = steps[mixed[0]], steps[mixed[0] + 1]
    assert at[1] and after[2] == at[2] + 1       # launched after the mixed step, then used
    assert graphs.num_ahead_misses == 0
