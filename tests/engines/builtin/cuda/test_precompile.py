"""The attention precompile: covering buckets found by a dry run, and worker processes that
compile them (here on the CPU, the kernels interpreted; on a GPU into Triton's disk cache)."""

from __future__ import annotations

import dataclasses
import functools
import json
import os

import pytest
import torch

from parrot.engines.builtin.build import load_bundle
from parrot.engines.builtin.cuda.precompile_plan import start_attention_precompile
from parrot.engines.builtin.config import BuiltinEngineConfig
from parrot.engines.builtin.cuda import precompile
from parrot.engines.builtin.cuda.graphs import DecodeGraphs
from parrot.engines.builtin.cuda.precompile import (AttentionPrecompile, PrecompileSpec,
                                                    WarmupCovering, cached_covering_keys,
                                                    covering_cache_path, covering_keys,
                                                    linear_launches, new_specialisations,
                                                    prefill_tiles)
from parrot.engines.builtin.cuda.precompile_worker import (TaskRunner, compile_share,
                                                           keep_covering)
from parrot.engines.builtin.cuda.precompile import run_padded_attention
from parrot.engines.builtin.cuda.buckets import (attention_keys, compiled_keys, paged_keys,
                                                 shared_keys, stopgap_keys)
from parrot.engines.builtin.cuda.warmup import compile_attention, warm_up
from parrot.engines.builtin.kv_cache import KVCache
from parrot.engines.builtin.llama.attention import make_decode_fn
from parrot.engines.builtin.llama.loader import peek_shape

kernels = pytest.importorskip("parrot_kernels")
from parrot_kernels.launch import launch_counts, specialisations  # noqa: E402

# the paged prefill attention's kernels (parrot_kernels._jit_prefill)
PREFILL_KERNELS = {"_paged_prefill_kernel", "_merge_prefill_splits_kernel"}

HEADS, KV_HEADS, HEAD_DIM, BLOCK = 4, 2, 16, 4


def runner(cache: torch.Tensor, dry: bool = True):
    decode = make_decode_fn(kernels)
    return functools.partial(lambda key: run_padded_attention(
        decode, key, cache[0], cache[1], 0, num_heads=HEADS, scale=HEAD_DIM ** -0.5, dry=dry))


def spec_of(key, run) -> set:
    with specialisations() as seen:
        run(key)
    return seen


def test_a_dry_run_notes_each_launch_and_launches_nothing():
    cache = torch.zeros(2, 1, BLOCK, KV_HEADS, HEAD_DIM)
    run = runner(cache)
    before = launch_counts()
    with specialisations() as seen:
        run((4, 0, 0, 8))
    assert launch_counts() == before                # nothing launched
    assert {name for name, _, _ in seen} >= {"_decode_partial_kernel"}
    runner(cache, dry=False)((4, 0, 0, 8))          # outside a dry run: launched
    assert sum(launch_counts()) > sum(before)


def test_a_dry_bucket_plans_the_launches_of_a_real_one():
    cache = torch.zeros(2, 1, BLOCK, KV_HEADS, HEAD_DIM)
    for key in attention_keys(8, 4, 8, 2, shared_prefix=True):
        assert spec_of(key, runner(cache, dry=True)) == spec_of(key, runner(cache, dry=False))


def test_covering_keys_use_every_specialisation_of_the_whole_list():
    cache = torch.zeros(2, 1, BLOCK, KV_HEADS, HEAD_DIM)
    run = runner(cache)
    keys = attention_keys(64, 16, 64, 2, shared_prefix=True)
    assert set(paged_keys(64, 64)) <= set(keys) and set(shared_keys(64, 64, 2)) <= set(keys)
    assert set(stopgap_keys(16, 64, 2)) <= set(keys) and len(keys) == len(set(keys))
    every = set().union(*(spec_of(k, run) for k in keys))
    chosen = covering_keys(run, keys)
    assert set().union(*(spec_of(k, run) for k in chosen)) == every
    assert len(chosen) < len(keys) // 4              # most buckets share a kernel
    # each chosen one brought something new, in the list's order
    seen: set = set()
    for key in chosen:
        new = spec_of(key, run)
        assert not new <= seen
        seen |= new
    assert chosen == [k for k in keys if k in set(chosen)]


