"""prefill_attention: paged — every prefill chunk of a step in one Triton launch per layer
(interpreter on the CPU) — gives the tokens of the SDPA-per-chunk path: fresh prompts, forks
of a cached context and continued contexts, several chunks in one step."""

from __future__ import annotations

import asyncio

import pytest

from parrot.engines.builtin.build import load_bundle
from parrot.engines.builtin.config import BuiltinConfigError, BuiltinEngineConfig
from parrot.engines.protocol import FillRequest, GenerateRequest
from parrot.sampling import SamplingParams

parrot_kernels = pytest.importorskip("parrot_kernels")
torch = pytest.importorskip("torch")
CONFIG = BuiltinEngineConfig(model="tiny", dtype="float32", device="cpu", num_blocks=64)


async def run_mixed_prefills(engine) -> list[tuple[int, ...]]:
    """A 21-token system prompt, three forks of it and a lone prompt filled at once (one step
    of several chunks, most over cached context), then a continued fork."""
    await engine.fill(FillRequest("sys", token_ids=tuple(range(10, 31))))
    await asyncio.gather(*(engine.fill(FillRequest(f"c{i}", "sys",
                                                   token_ids=tuple(range(40 + i, 49 + 2 * i))))
                           for i in range(3)),
                         engine.fill(FillRequest("lone", token_ids=(7, 8, 9, 11, 12))))
    await engine.fill(FillRequest("c0", token_ids=(90, 91, 92, 93, 94, 95, 96)))  # continue
    params = SamplingParams(max_tokens=5, ignore_eos=True)
    results = await asyncio.gather(*(engine.generate_all(GenerateRequest(c, sampling=params))
                                     for c in ("c0", "lone", "c1", "c2")))
    return [r.token_ids for r in results]


async def test_paged_prefill_gives_the_sdpa_paths_tokens(make_engine):
    sdpa_bundle, paged_bundle = load_bundle(CONFIG), load_bundle(CONFIG)
    paged_bundle.model.use_paged_prefill(parrot_kernels)
    plans = []
    original = paged_bundle.model.prefill_kernels.paged_prefill_attention

    class Spy:   # the kernels module with its prefill call counted
        def __getattr__(self, name):
            return getattr(parrot_kernels, name)

        def paged_prefill_attention(self, q, k, v, plan, scale, *, out=None):
            plans.append(len(plan.chunks))
            return original(q, k, v, plan, scale, out=out)

    paged_bundle.model.prefill_kernels = Spy()
    common = dict(block_size=4, max_batch_tokens=256)
    expected = await run_mixed_prefills(make_engine(sdpa_bundle, **common))
    assert await run_mixed_prefills(make_engine(paged_bundle, **common)) == expected
    # every layer of every prefill step went through the kernel, one step with 4 chunks
    layers = len(paged_bundle.model.layers)
    assert plans and len(plans) % layers == 0 and max(plans) == 4


def test_paged_prefill_needs_the_kernels():
    with pytest.raises(BuiltinConfigError, match="prefill_attention"):
        load_bundle(BuiltinEngineConfig(model="tiny", dtype="float32", device="cpu",
                                        num_blocks=16, prefill_attention="paged"))
    with pytest.raises(BuiltinConfigError, match="prefill_attention"):
        BuiltinEngineConfig(prefill_attention="flash")


def test_auto_is_sdpa_on_the_cpu():
    """The default, auto: the CPU's torch path has no kernels, so SDPA (no error)."""
    assert BuiltinEngineConfig().prefill_attention == "auto"
    bundle = load_bundle(BuiltinEngineConfig(model="tiny", dtype="float32", device="cpu",
                                             num_blocks=16))
    assert bundle.model.prefill_kernels is None


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs CUDA")
def test_auto_is_the_paged_kernel_on_cuda():
    """Where the engine runs the Triton kernels (CUDA), auto takes the paged prefill kernel;
    sdpa keeps torch."""
    def kernels_of(choice: str):
        return load_bundle(BuiltinEngineConfig(model="tiny", device="cuda", num_blocks=16,
                                               prefill_attention=choice)).model.prefill_kernels

    assert kernels_of("auto") is not None and kernels_of("paged") is not None
    assert kernels_of("sdpa") is None


