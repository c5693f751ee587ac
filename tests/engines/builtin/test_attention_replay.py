"""A step's attention on the paged kernels is recorded at its first layer and replayed at the
others with that layer's tensors (parrot_kernels.launch.Recording): the wrappers run once per
step, every layer's launches get its own caches. The kernels here are fakes that launch
through a real LaunchCache and record what each launch received."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from parrot.engines.builtin.llama.attention import AttentionMetadata, PrefillChunk
from parrot.engines.builtin.build import load_bundle
from parrot.engines.builtin.config import BuiltinEngineConfig

launch = pytest.importorskip("parrot_kernels.launch")


def _kernel(q, k_cache, v_cache, out, n):
    """The fake kernels' signature."""


class _Compiled:
    def __init__(self, log, name):
        self.log, self.name = log, name
        self.function = self.packed_metadata = None

    def launch_metadata(self, *args):
        return None

    def run(self, *call):
        self.log.append((self.name, call[9:13]))   # q, k_cache, v_cache, out


class _Jit:
    fn = staticmethod(_kernel)

    def __init__(self, log, name):
        self.log, self.name = log, name

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            self.log.append((self.name, args[:4]))
            return _Compiled(self.log, self.name)
        return run


class FakeKernels:
    """parrot_kernels as the model sees it: the two attention wrappers, counted."""

    def __init__(self, log):
        runtime = lambda: launch.Runtime(stream=lambda: 0, hooks=lambda: (None, None))  # noqa: E731
        self.decode = launch.LaunchCache(_Jit(log, "decode"), runtime=runtime)
        self.prefill = launch.LaunchCache(_Jit(log, "prefill"), runtime=runtime)
        self.wrapper_calls = 0
        self.recording = launch.recording

    def paged_prefill_attention(self, q, k_cache, v_cache, plan, scale, *, out):
        self.wrapper_calls += 1
        self.prefill((1,), q, k_cache, v_cache, out, 7)
        return out


class FakeDecode:
    replayable = True

    def __init__(self, kernels):
        self.kernels = kernels

    def __call__(self, q, k_cache, v_cache, meta, scale, *, out=None):
        self.kernels.wrapper_calls += 1
        self.kernels.decode((1,), q, k_cache, v_cache, out, 3)
        return out


def _model(replayable=True):
    bundle = load_bundle(BuiltinEngineConfig(model="tiny", dtype="float32", device="cpu",
                                             num_blocks=8))
    log = []
    kernels = FakeKernels(log)
    model = bundle.model
    model.prefill_kernels = kernels
    model.use_decode(FakeDecode(kernels))
    if not replayable:
        model.decode.replayable = False
    return model, kernels, log


def _meta():
    """3 decode rows padded to 4, then a 5-token prefill chunk: 8 rows."""
    return AttentionMetadata(
        slot_mapping=torch.zeros(8, dtype=torch.int64), num_decode=3,
        decode_block_tables=torch.zeros(4, 1, dtype=torch.int32),
        decode_seq_lens=torch.ones(4, dtype=torch.int32), shared_prefix=None,
        prefills=[PrefillChunk(3, 8, 0, torch.zeros(1, dtype=torch.int64))],
        prefill_plan=SimpleNamespace())


def _layers(n):
    return [(torch.zeros(8, 4, 2, 16), torch.zeros(8, 4, 2, 16)) for _ in range(n)]


def test_the_first_layer_records_and_the_others_replay_with_their_caches():
    model, kernels, log = _model()
    meta, layers = _meta(), _layers(3)
    q, out = torch.zeros(8, 4, 16), torch.zeros(8, 4, 16)
    for k_cache, v_cache in layers:
        assert model.attention(q, q, q, k_cache, v_cache, meta, out=out) is out
    assert kernels.wrapper_calls == 2          # one decode and one prefill call, layer 0
    assert [name for name, _ in log] == ["decode", "prefill"] * 3
    for layer, (k_cache, v_cache) in enumerate(layers):
        (_, decode), (_, prefill) = log[2 * layer:2 * layer + 2]
        # the decode over the 4 padded rows straight into the output, then the prefill
        assert decode[1] is k_cache and decode[2] is v_cache
        assert decode[0].shape[0] == 4 and decode[0].data_ptr() == q.data_ptr()
        assert decode[3].shape[0] == 4 and decode[3].data_ptr() == out.data_ptr()
        assert prefill[0] is q and prefill[1] is k_cache and prefill[2] is v_cache
        assert prefill[3] is out


def test_a_decode_path_that_is_not_only_launches_is_never_replayed():
    model, kernels, log = _model(replayable=False)
    meta, layers = _meta(), _layers(2)
    q, out = torch.zeros(8, 4, 16), torch.zeros(8, 4, 16)
    for k_cache, v_cache in layers:
        model.attention(q, q, q, k_cache, v_cache, meta, out=out)
    assert kernels.wrapper_calls == 4 and meta.attention_replay is None