def test_covering_buckets_are_found_once_and_read_at_the_next_start(tmp_path):
    cache = torch.zeros(2, 1, BLOCK, KV_HEADS, HEAD_DIM)
    run, dry_runs = runner(cache), []

    def counted(key):
        dry_runs.append(key)
        return run(key)

    keys = attention_keys(16, 8, 16, 2, shared_prefix=True)
    path = covering_cache_path(tmp_path, cache[0], HEADS, keys)
    assert path is not None and path.parent == tmp_path
    first, read = cached_covering_keys(counted, keys, path)
    assert not read and first == covering_keys(run, keys) and len(dry_runs) == len(keys)
    again, read = cached_covering_keys(counted, keys, path)
    assert read and again == first and len(dry_runs) == len(keys)     # no dry run
    # another bucket list, head count or cache layout is another file
    assert covering_cache_path(tmp_path, cache[0], HEADS, keys[:-1]) != path
    assert covering_cache_path(tmp_path, cache[0], HEADS * 2, keys) != path
    assert covering_cache_path(tmp_path, cache[0].to(torch.float16), HEADS, keys) != path
    assert covering_cache_path(None, cache[0], HEADS, keys) is None
    # a damaged file is found again and replaced
    path.write_text('[[1, 2, 3]]')
    assert cached_covering_keys(counted, keys, path) == (first, False)
    assert len(dry_runs) == 2 * len(keys)
    assert cached_covering_keys(counted, keys, path) == (first, True)


def test_the_specialisation_key_splits_what_triton_splits():
    from parrot_kernels.launch import specialisation

    def fn():      # any function: only its name is read
        return None

    t = torch.zeros(8)
    assert specialisation(fn, (t, 32), {}) == specialisation(fn, (t, 48), {})     # both % 16
    assert specialisation(fn, (t, 32), {}) != specialisation(fn, (t, 33), {})
    assert specialisation(fn, (t, 1), {}) != specialisation(fn, (t, 3), {})       # == 1
    assert specialisation(fn, (t, 3), {}) == specialisation(fn, (t, 5), {})
    assert specialisation(fn, (t, 3), {}) != specialisation(fn, (t, 2 ** 40 + 3), {})
    assert specialisation(fn, (t, 2.0), {}) == specialisation(fn, (t, 0.5), {})
    assert specialisation(fn, (t, 3), {"B": 4}) != specialisation(fn, (t, 3), {"B": 8})
    assert specialisation(fn, (t,), {}) != specialisation(fn, (t.half(),), {})
    assert specialisation(fn, (t,), {}) != specialisation(fn, (t[1:],), {})     # misaligned


def small_spec(keys, linear=(), **more) -> PrecompileSpec:
    return PrecompileSpec(device="cpu", dtype="float32", num_heads=HEADS,
                          num_kv_heads=KV_HEADS, head_dim=HEAD_DIM, block_size=BLOCK,
                          keys=tuple(keys), linear=tuple(linear), **more)


def test_spec_round_trips_through_json(tmp_path):
    from parrot.engines.builtin.cuda.precompile import stamp_path

    covering = WarmupCovering(str(tmp_path), max_batch=4, max_width=8, max_rows=8,
                              min_prefix_blocks=2, shared_prefix=True, defer_above=None)
    spec = small_spec([(1, 0, 0, 1), (2, 1, 2, 4)], [(64, 32, 1), (64, 32, 4)],
                      prefill=prefill_tiles(kernels), covering=covering)
    assert spec.prefill == tuple(dataclasses.astuple(v) for t in kernels.PREFILL_TUNINGS
                                 for v in (t, dataclasses.replace(t, kv_splits=2)))
    assert {v[-1] for v in spec.prefill} == {None, 2}          # a None field survives JSON
    again = PrecompileSpec.from_json(spec.to_json())
    assert again == spec and isinstance(again.covering, WarmupCovering)
    assert again.covering.buckets() == covering.buckets() != []
    assert spec.tasks() == [("attention", 1, 0, 0, 1), ("attention", 2, 1, 2, 4),
                            ("linear", 64, 32, 1), ("linear", 64, 32, 4)] + [
        ("prefill", i) for i in range(len(spec.prefill))]
    # older specs (no prefill, no covering) still read; the stamp changes with the new fields
    plain = small_spec(spec.keys, spec.linear)
    assert PrecompileSpec.from_json(plain.to_json()) == plain
    assert plain.prefill == () and plain.covering is None
    assert stamp_path(plain) != stamp_path(dataclasses.replace(plain, prefill=spec.prefill))
    assert stamp_path(plain) != stamp_path(dataclasses.replace(plain, covering=covering))


