"""Batch-1 decode through the kernels' small-batch linear (the one-row path the engine takes
on CUDA), run here under the Triton interpreter: the same greedy tokens as the unfused
PyTorch path on a fixed-seed fp32 model, and the kernel really ran."""

from __future__ import annotations

import pytest

from parrot.engines.builtin.attention import make_decode_fn
from parrot.engines.builtin.build import load_bundle
from parrot.engines.builtin.config import BuiltinEngineConfig
from parrot.engines.protocol import FillRequest, GenerateRequest
from parrot.sampling import SamplingParams

parrot_kernels = pytest.importorskip("parrot_kernels")
STEPS = 12


def tiny_bundle():
    return load_bundle(BuiltinEngineConfig(model="tiny", dtype="float32", device="cpu",
                                           num_blocks=64, seed=1234))


async def generate_one(engine) -> tuple[int, ...]:
    await engine.fill(FillRequest("c", token_ids=tuple(range(5, 22))))
    result = await engine.generate_all(GenerateRequest(
        "c", sampling=SamplingParams(max_tokens=STEPS, ignore_eos=True)))
    return result.token_ids


async def test_one_row_steps_use_the_gemv_and_match_unfused(make_engine, monkeypatch):
    expected = await generate_one(make_engine(tiny_bundle(), block_size=4))
    calls = []
    real = parrot_kernels.small_batch_linear

    def counting(x, w, **kwargs):
        calls.append(tuple(x.shape))
        return real(x, w, **kwargs)

    monkeypatch.setattr(parrot_kernels, "small_batch_linear", counting)
    bundle = tiny_bundle()
    bundle.model._decode = make_decode_fn(parrot_kernels)
    bundle.model.use_fused(parrot_kernels, one_row_gemv=True)
    bundle.uses_kernels = True
    got = await generate_one(make_engine(bundle, block_size=4))
    assert got == expected and len(set(expected)) > 1
    layers = bundle.shape.num_layers
    # every decode step after the first token: 4 linears per layer, all one row
    assert len(calls) >= (STEPS - 1) * 4 * layers
    assert all(rows == 1 for rows, _ in calls)


def test_cpu_default_keeps_torch_linear():
    bundle = tiny_bundle()
    bundle.model.use_fused(parrot_kernels)
    assert bundle.model._one_row_linear is not parrot_kernels.small_batch_linear
