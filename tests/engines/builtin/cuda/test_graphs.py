"""CUDA-graph decode: buckets, static-buffer filling and padding, and the graph path end to end
on the CPU with `capture=False` (same buffers, padding and kernel plans; no capture). The
capture itself needs a GPU (bench/bench_engine*.py compare graphs and eager there)."""

from __future__ import annotations

import asyncio

import pytest
import torch

from parrot.engines.builtin.cuda import graphs as graphs_module
from parrot.engines.builtin.llama.cascade import split_groups
from parrot.engines.builtin.config import BuiltinConfigError, BuiltinEngineConfig
from parrot.engines.builtin.cuda.buckets import batch_bucket, width_bucket
from parrot.engines.builtin.cuda.graphs import DecodeGraphs, DecodeRows, graph_key
from parrot.engines.builtin.kv_cache import KVCache
from parrot.engines.protocol import FillRequest, GenerateRequest
from parrot.sampling import SamplingParams

BS = 4


def test_batch_buckets():
    assert [batch_bucket(n, 64) for n in (1, 2, 3, 5, 8, 9, 33, 64)] == [1, 2, 4, 8, 8, 16, 64,
                                                                         64]
    assert batch_bucket(65, 64) is None
    assert batch_bucket(5, 6) == 6 and batch_bucket(6, 6) == 6 and batch_bucket(7, 6) is None


def test_width_buckets():
    assert [width_bucket(w, 256) for w in (0, 1, 3, 33, 200, 256)] == [1, 1, 4, 64, 256, 256]
    assert width_bucket(33, 40) == 40           # capped at the context's block count
    assert width_bucket(3, None) == 4
    assert width_bucket(300, 256) == 300         # over the cap: exact (eager only)


def paged_rows(n: int) -> DecodeRows:
    tables = [[10 + r, 20 + r, 30 + r][:1 + r % 3] for r in range(n)]
    lens = [len(t) * BS - 1 for t in tables]
    return DecodeRows([100 + r for r in range(n)], [x - 1 for x in lens],
                      [t[-1] * BS + (x - 1) % BS for t, x in zip(tables, lens)], tables, lens,
                      None)


def grouped_rows() -> DecodeRows:
    # rows 0-1 share the 2-block prefix [5, 6]; row 2 is alone
    tables = [[5, 6, 7], [5, 6, 8], [9]]
    lens = [10, 11, 2]
    groups = split_groups(tables, lens, [2, 1], [2, 0], BS)
    return DecodeRows([1, 2, 3], [9, 10, 1], [7 * BS + 1, 8 * BS + 2, 9 * BS + 1], tables, lens,
                      groups)


def test_graph_keys():
    assert graph_key(paged_rows(3), 64, 16) == (4, 0, 0, 4)
    assert graph_key(paged_rows(1), 64, 16) == (1, 0, 0, 1)
    assert graph_key(paged_rows(3), 2, 16) is None          # over the largest bucket
    assert graph_key(paged_rows(3), 64, 2) is None          # wider than the context can be
    assert graph_key(grouped_rows(), 64, 16) == (4, 2, 2, 1)


def make_graphs(bundle, num_blocks: int, max_batch: int, max_width: int) -> DecodeGraphs:
    kv = KVCache(bundle.shape, num_blocks, BS, bundle.model.dtype, bundle.model.device,
                 scratch_block=True)
    return DecodeGraphs(bundle.model, kv, max_batch=max_batch, max_width=max_width,
                        capture=False)


def uncaptured_graphs(model, kv, *, max_width: int, max_batch: int) -> DecodeGraphs:
    """build_engine's decode graphs of up to 4 rows, without capture (on the CPU)."""
    return DecodeGraphs(model, kv, max_batch=4, max_width=max_width, capture=False)


