"""The engine's CUDA decode path (parrot_kernels, shared-prefix groups) run on the CPU: the
kernel wrappers fall back to their references (or the Triton interpreter), so the plumbing —
block tables, group planning, suffix tables — is checked against the torch path."""

from __future__ import annotations

import asyncio

import pytest

from parrot.engines.builtin.attention import make_decode_fn
from parrot.engines.builtin.build import load_bundle
from parrot.engines.builtin.config import BuiltinEngineConfig
from parrot.engines.protocol import FillRequest, GenerateRequest
from parrot.sampling import SamplingParams

parrot_kernels = pytest.importorskip("parrot_kernels")


async def run_forks(engine) -> list[tuple[int, ...]]:
    await engine.fill(FillRequest("sys", token_ids=tuple(range(10, 31))))   # 21 tokens
    for i in range(3):
        await engine.fill(FillRequest(f"c{i}", "sys", token_ids=(40 + i, 50 + i)))
    await engine.fill(FillRequest("lone", token_ids=(7, 8, 9)))
    params = SamplingParams(max_tokens=4, ignore_eos=True)
    results = await asyncio.gather(*(engine.generate_all(GenerateRequest(c, sampling=params))
                                     for c in ("c0", "lone", "c1", "c2")))
    return [r.token_ids for r in results]


async def test_shared_prefix_kernel_path_matches_torch_path(make_engine):
    config = BuiltinEngineConfig(model="tiny", dtype="float32", device="cpu", num_blocks=64)
    torch_bundle = load_bundle(config)
    kernel_bundle = load_bundle(config)
    kernel_bundle.model._decode = make_decode_fn(parrot_kernels)
    kernel_bundle.uses_kernels = True
    common = dict(block_size=4, shared_prefix_min_tokens=8, shared_prefix_min_group=2)
    kernel_engine = make_engine(kernel_bundle, **common)
    calls = []
    original = kernel_engine._runner.prepare_host

    def spy(batch):
        host = original(batch)
        calls.append(host.groups is not None)
        return host

    kernel_engine._runner.prepare_host = spy
    expected = await run_forks(make_engine(torch_bundle, **common))
    assert await run_forks(kernel_engine) == expected
    assert any(calls)                                   # some decode steps used the groups