def _kernel_decode_bundle(paged: bool):
    """The tiny model on the kernels' decode path (interpreter on the CPU), its prefill on the
    paged kernel or on SDPA per chunk."""
    from parrot.engines.builtin.llama.attention import make_decode_fn
    bundle = load_bundle(CONFIG)
    bundle.model.use_decode(make_decode_fn(parrot_kernels))
    bundle.uses_kernels = True
    if paged:
        bundle.model.use_paged_prefill(parrot_kernels)
    return bundle


async def run_fill_joining_decodes(engine) -> list[tuple[int, ...]]:
    """Three generations running (decode rows padded to a bucket of four), then an 11-token
    Fill forked from a cached prompt (its rows see more keys than the padding's one) and its
    generation joining them: the Fill is sent once every generation has its first token, so
    it lands beside their remaining 23 decode steps on any machine."""
    params = SamplingParams(max_tokens=24, ignore_eos=True)
    await engine.fill(FillRequest("sys", token_ids=tuple(range(80, 95))))
    for i in range(3):
        await engine.fill(FillRequest(f"r{i}", token_ids=tuple(range(20 + i, 29 + 3 * i))))
    started = [asyncio.Event() for _ in range(3)]

    async def generate(i: int) -> tuple[int, ...]:
        tokens: list[int] = []
        async for chunk in engine.generate(GenerateRequest(f"r{i}", sampling=params)):
            tokens.extend(chunk.token_ids)
            started[i].set()
        return tuple(tokens)

    running = [asyncio.create_task(generate(i)) for i in range(3)]
    for event in started:
        await event.wait()
    await engine.fill(FillRequest("late", "sys", token_ids=tuple(range(60, 71))))
    late = await engine.generate_all(GenerateRequest("late", sampling=params))
    return [*await asyncio.gather(*running), late.token_ids]


async def test_a_mixed_step_writes_its_padded_decode_rows_straight_into_the_output(
        make_engine):
    """The paged path runs the decode attention over the padded rows into the step's output
    and lets the prefill kernel overwrite the padding: the tokens of the SDPA path, which
    pads a copy of the decode queries."""
    paged, sdpa = _kernel_decode_bundle(True), _kernel_decode_bundle(False)
    mixed = []
    original = paged.model.attention

    def spy(q, k, v, k_cache, v_cache, meta, *, out=None):
        if meta.num_decode and meta.prefills:
            mixed.append((meta.num_decode, meta.decode_rows, q.shape[0]))
        return original(q, k, v, k_cache, v_cache, meta, out=out)

    paged.model.attention = spy
    common = dict(block_size=4, max_batch_tokens=256)
    expected = await run_fill_joining_decodes(make_engine(sdpa, **common))
    assert await run_fill_joining_decodes(make_engine(paged, **common)) == expected
    assert any(nd < padded <= rows for nd, padded, rows in mixed), mixed


class _WithoutRecording:
    """parrot_kernels without `recording`: the model's attention runs its wrappers at every
    layer instead of replaying the first layer's launches."""

    def __getattr__(self, name):
        if name == "recording":
            raise AttributeError(name)
        return getattr(parrot_kernels, name)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
async def test_replayed_attention_launches_give_the_wrappers_tokens_on_cuda(make_engine):
    """On CUDA a step's attention is recorded at its first layer and replayed at the others
    (the kernels are compiled, so kept): the tokens of running the wrappers at every layer."""
    config = BuiltinEngineConfig(model="tiny", dtype="float16", device="cuda", num_blocks=64,
                                 cuda_graphs=False, warmup=False, speed_probe="off")
    replayed, plain = load_bundle(config), load_bundle(config)
    for bundle in (replayed, plain):
        bundle.model.use_paged_prefill(parrot_kernels)
    plain.model.prefill_kernels = _WithoutRecording()
    calls = []
    original = replayed.model.attention

    def spy(q, k, v, k_cache, v_cache, meta, *, out=None):
        result = original(q, k, v, k_cache, v_cache, meta, out=out)
        replay = meta.attention_replay
        calls.append(replay is not None and replay[0].num_replays > 0)
        return result

    replayed.model.attention = spy
    common = dict(block_size=4, max_batch_tokens=256, device="cuda", dtype="float16",
                  cuda_graphs=False, warmup=False, speed_probe="off")
    expected = await run_fill_joining_decodes(make_engine(plain, **common))
    assert await run_fill_joining_decodes(make_engine(replayed, **common)) == expected
    assert any(calls)
