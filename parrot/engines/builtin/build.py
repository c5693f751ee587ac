"""Assemble a BuiltinEngine from its config: load -> model -> KV cache -> scheduler -> engine.

`load_bundle` (slow: weights) and `build_engine` (fast: KV cache, scheduler) are separate so
tests and benchmarks can run several engines over one loaded model.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from parrot.engines.builtin.attention import (KernelsUnavailableError, choose_backend,
                                              load_kernels, make_decode_fn)
from parrot.engines.builtin.block_manager import BlockManager
from parrot.engines.builtin.config import BuiltinConfigError, BuiltinEngineConfig
from parrot.engines.builtin.device_lock import device_key, exclusive_device
from parrot.engines.builtin.engine import BuiltinEngine
from parrot.engines.builtin.graphs import DecodeGraphs
from parrot.engines.builtin.kv_cache import KVCache, num_blocks_for
from parrot.engines.builtin.linear_choice import (LinearChoice, Timer, cuda_graph_timer,
                                                  measure_linear_choice)
from parrot.engines.builtin.host_pauses import pause_monitor
from parrot.engines.builtin.loader import (LoadedModel, load_model, resolve_device,
                                           resolve_dtype)
from parrot.engines.builtin.model import LlamaModel
from parrot.engines.builtin.prefill_graphs import PrefillGraphs
from parrot.engines.builtin.runner import ModelRunner
from parrot.engines.builtin.scheduler import BatchScheduler
from parrot.engines.builtin.shapes import ModelShape
from parrot.engines.builtin.step_trace import StepTrace
from parrot.engines.builtin.startup_probe import StartupProbe
from parrot.engines.builtin.warmup import WarmupReport, batch_buckets, warm_up, width_buckets

log = logging.getLogger(__name__)


@contextlib.contextmanager
def startup_phase(name: str, what: str) -> Iterator[None]:
    """A start-up phase logged as it begins and with its time as it ends: a cold start
    (loading, converting the weights once, compiling kernels, capturing graphs) takes
    minutes, and each phase says what the engine is doing meanwhile."""
    log.info("engine %s: %s ...", name, what)
    started = time.perf_counter()
    yield
    log.info("engine %s: %s done in %.1f s", name, what, time.perf_counter() - started)


@dataclass
class ModelBundle:
    """A loaded model, ready to serve any number of engines (one at a time)."""

    name: str
    shape: ModelShape
    model: LlamaModel
    tokenizer: Any | None
    eos_token_ids: tuple[int, ...]
    uses_kernels: bool


def load_bundle(config: BuiltinEngineConfig, loaded: LoadedModel | None = None) -> ModelBundle:
    """Load the model (or take `loaded`, whose state dict is consumed: q/k/v and gate/up are
    replaced by fused copies) and pick the attention path."""
    device = resolve_device(config.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise BuiltinConfigError("builtin engine.device", f"{config.device!r} is not valid here",
                                 "'cpu' or 'auto': CUDA is not available")
    kernels = load_kernels() if device.type == "cuda" and config.attention_backend != "torch" \
        else None
    try:
        backend = choose_backend(config.attention_backend, device.type, kernels is not None)
    except KernelsUnavailableError as exc:
        raise BuiltinConfigError("builtin engine.attention_backend", str(exc)) from None
    if backend == "torch":
        kernels = None
        if device.type == "cuda":
            log.warning("builtin engine on %s with attention_backend torch (asked for): torch "
                        "attention, no CUDA graphs, no fused kernels -- several times slower "
                        "per token than the Triton path", device)
    if config.num_threads is not None:
        torch.set_num_threads(config.num_threads)
    if loaded is None:
        loaded = load_model(config, device, resolve_dtype(config.dtype, device))
    model = LlamaModel(loaded.shape, loaded.state_dict, make_decode_fn(kernels),
                       max_positions=loaded.shape.max_position_embeddings)
    model.use_fused(kernels if config.fused_ops else None)
    # auto: the kernel wherever the Triton path runs on CUDA (without it — the torch
    # backend, an older parrot_kernels — SDPA); asked for by name, its absence is an error.
    choice = config.prefill_attention
    if choice == "paged" or (choice == "auto" and device.type == "cuda"):
        try:
            model.use_paged_prefill(kernels)
        except ValueError as exc:
            if choice == "paged":
                raise BuiltinConfigError("builtin engine.prefill_attention",
                                         f"'paged': {exc}") from None
    return ModelBundle(loaded.name, loaded.shape, model, loaded.tokenizer,
                       loaded.eos_token_ids, kernels is not None)


def build_engine(name: str, config: BuiltinEngineConfig, bundle: ModelBundle | None = None,
                 *, runner_type: type[ModelRunner] = ModelRunner,
                 scheduler_type: type[BatchScheduler] = BatchScheduler) -> BuiltinEngine:
    """Blocking when it loads the model (bundle None). `runner_type` / `scheduler_type`: a
    subclass to build instead (tests inject faults through them)."""
    if bundle is None:
        with startup_phase(name, f"loading {config.model} (converting its weights the first "
                                 "time)"):
            bundle = load_bundle(config)
    model = bundle.model
    num_blocks = num_blocks_for(config, bundle.shape, model.dtype, model.device)
    capacity = num_blocks * config.block_size
    limit = min(config.max_context_len or bundle.shape.max_position_embeddings,
                bundle.shape.max_position_embeddings)
    max_context_len = min(limit, capacity)
    if config.max_context_len is not None and max_context_len < limit:
        log.warning("max_context_len %d capped to the KV cache's %d tokens", limit, capacity)
    # Graphs replay the Triton kernels' fixed launch plans; the torch decode path would gather
    # whole padded tables, so it stays eager (as does everything on the CPU).
    use_graphs = config.cuda_graphs and model.device.type == "cuda" and bundle.uses_kernels
    kv_cache = KVCache(bundle.shape, num_blocks, config.block_size, model.dtype, model.device,
                       scratch_block=use_graphs)
    max_blocks = -(-max_context_len // config.block_size)
    graphs = prefill_graphs = None
    if use_graphs:
        graphs = DecodeGraphs(model, kv_cache, max_width=max_blocks,
                              max_batch=min(config.cuda_graph_max_batch, config.max_num_seqs))
        piecewise_tokens = min(config.prefill_graph_max_tokens, config.max_batch_tokens)
        if model.fused and piecewise_tokens > 0:
            prefill_graphs = PrefillGraphs(model, kv_cache, max_tokens=piecewise_tokens)
    runner = runner_type(model, kv_cache, use_shared_prefix=bundle.uses_kernels,
                         shared_prefix_min_tokens=config.shared_prefix_min_tokens,
                         shared_prefix_min_group=config.shared_prefix_min_group,
                         max_blocks=max_blocks, graphs=graphs,
                         max_decode_rows=config.max_num_seqs,
                         eos_token_ids=frozenset(bundle.eos_token_ids),
                         max_context_len=max_context_len, prefill_graphs=prefill_graphs)
    scheduler = scheduler_type(BlockManager(num_blocks, config.block_size),
                               max_batch_tokens=config.max_batch_tokens,
                               max_num_seqs=config.max_num_seqs,
                               max_context_len=max_context_len,
                               eos_token_ids=bundle.eos_token_ids,
                               reserve_next_block=graphs is not None)
    report = None
    # counts the Triton compilations and garbage collections of this process from here on:
    # the warm-up's (the start-up line) and, after it, the serving's (the engine's stats)
    pauses = pause_monitor(triton=bundle.uses_kernels)
    before_warmup = pauses.totals()
    if graphs is not None and config.warmup:
        # Before any graph is captured: the captured steps bake in this choice.
        choose_linear_layers(model, batch_buckets(graphs.max_batch))
        # Under the GPU's lock too, so that another engine starting on this GPU never times
        # its layers while this one captures and compiles (and compiles after this one, from
        # the kernels it left in Triton's cache).
        with exclusive_device(device_key(model.device)), \
                startup_phase(name, "warm-up: compiling kernels, capturing CUDA graphs"):
            report = warm_up(graphs, shared_prefix=bundle.uses_kernels,
                             min_prefix_blocks=-(-config.shared_prefix_min_tokens
                                                 // config.block_size),
                             max_decode_rows=config.max_num_seqs, prefill_graphs=prefill_graphs)
    warmup_pauses = pauses.totals() - before_warmup
    log.info("%s; %d Triton compilations in %.1f s", startup_summary(
        name, bundle, num_blocks, config.block_size, graphs, prefill_graphs, report),
        warmup_pauses.jit_compiles, warmup_pauses.jit_s)
    trace_path = config.step_trace_path(name)
    probe_mode = config.speed_probe_mode(model.device.type)
    return BuiltinEngine(name, bundle.name, runner, scheduler, bundle.tokenizer,
                         bundle.shape.vocab_size, config.seed,
                         trace=None if trace_path is None else StepTrace(trace_path),
                         pauses=pauses,
                         speed_probe=None if probe_mode is None else StartupProbe(
                             probe_mode, config.max_num_seqs, device_key(model.device)))


def choose_linear_layers(model: LlamaModel, buckets: list[int],
                         timer: Timer | None = None) -> LinearChoice | None:
    """Measure where the small-batch kernels beat cuBLAS on this GPU (linear_choice.py; one
    engine at a time per GPU: device_lock.py) and make the model follow it; None (the
    kernels' static table stays) when the model does not use them or the measurement fails
    (logged: an optimisation never stops the engine)."""
    kernels = model.small_batch_kernels
    if kernels is None:
        return None
    started = time.perf_counter()
    try:
        # another engine on this GPU times its own layers before or after, never at once
        with exclusive_device(device_key(model.device)) as waited:
            choice = measure_linear_choice(model.projection_weights(), buckets, kernels,
                                           timer or cuda_graph_timer())
    except Exception:  # noqa: BLE001 - see the docstring
        log.exception("timing the small-batch kernels failed; using their static table")
        return None
    model.linear_choice = choice
    log.info("linear layers: %s in %.1f s (%.1f s of it waiting for the GPU's timing lock)",
             choice.describe(), time.perf_counter() - started, waited)
    return choice


def startup_summary(name: str, bundle: ModelBundle, num_blocks: int, block_size: int,
                    graphs: DecodeGraphs | None, prefill_graphs: PrefillGraphs | None,
                    report: WarmupReport | None) -> str:
    """The one start-up line saying which paths this engine runs (never a silent slow one)."""
    model = bundle.model
    if graphs is None:
        graph_text = "CUDA graphs off"
    else:
        graph_text = (f"CUDA graph buckets: batch {batch_buckets(graphs.max_batch)} x "
                      f"{len(width_buckets(graphs.max_width))} table widths "
                      f"(1..{graphs.max_width} blocks), other steps "
                      + ("eager" if prefill_graphs is None else
                         f"as piecewise graphs to {prefill_graphs.max_tokens} rows "
                         f"(buckets {prefill_graphs.buckets})"))
    if model.linear_choice is not None:
        linear_text = f"{model.linear_choice.describe()} on this GPU, torch elsewhere"
    elif model.small_batch_kernels is not None:
        linear_text = "small-batch kernels to 16 rows (to 64 where measured faster), torch above"
    else:
        linear_text = "torch"
    return (f"builtin engine {name!r}: {bundle.name} on {model.device}, "
            f"dtype {str(model.dtype).replace('torch.', '')}, "
            f"attention {'triton' if bundle.uses_kernels else 'torch'}, "
            f"{'fused' if model.fused else 'unfused'} layer ops, "
            f"linear layers {linear_text}, {graph_text}, "
            f"{num_blocks} KV blocks of {block_size}; "
            + (report.describe() if report is not None else "no warm-up"))
