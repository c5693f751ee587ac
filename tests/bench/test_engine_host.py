"""bench/bench_engine_host.py: one decode step's host work without a model."""

from __future__ import annotations

import pytest

from tests.bench.scripts import load_script

pytest.importorskip("torch")  # the engine's context types a torch.Generator


async def test_every_step_decodes_every_row_and_hands_each_a_chunk():
    bench = load_script("bench_engine_host")
    sched, works = bench.decoding_scheduler(8, tokenizer=None)
    scheduling_ms, postprocessing_ms = await bench.one_trial(8, 3, tokenizer=None)
    assert scheduling_ms > 0 and postprocessing_ms > 0
    batch = sched.schedule()            # the bench's shape: every row one decode token
    assert batch is not None and batch.decode_rows == len(batch.chunks) == 8
    sched.postprocess(batch, [1000] * 8)
    assert all(len(w.chunks) == 1 and w.num_generated == 1 for w in works)