def natural_run(bundle, rows: DecodeRows, max_batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A random KV cache and the logits `rows` get in their own bucket (captured on the spot)."""
    torch.manual_seed(0)
    natural = make_graphs(bundle, 40, max_batch, 16)
    natural.kv.data.normal_()
    kv = natural.kv.data.clone()
    logits = natural.run(rows).logits.clone()
    assert natural.num_wider_replays == 0 and natural.runtime_captures == 1
    return kv, logits


def graphs_with(bundle, kv: torch.Tensor | None, max_batch: int, keys) -> DecodeGraphs:
    """Graphs over a copy of `kv` with `keys` captured over padding, as the warm-up does."""
    graphs = make_graphs(bundle, 40, max_batch, 16)
    if kv is not None:
        graphs.kv.data.copy_(kv)
    for k in keys:
        graphs.fill_padding(k)
        graphs.capture(k)
    return graphs


def test_fill_pads_paged_rows(kernel_bundle):
    graphs = make_graphs(kernel_bundle, 40, 8, 16)
    rows = paged_rows(3)
    key = graph_key(rows, 8, 16)
    graphs.fill(rows, key)
    scratch = graphs.scratch_block
    assert scratch == 40
    assert graphs.input_ids[:4].tolist() == [100, 101, 102, 0]
    assert graphs.positions[:4].tolist() == rows.positions + [0]
    assert graphs.slots[:4].tolist() == rows.slots + [scratch * BS]
    assert graphs.tables[:4, :3].tolist() == [[10, 0, 0], [11, 21, 0], [12, 22, 32],
                                              [scratch, 0, 0]]
    assert graphs.seq_lens[:4].tolist() == rows.seq_lens + [1]
    meta = graphs.meta(key)
    assert meta.decode_block_tables.shape == (4, 4) and meta.shared_prefix is None


def test_fill_pads_groups(kernel_bundle):
    graphs = make_graphs(kernel_bundle, 40, 8, 16)
    rows = grouped_rows()
    key = graph_key(rows, 8, 16)
    graphs.fill(rows, key)
    scratch = graphs.scratch_block
    assert graphs.indptr[:3].tolist() == [0, 2, 4]         # the padding row joins group 1
    assert graphs.prefix_lens[:2].tolist() == [2 * BS, 0]
    assert graphs.prefix_tables[:1, :2].tolist() == [[5, 6]]
    assert graphs.tables[:4, :1].tolist() == [[7], [8], [9], [scratch]]
    assert graphs.seq_lens[:4].tolist() == [2, 3, 2, 1]
    # three groups in a bucket of four: one empty padding group before the padding rows' one
    rows3 = DecodeRows(rows.token_ids, rows.positions, rows.slots, rows.tables, rows.seq_lens,
                       split_groups(rows.tables, rows.seq_lens, [1, 1, 1], [0, 0, 0], BS))
    key3 = graph_key(rows3, 8, 16)
    assert key3[:2] == (4, 4)
    graphs.fill(rows3, key3)
    assert graphs.indptr[:5].tolist() == [0, 1, 2, 3, 4]
    assert graphs.prefix_lens[:4].tolist() == [0, 0, 0, 0]
    meta = graphs.meta(key3)
    assert meta.shared_prefix.group_indptr.shape == (5,)
    assert meta.decode_block_tables is None


def test_graph_replays_the_eager_step(kernel_bundle):
    """One padded paged step through the static buffers == the eager kernel-path step."""
    from parrot.engines.builtin.llama.attention import AttentionMetadata

    graphs = make_graphs(kernel_bundle, 40, 8, 16)
    kv = graphs.kv
    torch.manual_seed(0)
    kv.data.normal_()
    before = kv.data.clone()
    rows = paged_rows(3)
    out = graphs.run(rows)
    logits, greedy = out.logits.clone(), out.greedy.clone()
    assert graphs.num_graphs == 1 and graphs.num_replays == 1 and logits.shape[0] == 3
    after_graph = kv.data.clone()
    kv.data.copy_(before)
    meta = AttentionMetadata(
        torch.tensor(rows.slots), 3,
        torch.tensor([t + [0] * (4 - len(t)) for t in rows.tables], dtype=torch.int32),
        torch.tensor(rows.seq_lens, dtype=torch.int32), None, [])
    expected = kernel_bundle.model.forward(torch.tensor(rows.token_ids),
                                           torch.tensor(rows.positions), kv.layers, meta)
    real = torch.ones(kv.num_blocks + 1, dtype=torch.bool)
    real[graphs.scratch_block] = False              # only the padding row wrote there
    # close, not equal: the padded GEMMs (M = 4 vs 3) may round differently
    torch.testing.assert_close(after_graph[:, :, real], kv.data[:, :, real])
    expected_logits = kernel_bundle.model.logits(expected)
    torch.testing.assert_close(logits, expected_logits, rtol=1e-5, atol=1e-5)
    assert greedy.tolist() == expected_logits.argmax(-1).tolist()   # the step's argmax


async def run_forks(engine) -> list[tuple[int, ...]]:
    await engine.fill(FillRequest("sys", token_ids=tuple(range(10, 31))))   # 21 tokens
    for i in range(3):
        await engine.fill(FillRequest(f"c{i}", "sys", token_ids=(40 + i, 50 + i)))
    await engine.fill(FillRequest("lone", token_ids=(7, 8, 9)))
    results = await asyncio.gather(*(
        engine.generate_all(GenerateRequest(c, sampling=SamplingParams(max_tokens=n,
                                                                       ignore_eos=True)))
        for c, n in (("c0", 6), ("lone", 3), ("c1", 5), ("c2", 6))))   # 4 -> 3 -> 2 rows
    return [r.token_ids for r in results]


async def test_engine_with_graphs_matches_eager(make_engine, kernel_bundle):
    common = dict(block_size=BS, shared_prefix_min_tokens=8, shared_prefix_min_group=2,
                  num_blocks=64)
    eager = make_engine(kernel_bundle, **common)
    expected = await run_forks(eager)
    engine = make_engine(kernel_bundle, decode_graphs=uncaptured_graphs, **common)
    graphs = engine.runner.graphs
    assert await run_forks(engine) == expected
    # the stats tell graph steps from eager ones (prefill steps are always eager)
    stats, eager_stats = await engine.stats(), await eager.stats()
    assert eager_stats.counter("num_graph_steps") == 0 and eager_stats.counter("num_steps") > 0
    assert 0 < stats.counter("num_graph_steps") == graphs.num_replays < stats.counter("num_steps")
    assert eager_stats.counter("graph_step_ms") == 0
    assert 0 < stats.counter("graph_step_ms") < stats.counter("step_ms")
    assert graphs.num_replays > 0
    assert any(key[1] for key in graphs.captured_keys)          # a shared-prefix bucket ran
    assert any(key[0] > 1 for key in graphs.captured_keys)


def test_config_keys():
    assert BuiltinEngineConfig().cuda_graphs is True
    with pytest.raises(BuiltinConfigError, match="cuda_graphs"):
        BuiltinEngineConfig(cuda_graphs="yes")
    with pytest.raises(BuiltinConfigError, match="cuda_graph_max_batch"):
        BuiltinEngineConfig(cuda_graph_max_batch=0)


def test_cpu_engine_has_no_graphs(make_engine, tiny_bundle):
    engine = make_engine(tiny_bundle)
    assert engine.runner.graphs is None and engine.runner.kv.scratch_block is None


def test_captures_while_serving_are_counted(kernel_bundle):
    """A step whose bucket the warm-up did not capture is captured on the spot (a stall):
    counted and timed for EngineStats; replays and warm-up captures are not."""
    graphs = make_graphs(kernel_bundle, 40, 8, 16)
    rows = paged_rows(3)
    graphs.capture(graph_key(paged_rows(1), 8, 16))                 # as the warm-up does
    assert graphs.runtime_captures == 0
    graphs.run(rows)
    graphs.run(rows)
    assert graphs.runtime_captures == 1 and graphs.runtime_capture_s > 0


def test_a_shared_prefix_step_replays_a_captured_wider_bucket(kernel_bundle):
    """A shared-prefix step whose own bucket is not captured runs in a captured one up to twice
    as wide in batch, groups and tables (no capture while serving), with the natural bucket's
    result; past twice as wide it is captured on the spot."""
    rows = grouped_rows()
    key = graph_key(rows, 8, 16)                                     # (4, 2, 2, 1)
    kv_before, expected_logits = natural_run(kernel_bundle, rows, 8)
    wider = (4, 4, 4, 2)
    # besides it: too wide in a table, a smaller batch
    graphs = graphs_with(kernel_bundle, kv_before, 8, (wider, (4, 4, 8, 1), (2, 2, 2, 1)))
    out = graphs.run(rows)
    assert graphs.runtime_captures == 0 and graphs.num_wider_replays == 1
    assert graphs.num_graphs == 3 and key not in graphs.captured_keys
    torch.testing.assert_close(out.logits, expected_logits, rtol=1e-4, atol=1e-4)
    assert out.greedy.tolist() == expected_logits.argmax(-1).tolist()
    # the wider bucket's padding groups are empty and its extra table columns never read
    assert graphs.indptr[:5].tolist() == [0, 2, 3, 3, 4]

    # a bucket of twice the batch serves too (its padding rows join the last group), one of
    # its own batch first
    graphs.fill_padding((8, 2, 2, 1))
    graphs.capture((8, 2, 2, 1))
    assert graphs.narrowest_wider(key) == wider
    graphs.release(wider)
    assert graphs.narrowest_wider(key) == (8, 2, 2, 1)
    out = graphs.run(rows)
    assert graphs.runtime_captures == 0 and graphs.num_wider_replays == 2
    torch.testing.assert_close(out.logits, expected_logits, rtol=1e-4, atol=1e-4)
    assert graphs.indptr[:3].tolist() == [0, 2, 8]

    # only (4, 4, 8, 1) is left: its prefix table is 4x as wide, so the own is captured
    graphs.release((8, 2, 2, 1))
    graphs.run(rows)
    assert graphs.runtime_captures == 1 and key in graphs.captured_keys


def test_a_shared_prefix_step_with_no_near_bucket_replays_a_stopgap_then_its_own(
        kernel_bundle, monkeypatch):
    """No captured bucket within twice its size: the step replays a stopgap (any larger
    batch and group count, tables within twice), fewest groups first, with the natural
    bucket's result, for its bucket's first STOPGAP_STEPS steps, launched ahead or not;
    then its own bucket is captured."""
    monkeypatch.setattr(graphs_module, "STOPGAP_STEPS", 3)
    rows = grouped_rows()
    key = graph_key(rows, 16, 16)                                    # (4, 2, 2, 1)
    kv_before, expected_logits = natural_run(kernel_bundle, rows, 16)
    # (16, 1): too few groups; (16, 8, 8, 1): prefix table 4x as wide; (8, 8) and (16, 4)
    # hold it but are over twice its batch or groups, so they are stopgaps, not near ones
    graphs = graphs_with(kernel_bundle, kv_before, 16,
                         ((16, 1, 2, 1), (16, 8, 8, 1), (8, 8, 2, 1), (16, 4, 2, 1)))
    for _ in range(2):
        out = graphs.run(rows)
        torch.testing.assert_close(out.logits, expected_logits, rtol=1e-4, atol=1e-4)
    assert graphs.indptr[:5].tolist() == [0, 2, 3, 3, 16]           # in (16, 4, 2, 1)
    graphs.launch_ahead(rows)                                        # the third stopgap step
    out = graphs.run(rows)
    torch.testing.assert_close(out.logits, expected_logits, rtol=1e-4, atol=1e-4)
    assert graphs.num_ahead_hits == 1
    assert graphs.runtime_captures == 0 and graphs.num_stopgap_replays == 3
    assert key not in graphs.captured_keys
    graphs.launch_ahead(rows)                    # the stopgap is spent: no launch ahead
    assert not graphs.has_ahead
    out = graphs.run(rows)                                           # its own, captured
    assert graphs.runtime_captures == 1 and key in graphs.captured_keys
    torch.testing.assert_close(out.logits, expected_logits, rtol=1e-4, atol=1e-4)
    graphs.run(rows)
    assert graphs.runtime_captures == 1 and graphs.num_stopgap_replays == 3
    assert graphs.indptr[:3].tolist() == [0, 2, 4]                  # in its own bucket

    # with no bucket of enough groups and tables at most twice as wide, none is a stopgap
    other = graphs_with(kernel_bundle, None, 16, ((16, 1, 2, 1), (16, 8, 8, 1), (16, 8, 2, 4)))
    other.run(rows)
    assert other.runtime_captures == 1 and other.num_stopgap_replays == 0


def test_a_bucket_past_64_rows_replays_the_eager_step(kernel_bundle):
    """Graph buckets reach 256 rows (max_num_seqs auto on a large GPU): 65 decode rows pad to
    the 128-row bucket and give the eager kernel-path step's logits and greedy tokens (the
    256-row bucket is the same code with more rows; the interpreter runs it in minutes)."""
    from parrot.engines.builtin.llama.attention import AttentionMetadata
    from parrot.engines.builtin.sizing import batch_buckets

    assert batch_buckets(256)[-2:] == [128, 256] and batch_bucket(130, 256) == 256
    n = 65
    graphs = make_graphs(kernel_bundle, n + 8, 256, 2)
    kv = graphs.kv
    torch.manual_seed(1)
    kv.data.normal_()
    before = kv.data.clone()
    tables = [[r] for r in range(n)]                        # one block each, 1-4 tokens
    lens = [1 + r % BS for r in range(n)]
    rows = DecodeRows([100 + r for r in range(n)], [x - 1 for x in lens],
                      [r * BS + x - 1 for r, x in enumerate(lens)], tables, lens, None)
    out = graphs.run(rows)
    assert out is not None and graphs.num_replays == 1 and graphs.captured_keys == [
        (128, 0, 0, 1)]
    logits = out.logits.clone()
    kv.data.copy_(before)
    meta = AttentionMetadata(torch.tensor(rows.slots), n,
                             torch.tensor(tables, dtype=torch.int32),
                             torch.tensor(lens, dtype=torch.int32), None, [])
    expected = kernel_bundle.model.logits(kernel_bundle.model.forward(
        torch.tensor(rows.token_ids), torch.tensor(rows.positions), kv.layers, meta))
    torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-5)
    assert out.greedy.tolist() == expected.argmax(-1).tolist()


def test_a_deferred_bucket_a_step_captured_is_not_captured_again(kernel_bundle):
    graphs = make_graphs(kernel_bundle, 40, 8, 16)
    graphs.deferred = [(4, 0, 0, 4), (8, 0, 0, 4)]
    assert graphs.run(paged_rows(3)) is not None          # its bucket (4, 0, 0, 4), on the spot
    assert graphs.runtime_captures == 1
    assert graphs.capture_deferred() is False             # skips it, captures (8, 0, 0, 4)
    assert graphs.idle_captures == 1 and graphs.deferred == []
    assert set(graphs.captured_keys) == {(4, 0, 0, 4), (8, 0, 0, 4)}
