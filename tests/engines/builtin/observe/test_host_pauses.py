"""The process's pauses (host_pauses.py): Triton compilations through Triton's own compile
hooks and garbage collections, counted per step in the engine's stats and step trace."""

from __future__ import annotations

import gc
import logging
import time
from types import SimpleNamespace

import pytest

from parrot.engines.builtin.observe.host_pauses import PauseMonitor, PauseTotals, pause_monitor
from parrot.engines.builtin.runner import ModelRunner
from parrot.engines.builtin.observe.step_trace import read_trace
from parrot.engines.protocol import EngineStats, GenerateRequest, FillRequest
from parrot.sampling import SamplingParams

knobs = pytest.importorskip("triton.knobs")


def compile_as_triton_does(name: str, seconds: float) -> None:
    """What Triton's JITFunction does on a cache miss: the cache hook, the compilation, the
    post-compile hook (keyword arguments as triton.runtime.jit calls them)."""
    fn = SimpleNamespace(module="kernels._jit_decode", name=name)
    knobs.runtime.jit_cache_hook(key="k", repr=f"{name}[num_warps=4]", fn=fn, compile={},
                                 is_manual_warmup=False, already_compiled=False)
    time.sleep(seconds)
    knobs.runtime.jit_post_compile_hook(key="k", repr=f"{name}[num_warps=4]", fn=fn,
                                        compile={}, is_manual_warmup=False,
                                        already_compiled=False)


def test_totals_subtract_field_by_field():
    assert PauseTotals(5, 1.5, 9, 0.25) - PauseTotals(2, 0.5, 4, 0.125) == \
        PauseTotals(3, 1.0, 5, 0.125)


def test_garbage_collections_are_counted_with_their_time():
    monitor = PauseMonitor()
    monitor.install_gc()
    try:
        before = monitor.totals()
        gc.collect()
        done = monitor.totals() - before
    finally:
        gc.callbacks.remove(monitor.on_gc)
    assert done.gc_collections >= 1 and done.gc_s > 0
    assert done.jit_compiles == 0


def test_compile_hooks_count_and_keep_the_previous_hooks_answer(monkeypatch):
    asked = []

    def previous_cache_hook(**kwargs):
        asked.append(kwargs["fn"].name)
        return True          # its owner asks Triton to skip the compilation: that must stand

    monkeypatch.setattr(knobs.runtime, "jit_cache_hook", previous_cache_hook)
    monkeypatch.setattr(knobs.runtime, "jit_post_compile_hook", None)
    monitor = PauseMonitor()
    assert monitor.install_triton() and monitor.install_triton()     # the second: no-op
    fn = SimpleNamespace(name="_decode_partial_kernel")
    assert knobs.runtime.jit_cache_hook(fn=fn, repr="r") is True
    assert asked == ["_decode_partial_kernel"]                        # chained once, not twice
    time.sleep(0.01)
    assert knobs.runtime.jit_post_compile_hook(fn=fn, repr="r") is None
    totals = monitor.totals()
    assert totals.jit_compiles == 1 and totals.jit_s >= 0.01
    assert list(monitor.recent_compiles) == ["_decode_partial_kernel"]


class CompilingRunner(ModelRunner):
    """A runner whose third step meets a kernel specialisation never compiled, and collects
    garbage."""

    steps = 0

    def step(self, batch):
        CompilingRunner.steps += 1
        if CompilingRunner.steps == 3:
            compile_as_triton_does("_paged_prefill_kernel", 0.03)
            gc.collect()
        return super().step(batch)


async def test_a_compile_inside_a_step_is_counted_traced_and_named(tiny_bundle, make_engine,
                                                                    tmp_path, caplog):
    pause_monitor(triton=True)        # the process's monitor, with Triton's hooks, as on a GPU
    CompilingRunner.steps = 0
    engine = make_engine(tiny_bundle, block_size=4, runner_type=CompilingRunner,
                         step_trace=str(tmp_path / "t.jsonl"))
    await engine.fill(FillRequest("a", token_ids=tuple(range(10, 31))))
    with caplog.at_level(logging.WARNING):
        await engine.generate_all(GenerateRequest("a", sampling=SamplingParams(
            max_tokens=4, ignore_eos=True)))
    stats = await engine.stats()
    await engine.close()
    assert stats.counter("jit_compiles_at_runtime") == 1
    assert stats.counter("jit_compile_ms_at_runtime") >= 30
    assert stats.counter("gc_collections") >= 1 and stats.counter("gc_ms") >= 0
    assert EngineStats.from_wire(stats.to_wire()) == stats
    records = read_trace(tmp_path / "t.jsonl")
    assert [r.jit_compiles for r in records] == [0, 0, 1] + [0] * (len(records) - 3)
    assert records[2].jit_ms >= 30 and records[2].gc_ms > 0
    assert records[2].step_ms >= records[2].jit_ms
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("1 Triton compilation(s) inside one eager step" in w
               and w.endswith("latest: _paged_prefill_kernel") for w in warnings)


async def test_an_engine_counts_only_what_happens_after_it_is_built(tiny_bundle, make_engine):
    monitor = pause_monitor(triton=True)
    compile_as_triton_does("_before_the_engine", 0.0)       # a warm-up's compilation
    engine = make_engine(tiny_bundle, block_size=4)
    await engine.fill(FillRequest("a", token_ids=(1, 2, 3)))
    stats = await engine.stats()
    assert stats.counter("jit_compiles_at_runtime") == 0
    assert monitor.totals().jit_compiles >= 1


def test_a_triton_without_compile_hooks_is_warned_about_once(monkeypatch, caplog):
    import triton

    monkeypatch.setattr(triton, "knobs", SimpleNamespace(runtime=SimpleNamespace()))
    monitor = PauseMonitor()
    with caplog.at_level(logging.WARNING):
        assert not monitor.install_triton()
        assert not monitor.install_triton()       # a second engine of the process: no repeat
    assert [r.getMessage().endswith("compilations while serving are not counted")
            for r in caplog.records] == [True]
    assert monitor.totals().jit_compiles == 0
