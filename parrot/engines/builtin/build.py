"""Assemble a BuiltinEngine from its config: load -> model -> KV cache -> scheduler -> engine.

`load_bundle` (slow: weights) and `build_engine` (fast: KV cache, scheduler) are separate so
tests and benchmarks can run several engines over one loaded model.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable
from typing import Any

import torch

from parrot.engines.builtin.llama.attention import (KernelsUnavailableError, choose_backend,
                                                    load_kernels, make_decode_fn)
from parrot.engines.builtin.block_manager import BlockManager
from parrot.engines.builtin.config import BuiltinConfigError, BuiltinEngineConfig
from parrot.engines.builtin.cuda.device_lock import device_key, exclusive_device
from parrot.engines.builtin.engine import BuiltinEngine
from parrot.engines.builtin.cuda.graphs import DecodeGraphs
from parrot.engines.builtin.kv_cache import KVCache, available_bytes
from parrot.engines.builtin.llama.linear_choice import (LinearChoice, Timer, cached_linear_choice,
                                                        choice_key, cuda_graph_timer,
                                                        measure_linear_choice)
from parrot.engines.builtin.observe.host_pauses import pause_monitor
from parrot.engines.speed_probe import PROBE_VERSION
from parrot.engines.builtin.llama.loader import (LoadedModel, load_model, resolve_device,
                                                 resolve_dtype)
from parrot.engines.builtin.llama.tokenizer import TokenizerLoad
from parrot.engines.builtin.llama.model import LlamaModel
from parrot.engines.builtin.cuda.prefill_graphs import PrefillGraphs
from parrot.engines.builtin.runner import ModelRunner
from parrot.engines.builtin.batch_scheduler import BatchScheduler
from parrot.engines.builtin.llama.shapes import ModelShape
from parrot.engines.builtin.sizing import (ServingSize, batch_buckets, context_limit,
                                           size_serving)
from parrot.engines.builtin.step_budget import StepBudget
from parrot.engines.builtin.observe.step_trace import StepTrace
from parrot.engines.builtin.observe.startup_clock import StartupClock, process_age_s
from parrot.engines.builtin.observe.startup_probe import StartupProbe
from parrot.engines.builtin.start_cache import cache_key, software
from parrot.engines.builtin.cuda.early_precompile import EarlyPrecompile
from parrot.engines.builtin.cuda.precompile_plan import (covering_folder, join_precompile,
                                                         start_attention_precompile,
                                                         wants_paged_prefill)
from parrot.engines.builtin.cuda.buckets import width_buckets
from parrot.engines.builtin.cuda.warmup import WarmupReport, warm_up

log = logging.getLogger(__name__)

# (model, kv cache, max_width=, max_batch=) -> the engine's decode graphs (build_engine)
DecodeGraphsFactory = Callable[..., DecodeGraphs]
# (model, kv cache, max_tokens=) -> the engine's piecewise prefill graphs (build_engine)
PrefillGraphsFactory = Callable[..., PrefillGraphs]


@dataclass
class ModelBundle:
    """A loaded model, ready to serve any number of engines (one at a time)."""

    name: str
    shape: ModelShape
    model: LlamaModel
    tokenizer_source: Any | None    # the tokenizer, or its TokenizerLoad (loader.py)
    eos_token_ids: tuple[int, ...]
    uses_kernels: bool

    @property
    def tokenizer(self) -> Any | None:
        """The tokenizer, waiting for its background load on first use."""
        if isinstance(self.tokenizer_source, TokenizerLoad):
            self.tokenizer_source = self.tokenizer_source.result()
        return self.tokenizer_source


def load_bundle(config: BuiltinEngineConfig, loaded: LoadedModel | None = None,
                clock: StartupClock | None = None) -> ModelBundle:
    """Load the model (or take `loaded`, whose state dict is consumed: q/k/v and gate/up are
    replaced by fused copies) and pick the attention path. `clock`: the engine's start-up
    clock (the load and convert phases logged and timed)."""
    clock = clock or StartupClock("load", quiet=True)
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
        with clock.phase("load", f"loading {config.model!r} onto {device}"):
            loaded = load_model(config, device, resolve_dtype(config.dtype, device))
    with clock.phase("convert", "converting the weights (fused q/k/v and gate/up)"):
        model = LlamaModel(loaded.shape, loaded.state_dict, make_decode_fn(kernels),
                           max_positions=loaded.shape.max_position_embeddings)
        model.use_fused(kernels if config.fused_ops else None)
    # auto: the kernel wherever the Triton path runs on CUDA (without it — the torch
    # backend, an older parrot_kernels — SDPA); asked for by name, its absence is an error.
    choice = config.prefill_attention
    if wants_paged_prefill(config, device):
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
                 scheduler_type: type[BatchScheduler] = BatchScheduler,
                 clock: StartupClock | None = None,
                 decode_graphs: DecodeGraphsFactory | None = None,
                 prefill_graphs: PrefillGraphsFactory | None = None,
                 early_precompile: EarlyPrecompile | None = None) -> BuiltinEngine:
    """Blocking when it loads the model (bundle None). `runner_type` / `scheduler_type`: a
    subclass to build instead (tests inject faults through them). `clock`: the start-up's
    phases (startup_clock.py; by default a clock started here). `decode_graphs`: makes the
    decode graphs over the engine's KV cache, on any device (the CPU tests run the graph and
    launch-ahead paths on graphs that do not capture); by default CUDA graphs wherever the
    kernels run on CUDA, warmed up before the engine is returned. `prefill_graphs`: likewise
    the piecewise prefill graphs (by default where the fused layer ops run in CUDA graphs).
    `early_precompile`: the precompile workers `create_engine` started before the imports
    (early_precompile.py), adopted instead of starting others."""
    if clock is None:
        clock = StartupClock(name)
        age = process_age_s()
        if age is not None:
            log.info("engine %s start-up: the process started %.1f s ago (interpreter, "
                     "imports, config)", name, age)
    # compiling the attention kernels in other processes while this one loads the weights,
    # joined before the KV cache is sized from the free memory (their CUDA contexts hold some)
    precompile = start_attention_precompile(config, early=early_precompile)
    if bundle is None:
        bundle = load_bundle(config, clock=clock)
    if precompile is not None:
        with clock.phase("precompile", "waiting for the attention precompile workers"):
            log.info("%s", join_precompile(precompile, early_precompile).describe())
    model = bundle.model
    size = serving_size(config, bundle)
    num_blocks, max_num_seqs = size.num_blocks, size.max_num_seqs
    capacity = size.kv_tokens
    limit = context_limit(config, bundle.shape)
    max_context_len = min(limit, capacity)
    if config.max_context_len is not None and max_context_len < limit:
        log.warning("max_context_len %d capped to the KV cache's %d tokens", limit, capacity)
    # Graphs replay the Triton kernels' fixed launch plans; the torch decode path would gather
    # whole padded tables, so it stays eager (as does everything on the CPU).
    cuda_graphs = config.cuda_graphs and model.device.type == "cuda" and bundle.uses_kernels
    make_decode = decode_graphs or (DecodeGraphs if cuda_graphs else None)
    piecewise_tokens = min(config.prefill_graph_max_tokens, config.max_batch_tokens)
    make_prefill = prefill_graphs or (
        PrefillGraphs if cuda_graphs and model.fused and piecewise_tokens > 0 else None)
    with clock.phase("kv cache", f"allocating {size.describe()}"):
        kv_cache = KVCache(bundle.shape, num_blocks, config.block_size, model.dtype,
                           model.device,
                           scratch_block=make_decode is not None or make_prefill is not None)
    max_blocks = -(-max_context_len // config.block_size)
    graphs = None if make_decode is None else make_decode(
        model, kv_cache, max_width=max_blocks, max_batch=size.graph_max_batch)
    piecewise = None if make_prefill is None else make_prefill(
        model, kv_cache, max_tokens=piecewise_tokens)
    runner = runner_type(model, kv_cache, use_shared_prefix=bundle.uses_kernels,
                         shared_prefix_min_tokens=config.shared_prefix_min_tokens,
                         shared_prefix_min_group=config.shared_prefix_min_group,
                         max_blocks=max_blocks, graphs=graphs,
                         max_decode_rows=max_num_seqs,
                         eos_token_ids=frozenset(bundle.eos_token_ids),
                         max_context_len=max_context_len, prefill_graphs=piecewise)
    budget = StepBudget(config.max_batch_tokens,
                        step_tokens=(config.step_token_budget
                                     if isinstance(config.step_token_budget, int) else None),
                        itl_target_ms=config.itl_target_ms)
    scheduler = scheduler_type(BlockManager(num_blocks, config.block_size,
                                            prefix_caching=config.prefix_caching),
                               max_batch_tokens=config.max_batch_tokens,
                               max_num_seqs=max_num_seqs,
                               max_context_len=max_context_len,
                               eos_token_ids=bundle.eos_token_ids,
                               reserve_next_block=graphs is not None, step_budget=budget,
                               max_mixed_decode_rows=config.max_mixed_decode_rows)
    report = None
    # counts the Triton compilations and garbage collections of this process from here on:
    # the warm-up's (the start-up line) and, after it, the serving's (the engine's stats)
    pauses = pause_monitor(triton=bundle.uses_kernels)
    before_warmup = pauses.totals()
    if graphs is not None and cuda_graphs and config.warmup:
        # Before any graph is captured: the captured steps bake in this choice.
        with clock.phase("linear choice", "timing the small-batch linear kernels"):
            choose_linear_layers(model, batch_buckets(graphs.max_batch),
                                 cache_dir=config.resolved_cache_dir() / "linear_choice")
        # Under the GPU's lock too, so that another engine starting on this GPU never times
        # its layers while this one captures and compiles (and compiles after this one, from
        # the kernels it left in Triton's cache).
        with exclusive_device(device_key(model.device)):
            report = warm_up(graphs, shared_prefix=bundle.uses_kernels,
                             min_prefix_blocks=config.shared_prefix_min_blocks,
                             max_decode_rows=max_num_seqs, prefill_graphs=piecewise,
                             clock=clock,
                             defer_above=config.eager_graph_rows if config.lazy_graphs
                             else None,
                             covering_cache=covering_folder(config))
    warmup_pauses = pauses.totals() - before_warmup
    log.info("%s; %d Triton compilations in %.1f s; %s", startup_summary(
        name, bundle, size, graphs, piecewise, report),
        warmup_pauses.jit_compiles, warmup_pauses.jit_s, budget.describe())
    trace_path = config.step_trace_path(name)
    probe_mode = config.speed_probe_mode(model.device.type)
    if probe_mode is None:      # else the engine logs it after its probe, at its first start
        log.info("%s", clock.summary())
    return BuiltinEngine(name, bundle.name, runner, scheduler, bundle.tokenizer,
                         bundle.shape.vocab_size, config.seed,
                         trace=None if trace_path is None else StepTrace(trace_path),
                         pauses=pauses,
                         speed_probe=None if probe_mode is None else StartupProbe(
                             probe_mode, max_num_seqs, device_key(model.device),
                             speed_profile_path(config, bundle, size, probe_mode)),
                         startup_clock=clock, hidden_stops=config.is_random_shape,
                         prompt_in_generate=config.prompt_in_generate)


def speed_profile_path(config: BuiltinEngineConfig, bundle: ModelBundle, size: ServingSize,
                       probe_mode: str) -> Path | None:
    """Where a GPU engine's start-up speed profile is kept (observe/startup_probe.py; None on
    other devices, where a probe is asked for explicitly and runs each time): keyed by what the
    engine's speed depends on that a start knows. The KV cache's size is left out (auto sizing
    reads the free memory, which moves a little from start to start; the probe's contexts
    fit either way); the config's own settings, explicit sizes among them, are in, and the
    probe's version (a profile an older probe measured wrongly is measured again)."""
    if bundle.model.device.type != "cuda":
        return None
    parts = software(bundle.model.device, load_kernels() if bundle.uses_kernels else None) + [
        bundle.name, repr(bundle.shape), str(bundle.model.dtype), size.block_size,
        size.max_num_seqs, size.graph_max_batch,
        sorted(dataclasses.asdict(config).items(), key=lambda kv: kv[0]), probe_mode,
        PROBE_VERSION]
    return config.resolved_cache_dir() / "speed_profile" / f"{cache_key(parts)}.json"