def test_workers_default_to_every_core_but_the_engines(monkeypatch):
    """Triton compiles one kernel at a time per process: a worker per core, the engine's own
    core left to it, at most MAX_WORKERS; a process pinned to fewer cores counts those."""
    from parrot.engines.builtin.cuda.early_precompile import MAX_WORKERS, default_workers

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(4096)), raising=False)
    for cores, workers in ((16, 15), (8, 7), (2, 1), (1, 1), (None, 1),
                           (MAX_WORKERS + 1, MAX_WORKERS), (512, MAX_WORKERS)):
        monkeypatch.setattr(os, "cpu_count", lambda cores=cores: cores)
        assert default_workers() == workers, cores
    assert 16 <= MAX_WORKERS <= 64
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    assert default_workers() == 3                   # pinned to 4 of the 16
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    assert default_workers() == 15                  # no affinity on this OS


def linear_specs(n: int, k: int, rows: int) -> set:
    """The specialisations of the small-batch linear at this shape, by a dry run."""
    with specialisations() as seen:
        kernels.small_batch_linear(torch.zeros(rows, k), torch.zeros(n, k))
    return seen


def test_workers_compile_the_linear_choices_kernels_too():
    """The small-batch linear launches the engine's linear choice times (each projection
    shape at each row bucket) are dealt to the workers with the attention's: every
    specialisation once, all of them those the engine's own launches meet."""
    from parrot.engines.builtin.build import load_bundle as bundle_of

    model = bundle_of(BuiltinEngineConfig(model="tiny", dtype="float32", device="cpu",
                                          num_blocks=8)).model
    shapes = list(model.projection_weights())
    assert shapes == peek_shape(BuiltinEngineConfig(model="tiny")).projection_shapes()
    linear = linear_launches(peek_shape(BuiltinEngineConfig(model="tiny")), [4, 1, 2, 8, 2], 4)
    assert linear == [(n, k, rows) for n, k in shapes for rows in (1, 2, 4)]
    keys = paged_keys(2, 2)
    cache = torch.zeros(2, 1, BLOCK, KV_HEADS, HEAD_DIM)
    every = (set().union(*(spec_of(k, runner(cache)) for k in keys))
             | set().union(*(linear_specs(*launch) for launch in linear)))
    assert any(name == "_gemv_kernel" for name, _, _ in every)
    before = launch_counts()
    shares = [compile_share(small_spec(keys, linear), i, 2) for i in range(2)]
    assert sum(shares) == len(every)
    assert sum(launch_counts()) - sum(before) == len(every)   # one launch each


def test_workers_compile_each_specialisation_once_between_them():
    from parrot_kernels.launch import launching_only

    keys = attention_keys(8, 4, 8, 2, shared_prefix=True)
    cache = torch.zeros(2, 1, BLOCK, KV_HEADS, HEAD_DIM)
    run = runner(cache)
    every = set().union(*(spec_of(k, run) for k in keys))
    spec = small_spec(keys)
    before = launch_counts()
    shares = [compile_share(spec, i, 3) for i in range(3)]
    assert sum(shares) == len(every) and max(shares) - min(shares) <= 1
    # exactly one launch per specialisation was made, all three workers together
    assert sum(launch_counts()) - sum(before) == len(every)
    # launching_only: the chosen specialisations launch, the others of the bucket do not
    key = max(keys, key=lambda k: len(spec_of(k, run)))
    specs = spec_of(key, run)
    for allowed, launches in ((set(), 0), (specs, len(specs))):
        before = launch_counts()
        with launching_only(allowed):
            runner(cache, dry=False)(key)
        assert sum(launch_counts()) - sum(before) == launches


