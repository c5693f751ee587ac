"""Small-batch decode through the kernels' small-batch linear (the path the engine takes on
CUDA wherever `kernel_wins`), run here under the Triton interpreter: the same greedy tokens as
the unfused PyTorch path on a fixed-seed fp32 model, with the kernel really running — the
elementwise kernel at one row, the tensor-core kernel at several."""

from __future__ import annotations

import asyncio

import pytest
import torch

from parrot.engines.builtin.llama.attention import make_decode_fn
from parrot.engines.builtin.build import load_bundle
from parrot.engines.builtin.config import BuiltinEngineConfig
from parrot.engines.protocol import FillRequest, GenerateRequest
from parrot.sampling import SamplingParams

parrot_kernels = pytest.importorskip("parrot_kernels")
STEPS = 12


def tiny_bundle():
    return load_bundle(BuiltinEngineConfig(model="tiny", dtype="float32", device="cpu",
                                           num_blocks=64, seed=1234))


async def generate(engine, rows: int) -> list[tuple[int, ...]]:
    """`rows` sequences (different prompts) decoded together, greedy."""
    async def one(i: int) -> tuple[int, ...]:
        await engine.fill(FillRequest(f"c{i}", token_ids=tuple(range(5 + i, 22 + 2 * i))))
        result = await engine.generate_all(GenerateRequest(
            f"c{i}", sampling=SamplingParams(max_tokens=STEPS, ignore_eos=True)))
        return result.token_ids
    return list(await asyncio.gather(*(one(i) for i in range(rows))))


def kernel_bundle(monkeypatch, calls: list[int]):
    real = parrot_kernels.small_batch_linear

    def counting(x, w, **kwargs):
        calls.append(x.shape[0])
        return real(x, w, **kwargs)

    monkeypatch.setattr(parrot_kernels, "small_batch_linear", counting)
    bundle = tiny_bundle()
    bundle.model.use_decode(make_decode_fn(parrot_kernels))
    bundle.model.use_fused(parrot_kernels, small_batch_gemv=True)
    bundle.uses_kernels = True
    return bundle


@pytest.mark.parametrize("rows", [1, 3])
async def test_small_batch_steps_use_the_gemv_and_match_unfused(make_engine, monkeypatch, rows):
    expected = await generate(make_engine(tiny_bundle(), block_size=4), rows)
    calls: list[int] = []
    bundle = kernel_bundle(monkeypatch, calls)
    got = await generate(make_engine(bundle, block_size=4), rows)
    assert got == expected and all(len(set(t)) > 1 for t in expected)
    layers = bundle.shape.num_layers
    # the decode steps (all but a step or two next to the prefill): 4 linears per layer
    # through the kernel; the 17+-token prompts' prefill steps stay on F.linear (> 16 rows)
    assert len(calls) >= (STEPS - 2) * 4 * layers
    assert all(1 <= n <= 16 for n in calls)
    assert rows in calls     # steps of all the rows together ran through the kernel


def test_prefill_rows_stay_on_cublas(monkeypatch):
    calls: list[int] = []
    bundle = kernel_bundle(monkeypatch, calls)
    assert parrot_kernels.kernel_wins(64, 64, 16) and not parrot_kernels.kernel_wins(64, 64, 17)
    x = torch.randn(40, bundle.shape.hidden_size)
    bundle.model.linear(x, bundle.model.layers[0].o_proj)
    assert calls == []


def test_cpu_default_keeps_torch_linear():
    bundle = tiny_bundle()
    bundle.model.use_fused(parrot_kernels)
    assert bundle.model.small_batch_kernels is None
