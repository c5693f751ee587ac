"""The engine's step trace (step_trace.py): one record per model step, with its shape,
timing and path, matching what the engine's counters say it did."""

from __future__ import annotations

import asyncio

import pytest

from parrot.engines.builtin.llama.cascade import GroupedRows
from parrot.engines.builtin.config import BuiltinConfigError, BuiltinEngineConfig
from parrot.engines.builtin.batch_scheduler import Batch, ScheduledChunk
from parrot.engines.builtin.observe.step_trace import read_trace, step_shape
from parrot.engines.protocol import FillRequest, GenerateRequest
from parrot.sampling import SamplingParams


def chunk(start: int, end: int) -> ScheduledChunk:
    return ScheduledChunk(work=None, start=start, end=end, token_ids=[1] * (end - start),  # type: ignore[arg-type]
                          block_table=[], sample=True)


def test_shape_counts_decodes_prefills_and_what_a_shared_prefix_saves():
    batch = Batch([chunk(40, 41), chunk(50, 51), chunk(60, 61), chunk(9, 10), chunk(0, 30)], [])
    # rows 0-2 share 32 prefix tokens, row 3 is alone in its own group
    groups = GroupedRows(indptr=[0, 3, 4], prefix_tables=[[0, 1], []], prefix_lens=[32, 0],
                         suffix_tables=[[], [], [], []], suffix_lens=[9, 19, 29, 10])
    assert step_shape(batch, groups) == {
        "decode_rows": 4, "kv_tokens": 41 + 51 + 61 + 10, "shared_saved_tokens": 2 * 32,
        "shared_groups": 2, "prefill_chunks": 1, "prefill_tokens": 30}
    assert step_shape(batch, None)["shared_saved_tokens"] == 0


def test_config_names_the_file_per_engine(tmp_path):
    config = BuiltinEngineConfig(step_trace=str(tmp_path / "trace-{engine}.jsonl"))
    assert config.step_trace_path("e1") == tmp_path / "trace-e1.jsonl"
    assert BuiltinEngineConfig().step_trace_path("e1") is None
    with pytest.raises(BuiltinConfigError, match="step_trace"):
        BuiltinEngineConfig(step_trace="")


async def test_every_step_is_traced_with_its_shape(tiny_bundle, make_engine, tmp_path):
    engine = make_engine(tiny_bundle, block_size=4, step_trace=str(tmp_path / "{engine}.jsonl"))
    await engine.fill(FillRequest("a", token_ids=tuple(range(10, 31))))      # 21 tokens
    await engine.fill(FillRequest("b", token_ids=tuple(range(40, 45))))       # 5 tokens
    params = SamplingParams(max_tokens=4, ignore_eos=True)
    await asyncio.gather(*(engine.generate_all(GenerateRequest(c, sampling=params))
                           for c in ("a", "b")))
    stats = await engine.stats()
    await engine.close()
    records = read_trace(tmp_path / "test.jsonl")
    assert len(records) == stats.counter("num_steps")
    # a Fill leaves its last token to the first decode step, which samples from it
    assert sum(r.prefill_tokens for r in records) == stats.counter("prefill_tokens") == 20 + 4
    assert sum(r.decode_rows for r in records) == stats.counter("decode_tokens")
    assert [r.path for r in records] == ["eager"] * len(records)       # the CPU: no graphs
    decodes = [r for r in records if r.decode_rows == 2]
    # both rows decode together, over contexts of 21 + k and 5 + k tokens
    assert [r.kv_tokens for r in decodes][-3:] == [(21 + k) + (5 + k) for k in (1, 2, 3)]
    assert all(r.step_ms > 0 and r.sched_ms >= 0 and r.post_ms >= 0 for r in records)
    assert sorted(r.t for r in records) == [r.t for r in records]
    assert sum(r.iteration_ms for r in records) == pytest.approx(stats.counter("loop_ms"), abs=5)


async def test_shared_prefix_steps_record_the_tokens_read_once(kernel_bundle, make_engine,
                                                                tmp_path):
    engine = make_engine(kernel_bundle, block_size=4, shared_prefix_min_tokens=8,
                         shared_prefix_min_group=2, step_trace=str(tmp_path / "t.jsonl"))
    await engine.fill(FillRequest("sys", token_ids=tuple(range(10, 31))))    # 21 tokens
    for i in range(3):
        await engine.fill(FillRequest(f"c{i}", "sys", token_ids=(40 + i, 50 + i)))
    params = SamplingParams(max_tokens=3, ignore_eos=True)
    await asyncio.gather(*(engine.generate_all(GenerateRequest(f"c{i}", sampling=params))
                           for i in range(3)))
    await engine.close()
    grouped = [r for r in read_trace(tmp_path / "t.jsonl") if r.shared_groups]
    assert grouped
    for r in grouped:    # three forks of 20 shared tokens (5 full blocks): two of them saved
        assert (r.decode_rows, r.shared_groups, r.shared_saved_tokens) == (3, 1, 2 * 20)
        assert r.unique_kv_tokens == r.kv_tokens - 40


def test_a_trace_that_cannot_be_written_stops_without_raising(tmp_path, caplog):
    from parrot.engines.builtin.observe.step_trace import StepRecord, StepTrace

    class Full:
        def write(self, text):
            raise OSError(28, "No space left on device")

        def flush(self):
            raise OSError(28, "No space left on device")

        def close(self):
            pass

    trace = StepTrace(tmp_path / "t.jsonl", open_file=lambda path: Full())
    record = StepRecord(t=0.0, idle_ms=0.0, sched_ms=0.0, step_ms=1.0, post_ms=0.0, path="eager",
                        ahead_hit=False, ahead_miss=False, decode_rows=1, kv_tokens=1,
                        shared_saved_tokens=0, shared_groups=0, prefill_chunks=0,
                        prefill_tokens=0)
    trace.write(record)              # logged once, then tracing stops
    trace.write(record)
    trace.flush()
    trace.close()
    assert [r.getMessage() for r in caplog.records].count(
        f"step trace {tmp_path / 't.jsonl'}: writing failed ([Errno 28] No space left on device);"
        " tracing stops") == 1