@pytest.fixture
def launched(monkeypatch) -> list:
    """The specialisation of every launch really made (not a dry run's, not one
    `launching_only` skipped) through the kernels' LaunchCache while the test runs."""
    from parrot_kernels import launch

    made: list = []
    original = launch.LaunchCache.__call__

    def spy(self, grid, *args, **kwargs):
        one = launch.specialisation(self.fn, args, kwargs)
        if launch.launches_now(one):
            made.append(one)
        return original(self, grid, *args, **kwargs)

    monkeypatch.setattr(launch.LaunchCache, "__call__", spy)
    return made


def tiny_graphs(paged_prefill: bool = False) -> DecodeGraphs:
    """Uncaptured decode graphs of the tiny model on the kernels (interpreted), as the
    engine's warm-up runs them: 2 rows, tables of up to 4 blocks of BLOCK."""
    bundle = load_bundle(BuiltinEngineConfig(model="tiny", dtype="float32", device="cpu",
                                             num_blocks=16))
    bundle.model.use_decode(make_decode_fn(kernels))
    if paged_prefill:
        bundle.model.use_paged_prefill(kernels)
    kv = KVCache(bundle.shape, 16, BLOCK, torch.float32, torch.device("cpu"),
                 scratch_block=True)
    return DecodeGraphs(bundle.model, kv, max_batch=2, max_width=4, capture=False)


def spec_for(graphs: DecodeGraphs, keys, **more) -> PrecompileSpec:
    shape = graphs.model.shape
    return PrecompileSpec(device="cpu", dtype="float32", num_heads=shape.num_heads,
                          num_kv_heads=shape.num_kv_heads, head_dim=shape.head_dim,
                          block_size=graphs.kv.block_size, keys=tuple(keys), **more)


def test_workers_compile_the_paged_prefills_tiles_each_once_between_them(launched):
    """The paged prefill attention's specialisations the warm-up's prefill launches (a tile
    whole and split, and the splits' merge) are dealt to the workers with the attention's:
    each launched exactly once over all the workers."""
    from parrot.engines.builtin.cuda.warmup import prefill

    graphs = tiny_graphs(paged_prefill=True)
    with specialisations() as engine:             # the engine's own prefill, a dry run
        prefill(graphs)
    engine_prefill = {one for one in engine if one[0] in PREFILL_KERNELS}
    assert {one[0] for one in engine_prefill} == PREFILL_KERNELS
    assert len(engine_prefill) == 2 * len(kernels.PREFILL_TUNINGS) + 2  # + a merge per tile
    keys = paged_keys(2, 2)
    spec = spec_for(graphs, keys, prefill=prefill_tiles(kernels))
    run = TaskRunner(spec)
    found = new_specialisations(functools.partial(run, dry=True), spec.tasks())
    assert set().union(*(set(specs) for task, specs in found
                         if task[0] == "prefill")) == engine_prefill
    attention = set().union(*(spec_of(("attention", *k), functools.partial(run, dry=True))
                              for k in keys))
    every = attention | engine_prefill
    # a worker a specialisation each too: a split tile's merge launched without its partials
    for workers in (3, len(every)):
        launched.clear()
        shares = [compile_share(spec, i, workers) for i in range(workers)]
        assert sum(shares) == len(every) and max(shares) - min(shares) <= 1
        assert sorted(launched, key=repr) == sorted(every, key=repr)   # each exactly once
    # without prefill tiles (a model prefilling through torch) none of them is launched
    launched.clear()
    compile_share(dataclasses.replace(spec, prefill=()), 0, 1)
    assert not {one[0] for one in launched} & PREFILL_KERNELS


