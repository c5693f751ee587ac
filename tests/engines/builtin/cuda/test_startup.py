"""Start-up: the attention backend is never a silent slow path, the start-up line names what
runs, and the warm-up captures every paged bucket without touching the KV cache."""

from __future__ import annotations

import asyncio
import dataclasses
import logging

import pytest
import torch

from parrot.engines.builtin.llama.attention import (KernelsUnavailableError, choose_backend,
                                                    make_decode_fn)
from parrot.engines.builtin.build import load_bundle
from parrot.engines.builtin.config import BuiltinConfigError, BuiltinEngineConfig
from parrot.engines.builtin.cuda.graphs import DecodeGraphs
from parrot.engines.builtin.kv_cache import KVCache
from parrot.engines.builtin.sizing import ServingSize
from parrot.engines.builtin.cuda.buckets import (covering_widths, paged_keys, shared_keys,
                                                 stopgap_keys, width_buckets)
from parrot.engines.builtin.cuda.warmup import warm_up

SIZE = ServingSize(num_blocks=8, block_size=4, max_num_seqs=64, graph_max_batch=64,
                   kv_source="num_blocks", seqs_source="config")


def test_backend_choice():
    assert choose_backend("auto", "cuda", True) == "triton"
    assert choose_backend("triton", "cuda", True) == "triton"
    assert choose_backend("torch", "cuda", True) == "torch"
    assert choose_backend("torch", "cuda", False) == "torch"      # asked for: allowed
    assert choose_backend("auto", "cpu", True) == "torch"
    assert choose_backend("auto", "cpu", False) == "torch"
    with pytest.raises(KernelsUnavailableError, match="attention_backend: torch"):
        choose_backend("auto", "cuda", False)                    # never silently slow
    with pytest.raises(KernelsUnavailableError):
        choose_backend("triton", "cuda", False)
    with pytest.raises(KernelsUnavailableError, match="needs a CUDA device"):
        choose_backend("triton", "cpu", True)


def test_triton_on_cpu_is_a_config_error():
    with pytest.raises(BuiltinConfigError, match="CUDA"):
        load_bundle(BuiltinEngineConfig(model="tiny", device="cpu", attention_backend="triton"))


def test_startup_line_names_the_paths(make_engine, tiny_bundle, caplog):
    with caplog.at_level(logging.INFO, logger="parrot.engines.builtin.build"):
        make_engine(tiny_bundle)
    [line] = [r.getMessage() for r in caplog.records if "builtin engine" in r.getMessage()]
    assert "on cpu" in line and "dtype float64" in line and "attention torch" in line
    assert "unfused layer ops" in line and "CUDA graphs off" in line and "no warm-up" in line
    assert "linear layers torch," in line


def test_startup_line_names_the_small_batch_kernels():
    import parrot_kernels
    from parrot.engines.builtin.build import startup_summary

    # its own bundle: the session's tiny_bundle must stay on the torch path for later tests
    bundle = load_bundle(BuiltinEngineConfig(model="tiny", dtype="float32", device="cpu",
                                             num_blocks=8))
    bundle.model.use_fused(parrot_kernels, small_batch_gemv=True)
    line = startup_summary("e", bundle, SIZE, None, None, None)
    assert "fused layer ops" in line and "linear layers small-batch kernels to 16 rows" in line


def test_config_keys():
    config = BuiltinEngineConfig()
    assert config.fused_ops is True and config.warmup is True
    assert config.lazy_graphs is True and config.eager_graph_rows == 1
    for key in ("fused_ops", "warmup"):
        with pytest.raises(BuiltinConfigError, match=key):
            BuiltinEngineConfig(**{key: "yes"})
    with pytest.raises(BuiltinConfigError, match="eager_graph_rows"):
        BuiltinEngineConfig(eager_graph_rows=-1)


def test_stopgaps_of_more_rows_than_the_eager_graphs_are_deferred_after_the_paged_ones():
    from parrot.engines.builtin.cuda.buckets import deferred_keys

    gaps = stopgap_keys(4, 2, 1)
    assert gaps and {k[0] for k in gaps} == {4}
    late = deferred_keys(4, 2, 1, gaps)
    assert late == sorted(k for k in paged_keys(4, 2) if k[0] > 1) + gaps
    assert deferred_keys(4, 2, 4, gaps) == []          # every row count eager
    assert deferred_keys(4, 2, None, gaps) == []