def serving_size(config: BuiltinEngineConfig, bundle: ModelBundle) -> ServingSize:
    """The KV cache, max_num_seqs and graph limit this engine serves with (sizing.py), from
    the memory left now that the weights are loaded. Raises BuiltinConfigError when the cache
    would get no block."""
    model = bundle.model
    needs_free = config.num_blocks is None and config.kv_cache_tokens is None and (
        config.kv_cache_fraction is not None or model.device.type == "cuda")
    try:
        return size_serving(config, bundle.shape, dtype_bytes=model.embed.element_size(),
                            on_cuda=model.device.type == "cuda",
                            free_bytes=available_bytes(model.device) if needs_free else None)
    except ValueError as exc:
        raise BuiltinConfigError("builtin engine.kv_cache_fraction", str(exc)) from None


def choose_linear_layers(model: LlamaModel, buckets: list[int],
                         timer: Timer | None = None, *,
                         cache_dir: Path | None = None) -> LinearChoice | None:
    """Measure where the small-batch kernels beat cuBLAS on this GPU (linear_choice.py; one
    engine at a time per GPU: device_lock.py) and make the model follow it; None (the
    kernels' static table stays) when the model does not use them or the measurement fails
    (logged: an optimisation never stops the engine). `cache_dir`: a choice measured before
    for the same GPU, software and shapes is read from there instead (and a new one kept)."""
    kernels = model.small_batch_kernels
    if kernels is None:
        return None
    started = time.perf_counter()
    waited = 0.0
    try:
        weights = model.projection_weights()
        path = (None if cache_dir is None
                else cache_dir / f"{choice_key(weights, buckets, kernels)}.json")

        def measure() -> LinearChoice:
            nonlocal waited
            # another engine on this GPU times its own layers before or after, never at once
            with exclusive_device(device_key(model.device)) as waited:
                return measure_linear_choice(weights, buckets, kernels,
                                             timer or cuda_graph_timer())
        choice, cached = cached_linear_choice(measure, path)
    except Exception:  # noqa: BLE001 - see the docstring
        log.exception("timing the small-batch kernels failed; using their static table")
        return None
    model.linear_choice = choice
    if cached:
        log.info("linear layers: %s (measured before on this GPU, read from %s)",
                 choice.describe(), path)
    else:
        log.info("linear layers: %s in %.1f s (%.1f s of it waiting for the GPU's timing "
                 "lock)", choice.describe(), time.perf_counter() - started, waited)
    return choice


def startup_summary(name: str, bundle: ModelBundle, size: ServingSize,
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
            f"{size.describe()}; "
            + (report.describe() if report is not None else "no warm-up"))