def test_worker_0_hands_the_warm_up_its_covering_buckets(tmp_path, monkeypatch):
    """Worker 0 keeps the covering of the warm-up's bucket list, from its own dry run, in the
    file the warm-up reads (same key, same buckets as the warm-up's own dry run finds); the
    warm-up then runs no dry run of its own. Other limits name another file."""
    graphs = tiny_graphs()
    covering = WarmupCovering(str(tmp_path), max_batch=2, max_width=4, max_rows=4,
                              min_prefix_blocks=2, shared_prefix=True, defer_above=1)
    engine_keys = compiled_keys(2, 4, max_rows=4, shared_prefix=True, min_prefix_blocks=2,
                                defer_above=1)
    assert covering.buckets() == engine_keys
    expected = covering_keys(functools.partial(compile_attention, graphs, dry=True),
                             engine_keys)
    path = covering_cache_path(tmp_path, graphs.kv.layers[0][0], graphs.model.shape.num_heads,
                               engine_keys)
    keys = attention_keys(4, 2, 4, 2, shared_prefix=True)
    assert set(engine_keys) < set(keys)
    spec = spec_for(graphs, keys, linear=[(64, 64, 1)], covering=covering)
    compile_share(spec, 1, 2)
    assert path is not None and not path.exists()            # only worker 0 writes it
    compile_share(spec, 0, 2)
    assert list(tmp_path.iterdir()) == [path]
    assert json.loads(path.read_text()) == [list(k) for k in expected]
    # buckets the workers' list lacks are dry-run for it: the same file
    path.unlink()
    assert keep_covering(covering, [], TaskRunner(spec_for(graphs, []))) == path
    assert json.loads(path.read_text()) == [list(k) for k in expected]
    # an engine sized otherwise (more rows) looks for another file
    assert covering_cache_path(tmp_path, graphs.kv.layers[0][0], graphs.model.shape.num_heads,
                               WarmupCovering(
                                   covering.folder, covering.max_batch, covering.max_width, 8,
                                   covering.min_prefix_blocks, covering.shared_prefix,
                                   covering.defer_above).buckets()) != path
    # the warm-up reads it: no dry run of its own
    monkeypatch.setattr(precompile, "covering_keys",
                        lambda *args: pytest.fail("the warm-up ran its own dry run"))
    report = warm_up(graphs, shared_prefix=True, min_prefix_blocks=2, max_decode_rows=4,
                     defer_above=1, covering_cache=tmp_path)
    assert report.covering == len(expected) and report.shared_shapes == len(engine_keys)


