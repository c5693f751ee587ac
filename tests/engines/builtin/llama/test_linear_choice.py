"""Where the small-batch kernels run is measured at start-up: every projection shape at every
row bucket timed both ways, the faster one kept, the model following it (the static table
only where nothing was measured), and a failed measurement never stopping the engine."""

from __future__ import annotations

import logging

import pytest
import torch

from parrot.engines.builtin.build import choose_linear_layers, load_bundle
from parrot.engines.builtin.config import BuiltinEngineConfig
from parrot.engines.builtin.sizing import ServingSize
from parrot.engines.builtin.llama.linear_choice import (LinearChoice, cuda_graph_timer,
                                                        measure_linear_choice)

SIZE = ServingSize(num_blocks=8, block_size=4, max_num_seqs=64, graph_max_batch=64,
                   kv_source="num_blocks", seqs_source="config")

parrot_kernels = pytest.importorskip("parrot_kernels")


def fused_bundle(device: str = "cpu", dtype: str = "float32"):
    bundle = load_bundle(BuiltinEngineConfig(model="tiny", dtype=dtype, device=device,
                                             num_blocks=16, seed=7))
    bundle.model.use_fused(parrot_kernels, small_batch_gemv=True)
    return bundle


def test_row_buckets():
    """A row count takes the bucket the graphs pad it to: the smallest measured one that
    holds it (the graphs' buckets, also when the largest is not a power of two)."""
    pow2 = LinearChoice(frozenset(), frozenset(), (1, 2, 4, 8, 16, 32, 64))
    assert [pow2.bucket(r) for r in (1, 2, 3, 4, 5, 16, 17, 33, 64)] == [
        1, 2, 4, 4, 8, 16, 32, 64, 64]
    capped = LinearChoice(frozenset(), frozenset(), (1, 2, 4, 8, 16, 32, 48))
    assert [capped.bucket(r) for r in (33, 40, 48, 49)] == [48, 48, 48, None]


def test_the_faster_side_is_kept_for_every_shape_and_bucket():
    weights = {(8, 4): [torch.randn(8, 4), torch.randn(8, 4)], (6, 4): [torch.randn(6, 4)]}
    # per (shape, rows): (kernel seconds, torch seconds), in the order they are timed
    script = iter([(1.0, 2.0), (3.0, 2.0),     # (8, 4) at 1 and 4 rows
                   (2.0, 2.5), (9.0, 1.0)])     # (6, 4)
    pending: list[float] = []
    ran: list[int] = []

    def timer(calls):
        ran.append(len(calls))
        for call in calls:
            assert call().shape[1] in (8, 6)   # each thunk is one real linear call
        if not pending:
            pending.extend(next(script))
        return pending.pop(0)

    choice = measure_linear_choice(weights, [1, 4, 128], parrot_kernels, timer)
    assert choice.kernel == {(8, 4, 1), (6, 4, 1)}
    assert choice.measured == {(8, 4, 1), (8, 4, 4), (6, 4, 1), (6, 4, 4)}   # 128 > 64 rows
    assert choice.buckets == (1, 4)
    assert ran == [2, 2, 2, 2, 1, 1, 1, 1]      # one call per layer's weight, both sides


def test_the_model_follows_the_measured_choice(monkeypatch):
    bundle = fused_bundle()
    model = bundle.model
    layer = model.layers[0]
    qkv, o_proj = layer.qkv, layer.o_proj
    calls: list[tuple[int, int]] = []
    real = parrot_kernels.small_batch_linear

    def counting(x, w, **kw):
        calls.append((x.shape[0], w.shape[0]))
        return real(x, w, **kw)

    monkeypatch.setattr(parrot_kernels, "small_batch_linear", counting)
    rows3 = torch.randn(3, qkv.shape[1])
    # measured: QKV wins at 4 rows, o_proj loses there (the static table says both win)
    model.linear_choice = LinearChoice(
        frozenset({(*qkv.shape, 4)}), frozenset({(*qkv.shape, 4), (*o_proj.shape, 4)}), (4,))
    torch.testing.assert_close(model.linear(rows3, qkv), rows3 @ qkv.T)
    model.linear(rows3, o_proj)
    assert calls == [(3, qkv.shape[0])]
    # a bucket nothing measured: the static table decides (kernel at <= 16 rows)
    model.linear(torch.randn(9, qkv.shape[1]), o_proj)
    assert calls[-1] == (9, o_proj.shape[0])
    model.linear_choice = None
    model.linear(rows3, o_proj)
    assert calls[-1] == (3, o_proj.shape[0])


