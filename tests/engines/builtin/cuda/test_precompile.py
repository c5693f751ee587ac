"""The attention precompile: covering buckets found by a dry run, and worker processes that
compile them (here on the CPU, the kernels interpreted; on a GPU into Triton's disk cache)."""

from __future__ import annotations

import functools

import pytest
import torch

from parrot.engines.builtin.build import load_bundle, start_attention_precompile
from parrot.engines.builtin.config import BuiltinEngineConfig
from parrot.engines.builtin.cuda.precompile import (AttentionPrecompile, PrecompileSpec,
                                                    cached_covering_keys, compile_share,
                                                    covering_cache_path, covering_keys,
                                                    linear_launches)
from parrot.engines.builtin.cuda.precompile import run_padded_attention
from parrot.engines.builtin.cuda.warmup import (attention_keys, paged_keys,
                                                shared_keys, stopgap_keys)
from parrot.engines.builtin.llama.attention import make_decode_fn
from parrot.engines.builtin.llama.loader import peek_shape

kernels = pytest.importorskip("parrot_kernels")
from parrot_kernels.launch import launch_counts, specialisations  # noqa: E402

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


def small_spec(keys, linear=()) -> PrecompileSpec:
    return PrecompileSpec(device="cpu", dtype="float32", num_heads=HEADS,
                          num_kv_heads=KV_HEADS, head_dim=HEAD_DIM, block_size=BLOCK,
                          keys=tuple(keys), linear=tuple(linear))


def test_spec_round_trips_through_json():
    spec = small_spec([(1, 0, 0, 1), (2, 1, 2, 4)], [(64, 32, 1), (64, 32, 4)])
    assert PrecompileSpec.from_json(spec.to_json()) == spec
    assert spec.tasks() == [("attention", 1, 0, 0, 1), ("attention", 2, 1, 2, 4),
                            ("linear", 64, 32, 1), ("linear", 64, 32, 4)]


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


def test_worker_processes_compile_report_and_stamp(tmp_path):
    keys = paged_keys(4, 4)
    cache = torch.zeros(2, 1, BLOCK, KV_HEADS, HEAD_DIM)
    run = runner(cache)
    every = set().union(*(spec_of(k, run) for k in keys))
    stamp = tmp_path / "stamps" / "one"
    report = AttentionPrecompile(small_spec(keys), 2, stamp).wait(timeout_s=240)
    assert (report.workers, report.keys, report.failed) == (2, len(keys), 0)
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