def test_buckets():
    assert width_buckets(1) == [1]
    assert width_buckets(256) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert width_buckets(40) == [1, 2, 4, 8, 16, 32, 40]
    assert paged_keys(2, 2) == [(1, 0, 0, 1), (1, 0, 0, 2), (2, 0, 0, 1), (2, 0, 0, 2)]
    keys = shared_keys(4, 8, min_prefix_blocks=4)
    assert (2, 2, 4, 1) in keys and (4, 4, 8, 8) in keys and (4, 1, 4, 2) in keys
    assert all(k[0] >= 2 and 4 <= k[2] and k[1] <= k[0] for k in keys)
    assert len(keys) == (2 + 3) * 2 * 4                           # (b, g) x prefix x suffix


def test_stopgaps_cover_every_shared_bucket_of_up_to_8_groups():
    assert covering_widths([1, 2, 4, 8, 16, 32, 64, 128, 256], 2) == [2, 8, 32, 128, 256]
    assert covering_widths([1, 2, 4, 8, 16, 32, 40], 2) == [2, 8, 32, 40]
    assert covering_widths([7], 2) == [7]
    keys = stopgap_keys(64, 256, min_prefix_blocks=16)
    assert len(keys) == 2 * 3 * 5 and {k[0] for k in keys} == {64}
    assert {k[1] for k in keys} == {1, 8} and {k[2] for k in keys} == {32, 128, 256}
    for b, g, p, s in shared_keys(64, 256, 16):
        if g <= 8:
            assert any(g <= k[1] and p <= k[2] <= 2 * p and s <= k[3] <= 2 * s
                       for k in keys), (b, g, p, s)
    assert stopgap_keys(1, 256, 16) == []
    # graphs to 256 rows: the stopgaps stay at 64 (a small step padded to 256 rows costs more
    # than the capture it saves); larger shared steps capture their own bucket
    assert stopgap_keys(256, 256, 16) == stopgap_keys(100, 256, 16) == keys
    assert {k[1] for k in stopgap_keys(4, 8, 2)} == {1}             # 8 groups need 8 rows


def test_warm_up_prepares_every_paged_bucket_and_keeps_the_cache():
    kernels = pytest.importorskip("parrot_kernels")
    bundle = load_bundle(BuiltinEngineConfig(model="tiny", dtype="float32", device="cpu",
                                             num_blocks=16))
    bundle.model.use_decode(make_decode_fn(kernels))
    bundle.model.use_fused(kernels)
    kv = KVCache(bundle.shape, 16, 4, torch.float32, torch.device("cpu"), scratch_block=True)
    torch.manual_seed(0)
    kv.data.normal_()
    before = kv.data.clone()
    graphs = DecodeGraphs(bundle.model, kv, max_batch=2, max_width=4, capture=False)
    report = warm_up(graphs, shared_prefix=True, min_prefix_blocks=2)
    stopgaps = {(2, 1, 4, 2), (2, 1, 4, 4)}       # widths 1, 2, 4 covered by 2 and 4
    assert set(stopgap_keys(2, 4, 2)) == stopgaps
    assert set(graphs.captured_keys) == set(paged_keys(2, 4)) | stopgaps
    assert report.graphs == len(paged_keys(2, 4)) + 2 and report.failed == 0
    assert report.stopgaps == 2
    assert report.shared_shapes == len(shared_keys(2, 4, 2)) > 0
    assert "8 decode graphs captured (2 shared-prefix stopgaps)" in report.describe()
    real = torch.ones(17, dtype=torch.bool)
    real[graphs.scratch_block] = False
    assert torch.equal(kv.data[:, :, real], before[:, :, real])   # only scratch was written


def test_warm_up_compiles_the_eager_buckets_past_the_graphs():
    """max_num_seqs above the largest graph bucket: eager decode steps pad to buckets up to
    it, and the warm-up runs their attention shapes too (paged and shared-prefix)."""
    graphs = kernel_graphs()
    model = graphs.model
    seen = []
    original = model.decode
    model.use_decode(lambda q, *args: seen.append(q.shape[0]) or original(q, *args))
    report = warm_up(graphs, shared_prefix=True, min_prefix_blocks=2, max_decode_rows=4)
    beyond = [k for k in paged_keys(4, 4) if k[0] > 2]
    assert report.shared_shapes == len(beyond) + len(shared_keys(4, 4, 2))
    assert set(graphs.captured_keys) == set(paged_keys(2, 4)) | set(stopgap_keys(2, 4, 2))
    assert max(k[0] for k in graphs.captured_keys) == 2                 # graphs only up to 2 rows
    assert 4 in seen                                              # a 4-row step was compiled


