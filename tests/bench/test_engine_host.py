"""bench/bench_engine_host.py: one decode step's host work without a model."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from tests.serve_process import ROOT

pytest.importorskip("torch")  # the engine's context types a torch.Generator


def load_bench():
    sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("bench_engine_host",
                                                  ROOT / "bench" / "bench_engine_host.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_engine_host"] = module
    spec.loader.exec_module(module)
    return module


async def test_every_step_decodes_every_row_and_hands_each_a_chunk():
    bench = load_bench()
    sched, works = bench.decoding_scheduler(8, tokenizer=None)
    scheduling_ms, postprocessing_ms = await bench.one_trial(8, 3, tokenizer=None)
    assert scheduling_ms > 0 and postprocessing_ms > 0
    batch = sched.schedule()            # the bench's shape: every row one decode token
    assert batch is not None and batch.decode_rows == len(batch.chunks) == 8
    sched.postprocess(batch, [1000] * 8)
    assert all(len(w.chunks) == 1 and w.num_generated == 1 for w in works)
