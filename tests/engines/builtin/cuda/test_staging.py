"""The decode graphs' packed static inputs (staging.py)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from parrot.engines.builtin.cuda.staging import StaticInputs  # noqa: E402


@pytest.mark.parametrize("max_batch,max_width", [(3, 5), (64, 256), (7, 1)])
def test_every_view_is_16_byte_aligned(max_batch, max_width):
    """Triton specialises pointers on 16-byte alignment: a view that is not aligned (e.g.
    prefix_lens after an odd number of int32s) gives the graph's kernels another compilation
    than the eager step's, compiled while serving instead of at start-up."""
    inputs = StaticInputs(max_batch, max_width, torch.device("cpu"))
    for name, view in inputs.views.items():
        assert view.data_ptr() % 16 == 0, name
        assert inputs.host[name].ctypes.data % 16 == 0, name


def test_views_do_not_overlap_and_upload_copies_the_host_mirror():
    inputs = StaticInputs(3, 5, torch.device("cpu"))
    for i, name in enumerate(inputs.host):
        inputs.host[name][...] = i + 1
    inputs.upload()
    for i, name in enumerate(inputs.views):
        assert (inputs.views[name] == i + 1).all(), name


def test_uploads_alternate_between_two_host_mirrors():
    """A step can be staged while the previous step's copies are still queued (launch-ahead):
    the next fill writes the other mirror, never the one a pending copy reads."""
    inputs = StaticInputs(3, 5, torch.device("cpu"))
    first = inputs.host
    first["positions"][...] = 7
    inputs.upload()
    second = inputs.host
    assert second is not first
    second["positions"][...] = 9            # the first mirror keeps what was uploaded
    assert (first["positions"] == 7).all() and (inputs.views["positions"] == 7).all()
    inputs.upload()
    assert inputs.host is first and (inputs.views["positions"] == 9).all()


def test_upload_packed_gives_each_array_its_shape_and_values_on_16_byte_boundaries():
    import numpy as np

    from parrot.engines.builtin.cuda.staging import upload_packed
    arrays = [np.arange(6, dtype=np.int32).reshape(2, 3), np.array([7], dtype=np.int32),
              np.zeros((0,), dtype=np.int32), np.arange(5, dtype=np.int32) + 10]
    views = upload_packed(arrays, torch.device("cpu"))
    assert [tuple(v.shape) for v in views] == [(2, 3), (1,), (0,), (5,)]
    for view, array in zip(views, arrays):
        assert view.dtype == torch.int32 and view.tolist() == array.tolist()
    assert all(v.data_ptr() % 16 == 0 for v in views if v.numel())
    assert len({v.untyped_storage().data_ptr() for v in views}) == 1   # one copy


def test_upload_packed_takes_one_dtype_per_upload():
    import numpy as np

    from parrot.engines.builtin.cuda.staging import upload_packed
    ids, slots = np.array([5, 6, 7], dtype=np.int64), np.array([2**40], dtype=np.int64)
    views = upload_packed([ids, slots], torch.device("cpu"))
    assert [v.dtype for v in views] == [torch.int64] * 2
    assert views[0].tolist() == [5, 6, 7] and views[1].tolist() == [2**40]
    assert views[1].data_ptr() - views[0].data_ptr() == 32      # 3 x 8 bytes, to 16
    with pytest.raises(ValueError, match="one dtype"):
        upload_packed([ids, np.zeros(2, dtype=np.int32)], torch.device("cpu"))