def test_the_workers_predict_the_warm_ups_buckets_and_prefill(monkeypatch, tmp_path):
    """The spec a CUDA start gives its workers (start_attention_precompile; CUDA faked): the
    covering list is the warm-up's of an engine whose KV cache holds the longest context
    (build_engine's sizing, auto or set; a cache of set size bounds the auto limits and the
    width), the prefill tiles those its prefill runs."""
    from parrot.engines.builtin.cuda import precompile_plan as plans
    from parrot.engines.builtin.sizing import context_limit, size_serving

    specs: list[PrecompileSpec] = []

    class Started:
        def __init__(self, spec, workers, stamp):
            specs.append(spec)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (1 << 40, 1 << 40))
    monkeypatch.setattr(plans, "stamp_path", lambda spec: tmp_path / "no-stamp")
    monkeypatch.setattr(plans, "AttentionPrecompile", Started)
    for more in ({}, {"max_num_seqs": 32, "cuda_graph_max_batch": 64},     # capped to 32
                 {"max_num_seqs": 64, "cuda_graph_max_batch": 16, "eager_graph_rows": 4},
                 {"lazy_graphs": False, "prefill_attention": "sdpa"},
                 {"num_blocks": 512}):           # a set cache bounds the auto limits
        config = BuiltinEngineConfig(model="tiny", device="cuda:0", dtype="float16",
                                     cache_dir=str(tmp_path), **more)
        assert start_attention_precompile(config, workers=2) is not None
        spec = specs.pop()
        assert spec.covering is not None
        assert spec.covering.folder == str(tmp_path / "attention_covering")
        shape = peek_shape(config)
        size = size_serving(config, shape, dtype_bytes=2, on_cuda=True, free_bytes=1 << 40)
        width = -(-min(context_limit(config, shape), size.kv_tokens) // size.block_size)
        assert spec.covering.buckets() == compiled_keys(   # what build_engine's warm_up runs
            size.graph_max_batch, width, max_rows=max(size.graph_max_batch, size.max_num_seqs),
            shared_prefix=True, min_prefix_blocks=config.shared_prefix_min_blocks,
            defer_above=config.eager_graph_rows if config.lazy_graphs else None)
        assert set(spec.covering.buckets()) <= set(spec.keys)
        assert spec.prefill == (() if more.get("prefill_attention") == "sdpa"
                                else prefill_tiles(kernels))


def test_worker_processes_compile_report_and_stamp(tmp_path):
    keys = paged_keys(4, 4)
    covering = WarmupCovering(str(tmp_path / "covering"), max_batch=2, max_width=4,
                              max_rows=4, min_prefix_blocks=2, shared_prefix=False,
                              defer_above=None)
    spec = small_spec(keys, prefill=prefill_tiles(kernels), covering=covering)
    run = TaskRunner(spec)
    every = set().union(*(spec_of(task, functools.partial(run, dry=True))
                          for task in spec.tasks()))
    assert {one[0] for one in every} >= PREFILL_KERNELS
    stamp = tmp_path / "stamps" / "one"
    report = AttentionPrecompile(spec, 2, stamp).wait(timeout_s=240)
    assert (report.workers, report.keys, report.failed) == (2, len(keys), 0)
    assert len(list((tmp_path / "covering").iterdir())) == 1      # worker 0's covering file
    assert report.compiled == len(every) > 0
    assert f"2 workers compiled the {len(every)} kernels of {len(keys)} attention buckets" \
        in report.describe()
    assert stamp.read_text() == f"{len(every)} kernels of {len(keys)} buckets\n"


def test_the_stamp_names_the_spec_and_lives_in_tritons_cache():
    from parrot.engines.builtin.cuda.precompile import stamp_path, triton_cache_dir

    one, other = small_spec(paged_keys(4, 4)), small_spec(paged_keys(8, 4))
    assert stamp_path(one) == stamp_path(small_spec(paged_keys(4, 4)))
    assert stamp_path(one) != stamp_path(other)
    assert stamp_path(one).parent == triton_cache_dir() / "parrot-precompiled"


def test_a_failing_worker_never_fails_the_start(tmp_path):
    bad = PrecompileSpec(device="cpu", dtype="no_such_dtype", num_heads=HEADS,
                         num_kv_heads=KV_HEADS, head_dim=HEAD_DIM, block_size=BLOCK,
                         keys=((1, 0, 0, 1),))
    stamp = tmp_path / "stamp"
    report = AttentionPrecompile(bad, 1, stamp).wait(timeout_s=240)
    assert (report.failed, report.compiled) == (1, 0)
    assert "1 failed" in report.describe()
    assert not stamp.exists()                   # the next start tries again


def test_no_precompile_off_cuda_and_shapes_known_before_loading():
    assert start_attention_precompile(BuiltinEngineConfig(model="tiny", device="cpu")) is None
    config = BuiltinEngineConfig(model="llama-7b", max_context_len=8192)
    shape = peek_shape(config)
    assert shape is not None and shape.max_position_embeddings == 8192
    assert (shape.num_heads, shape.head_dim) == (32, 128)
    bundle = load_bundle(BuiltinEngineConfig(model="tiny", dtype="float32", device="cpu",
                                             num_blocks=8))
    tiny = peek_shape(BuiltinEngineConfig(model="tiny"))
    assert tiny is not None and (tiny.num_heads, tiny.num_kv_heads, tiny.head_dim) == (
        bundle.shape.num_heads, bundle.shape.num_kv_heads, bundle.shape.head_dim)
    assert peek_shape(BuiltinEngineConfig(model="/no/such/folder")) is None


def test_workers_start_only_where_the_memory_beside_the_weights_holds_them():
    from parrot.engines.builtin.cuda.precompile import (SPARE_BYTES, WORKER_BYTES,
                                                        workers_for_memory)
    from parrot.engines.builtin.llama.shapes import NAMED_SHAPES

    weights = NAMED_SHAPES["llama-7b"].num_parameters() * 2
    assert 6.7e9 < NAMED_SHAPES["llama-7b"].num_parameters() < 6.8e9
    assert workers_for_memory(8, 140 << 30, weights) == 8              # an H200
    assert workers_for_memory(8, 15 << 30, weights) == 0               # 15 GiB free: none
    room = weights + SPARE_BYTES + 3 * WORKER_BYTES
    assert workers_for_memory(8, room, weights) == 3
    assert workers_for_memory(2, room, weights) == 2
    # each worker holding a 1 GiB linear weight besides: half as many fit
    assert workers_for_memory(8, weights + (2 << 30) + (6 << 30), weights, 1 << 30) == 3
