"""The engine's CUDA decode path (parrot_kernels, shared-prefix groups) run on the CPU: the
kernel wrappers fall back to their references (or the Triton interpreter), so the plumbing —
block tables, group planning, suffix tables — is checked against the torch path."""

from __future__ import annotations

import asyncio

import pytest

from parrot.engines.builtin.llama.attention import make_decode_fn
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
    kernel_bundle.model.use_decode(make_decode_fn(parrot_kernels))
    kernel_bundle.uses_kernels = True
    common = dict(block_size=4, shared_prefix_min_tokens=8, shared_prefix_min_group=2)
    kernel_engine = make_engine(kernel_bundle, **common)
    calls = []
    original = kernel_engine.runner.prepare_host

    def spy(batch):
        host = original(batch)
        calls.append(host.groups is not None)
        return host

    kernel_engine.runner.prepare_host = spy
    expected = await run_forks(make_engine(torch_bundle, **common))
    assert await run_forks(kernel_engine) == expected
    assert any(calls)                                   # some decode steps used the groups


async def test_eager_steps_launch_only_the_shapes_the_warm_up_compiles(make_engine):
    """Mixed and decode-only steps off the graphs pad their rows and groups to the graph
    buckets: every decode attention the engine launches has the (batch, groups, prefix width,
    suffix width) of a warm-up key, so it reuses a Triton specialisation compiled at start-up
    (unpadded, a step of 3 rows would compile a new one while serving)."""
    from types import SimpleNamespace

    from parrot.engines.builtin.cuda.buckets import paged_keys, shared_keys

    launched = []

    def shared(q, k_cache, v_cache, indptr, ptables, plens, stables, slens, scale, out=None):
        launched.append((q.shape[0], indptr.shape[0] - 1, ptables.shape[1], stables.shape[1]))
        return parrot_kernels.shared_prefix_decode_attention(
            q, k_cache, v_cache, indptr, ptables, plens, stables, slens, scale, out=out)

    def paged(q, k_cache, v_cache, tables, lens, scale, out=None):
        launched.append((q.shape[0], 0, 0, tables.shape[1]))
        return parrot_kernels.paged_decode_attention(q, k_cache, v_cache, tables, lens, scale,
                                                     out=out)

    bundle = load_bundle(BuiltinEngineConfig(model="tiny", dtype="float32", device="cpu",
                                             num_blocks=64))
    bundle.model.use_decode(make_decode_fn(SimpleNamespace(
        shared_prefix_decode_attention=shared, paged_decode_attention=paged)))
    bundle.uses_kernels = True
    engine = make_engine(bundle, block_size=4, shared_prefix_min_tokens=8,
                         shared_prefix_min_group=2, max_num_seqs=8)
    assert engine.runner.max_decode_rows == 8
    await engine.fill(FillRequest("sys", token_ids=tuple(range(10, 31))))   # 21 tokens
    for i in range(3):
        await engine.fill(FillRequest(f"c{i}", "sys", token_ids=(40 + i, 50 + i)))
    await engine.fill(FillRequest("lone", token_ids=(7, 8, 9)))
    await asyncio.gather(*(                                        # 4 -> 3 -> 2 rows
        engine.generate_all(GenerateRequest(c, sampling=SamplingParams(max_tokens=n,
                                                                       ignore_eos=True)))
        for c, n in (("c0", 6), ("lone", 3), ("c1", 5), ("c2", 6))))
    max_width = engine.runner.max_blocks
    warmed = set(paged_keys(8, max_width)) | set(shared_keys(8, max_width, 2))
    assert launched and any(key[1] for key in launched)          # both kinds of steps ran
    assert {key[0] for key in launched} <= {1, 2, 4}             # 4 and 3 rows: bucket 4
    assert set(launched) <= warmed