def test_warm_up_compiles_the_paged_prefill_kernel_when_the_model_runs_it():
    """prefill_attention: paged — the warm-up's prefill goes through the kernel, so the first
    request's prefill does not compile it."""
    kernels = pytest.importorskip("parrot_kernels")
    bundle = load_bundle(BuiltinEngineConfig(model="tiny", dtype="float32", device="cpu",
                                             num_blocks=16))
    bundle.model.use_decode(make_decode_fn(kernels))
    bundle.model.use_paged_prefill(kernels)
    launched = []

    class Spy:
        def __getattr__(self, name):
            return getattr(kernels, name)

        def paged_prefill_attention(self, q, k, v, plan, scale, *, out=None):
            launched.append(plan)
            return kernels.paged_prefill_attention(q, k, v, plan, scale, out=out)

    bundle.model.prefill_kernels = Spy()
    kv = KVCache(bundle.shape, 16, 4, torch.float32, torch.device("cpu"), scratch_block=True)
    graphs = DecodeGraphs(bundle.model, kv, max_batch=2, max_width=4, capture=False)
    warm_up(graphs, shared_prefix=False, min_prefix_blocks=2)
    # once per tile the plan can pick, whole and with its keys split (each its own Triton
    # specialisation)
    assert [(p.chunks, p.tuning) for p in launched[::len(bundle.model.layers)]] == [
        (((0, 4, 0),), v) for t in kernels.PREFILL_TUNINGS
        for v in (t, dataclasses.replace(t, kv_splits=2))]
    from parrot_kernels.prefill import key_splits
    assert [key_splits(p, 4, 132)[0] for p in launched[::len(bundle.model.layers)]] == [1, 2] * 2


async def test_lazy_graphs_defer_the_large_buckets_to_idle_time(make_engine):
    """Graphs past `defer_above` rows are not captured by the warm-up (their attention is
    compiled); the engine captures them while idle, one at a time, fewer rows first."""
    from parrot.engines.builtin.cuda.buckets import deferred_keys

    kernels = pytest.importorskip("parrot_kernels")
    bundle = load_bundle(BuiltinEngineConfig(model="tiny", dtype="float32", device="cpu",
                                             num_blocks=16))
    bundle.model.use_decode(make_decode_fn(kernels))
    bundle.uses_kernels = True
    assert deferred_keys(4, 2, None) == []
    late = deferred_keys(8, 2, 2)
    assert late == [(4, 0, 0, 1), (4, 0, 0, 2), (8, 0, 0, 1), (8, 0, 0, 2)]
    engine = make_engine(bundle, num_blocks=16, block_size=4,
                         decode_graphs=lambda model, kv, **_: DecodeGraphs(
                             model, kv, max_batch=8, max_width=2, capture=False))
    runner = engine.runner
    graphs = runner.graphs
    report = warm_up(graphs, shared_prefix=False, min_prefix_blocks=2, defer_above=2)
    assert set(graphs.captured_keys) == set(paged_keys(8, 2)) - set(late)
    assert graphs.deferred == late and report.deferred == 4
    assert report.shared_shapes == 4           # the deferred buckets' attention, compiled
    assert "4 deferred to idle time" in report.describe()
    await engine.start()                       # idle: the loop captures them one by one
    for _ in range(200):
        if not graphs.deferred:
            break
        await asyncio.sleep(0.01)
    assert set(graphs.captured_keys) == set(paged_keys(8, 2)) and graphs.idle_captures == 4
    assert (await engine.stats()).counter("graph_captures_while_idle") == 4
    assert runner.has_deferred_captures is False


def kernel_graphs(max_batch: int = 2, max_width: int = 4) -> DecodeGraphs:
    """Uncaptured decode graphs of a tiny model on the kernels' decode path (interpreted)."""
    kernels = pytest.importorskip("parrot_kernels")
    bundle = load_bundle(BuiltinEngineConfig(model="tiny", dtype="float32", device="cpu",
                                             num_blocks=16))
    bundle.model.use_decode(make_decode_fn(kernels))
    kv = KVCache(bundle.shape, 16, 4, torch.float32, torch.device("cpu"), scratch_block=True)
    return DecodeGraphs(bundle.model, kv, max_batch=max_batch, max_width=max_width,
                        capture=False)


def test_warm_up_defers_the_stopgaps_with_the_larger_graphs():
    graphs = kernel_graphs()
    report = warm_up(graphs, shared_prefix=True, min_prefix_blocks=2, defer_above=1)
    gaps = [(2, 1, 4, 2), (2, 1, 4, 4)]
    assert set(graphs.captured_keys) == {k for k in paged_keys(2, 4) if k[0] == 1}
    assert graphs.deferred == [k for k in paged_keys(2, 4) if k[0] == 2] + gaps
    assert report.stopgaps == 0 and report.deferred == 5
    while graphs.capture_deferred():
        pass
    assert set(graphs.captured_keys) == set(paged_keys(2, 4)) | set(gaps)