def test_start_up_measures_every_projection_and_survives_a_failing_timer(caplog):
    bundle = fused_bundle()
    model = bundle.model
    seen: list[int] = []

    def kernel_always_faster(calls):
        seen.append(len(calls))
        return 1.0 if len(seen) % 2 else 2.0       # kernel timed first, then torch

    choice = choose_linear_layers(model, [1, 2], timer=kernel_always_faster)
    shapes = model.projection_weights()
    assert sum(len(ws) for ws in shapes.values()) == 4 * len(model.layers) + 1
    assert choice is not None and choice.kernel == choice.measured == {
        (n, k, r) for (n, k) in shapes for r in (1, 2)}
    assert model.linear_choice is choice
    from parrot.engines.builtin.build import startup_summary
    assert (f"linear layers small-batch kernels faster on {len(choice.kernel)} of "
            f"{len(choice.measured)} (shape, rows) pairs measured on this GPU"
            in startup_summary("e", bundle, SIZE, None, None, None))

    def broken(calls):
        raise RuntimeError("no GPU here")

    with caplog.at_level(logging.ERROR, logger="parrot.engines.builtin.build"):
        assert choose_linear_layers(model, [1], timer=broken) is None
    assert "static table" in caplog.text and model.linear_choice is choice
    plain = load_bundle(BuiltinEngineConfig(model="tiny", dtype="float32", device="cpu",
                                            num_blocks=16))
    assert choose_linear_layers(plain.model, [1], timer=broken) is None   # no kernels: no-op


def test_a_measured_choice_is_kept_and_read_at_the_next_start(tmp_path, caplog):
    model = fused_bundle().model
    calls: list[int] = []

    def kernel_faster_on_odd_shapes(thunks):     # the kernel wins at one row only
        calls.append(len(thunks))
        kernel, rows = thunks[0].func is not torch.nn.functional.linear, thunks[0].args[0].shape[0]
        return (1.0 if rows == 1 else 3.0) if kernel else 2.0

    first = choose_linear_layers(model, [1, 2], timer=kernel_faster_on_odd_shapes,
                                 cache_dir=tmp_path)
    assert first is not None and calls and [p.suffix for p in tmp_path.iterdir()] == [".json"]
    assert {r for _, _, r in first.kernel} == {1} and {r for _, _, r in first.measured} == {1, 2}
    timed = len(calls)
    with caplog.at_level(logging.INFO, logger="parrot.engines.builtin.build"):
        again = choose_linear_layers(fused_bundle().model, [1, 2],
                                     timer=kernel_faster_on_odd_shapes, cache_dir=tmp_path)
    assert again == first and len(calls) == timed            # read, nothing timed
    assert "measured before on this GPU, read from" in caplog.text
    # other buckets: another measurement, kept beside the first
    other = choose_linear_layers(model, [1, 2, 4], timer=kernel_faster_on_odd_shapes,
                                 cache_dir=tmp_path)
    assert other is not None and other.buckets == (1, 2, 4) and len(calls) > timed
    assert len(list(tmp_path.iterdir())) == 2
    # an unreadable file is measured again and replaced
    for path in tmp_path.iterdir():
        path.write_text("{not json")
    timed = len(calls)
    assert choose_linear_layers(model, [1, 2], timer=kernel_faster_on_odd_shapes,
                                cache_dir=tmp_path) == first
    assert len(calls) > timed
    assert LinearChoice.from_json(first.to_json()) == first


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_graph_timer_measures_a_real_choice():
    bundle = fused_bundle("cuda", "bfloat16")
    choice = choose_linear_layers(bundle.model, [1, 2, 8], timer=cuda_graph_timer())
    assert choice is not None and len(choice.measured) == 3 * len(
        bundle.model.projection_weights())


def test_start_up_timing_waits_for_another_engine_on_the_gpu(tmp_path, monkeypatch):
    """Two engines on one GPU never time their linear layers at the same moment."""
    import threading
    import time

    from parrot.engines.builtin.cuda import device_lock

    monkeypatch.setenv(device_lock.LOCK_DIR_ENV, str(tmp_path))
    model = fused_bundle().model
    key = device_lock.device_key(model.device)
    released, entered = [], threading.Event()

    def other_engine() -> None:
        with device_lock.exclusive_device(key):
            entered.set()
            time.sleep(0.3)
            released.append(time.perf_counter())

    thread = threading.Thread(target=other_engine)
    thread.start()
    assert entered.wait(5)
    first_timed: list[float] = []

    def timer(calls):
        first_timed.append(time.perf_counter())
        return 1.0

    assert choose_linear_layers(model, [1], timer=timer) is not None
    thread.join()
    assert first_timed[0] >= released[0]
