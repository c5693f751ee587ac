"""Precompile workers started from the engine's config before its imports (early_precompile.py),
and the engine adopting, trimming or stopping them (precompile_plan.start_attention_precompile)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time

import pytest
import torch

from parrot.engines.builtin import build
from parrot.engines.builtin.cuda import precompile_plan as plans
from parrot.engines.builtin.cuda.precompile_plan import (join_precompile, precompile_plan,
                                                         start_attention_precompile)
from parrot.engines.builtin.config import BuiltinEngineConfig
from parrot.engines.builtin.cuda.early_precompile import (MARKER_IGNORED_KEYS,
                                                          EarlyPrecompile, config_job,
                                                          launch_early_precompile,
                                                          marker_path, worker_command)
from parrot.engines.builtin.cuda.precompile import (SPARE_BYTES, WORKER_BYTES,
                                                    AttentionPrecompile, PrecompileSpec)
from parrot.engines.builtin.cuda.precompile_worker import spec_of_job
from parrot.engines.builtin.llama.loader import peek_shape

pytest.importorskip("parrot_kernels")

CUDA = BuiltinEngineConfig(model="tiny", device="cuda:0", dtype="float16")


@pytest.fixture
def triton_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    return tmp_path / "triton"


@pytest.fixture
def fake_cuda(monkeypatch, tmp_path):
    """CUDA as the engine's precompile rule sees it, with `free` bytes free; stamps under
    tmp_path."""
    free = {"bytes": 1 << 40}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info",
                        lambda device=None: (free["bytes"], free["bytes"]))
    monkeypatch.setattr(plans, "stamp_path", lambda spec: tmp_path / "stamp")
    return free


def test_the_early_launcher_imports_no_torch():
    """The point of it: it runs before the engine's imports, so it must not make them."""
    probe = ("import sys; import parrot.engines.builtin.cuda.early_precompile; "
             "print('torch' in sys.modules, 'triton' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["False", "False"]


def test_workers_start_early_from_the_config_only_where_the_engine_wants_them(triton_cache):
    commands: list[list[str]] = []

    def spawn(command):
        commands.append(command)
        return subprocess.Popen([sys.executable, "-c", "pass"])

    early = launch_early_precompile(CUDA, workers=3, spawn=spawn)
    assert early is not None and len(early.procs) == 3
    assert [c[3:6] for c in commands] == [[str(i), "3", config_job(CUDA)] for i in range(3)]
    assert json.loads(commands[0][5]) == {"config": json.loads(config_job(CUDA))["config"]}
    early.stop()
    for off in (BuiltinEngineConfig(model="tiny", device="cpu"),
                BuiltinEngineConfig(model="tiny", device="cuda", warmup=False),
                BuiltinEngineConfig(model="tiny", device="cuda", cuda_graphs=False),
                BuiltinEngineConfig(model="tiny", device="cuda", attention_backend="torch")):
        assert launch_early_precompile(off, workers=3, spawn=spawn) is None, off
    assert len(commands) == 3
    # once an earlier start marked this config's kernels compiled: none, a warm start
    early.mark()
    assert marker_path(CUDA).parent == triton_cache / "parrot-precompiled"
    assert launch_early_precompile(CUDA, workers=3, spawn=spawn) is None
    # another config is another marker, unless it differs only where nothing compiled does
    other = BuiltinEngineConfig(model="tiny", device="cuda:0", dtype="float16", block_size=32)
    assert marker_path(other) != marker_path(CUDA)
    traced = BuiltinEngineConfig(model="tiny", device="cuda:0", dtype="float16",
                                 step_trace="/tmp/{engine}.jsonl", tokenizer="smollm2", seed=3)
    assert marker_path(traced) == marker_path(CUDA)
    assert MARKER_IGNORED_KEYS <= {f.name for f in dataclasses.fields(BuiltinEngineConfig)}


def test_a_worker_started_from_the_config_compiles_the_engines_own_spec(fake_cuda, tmp_path):
    plan = precompile_plan(CUDA)
    assert plan is not None
    spec, stamp = plan.spec, plan.stamp
    assert spec_of_job(config_job(CUDA)) == spec            # the same rule, in the worker
    assert spec_of_job(spec.to_json()) == spec              # a spec given as it is
    stamp.write_text("compiled\n")
    assert spec_of_job(config_job(CUDA)) is None            # nothing left to compile
    assert spec_of_job(config_job(BuiltinEngineConfig(model="tiny", device="cpu"))) is None


def sleepers(count: int) -> EarlyPrecompile:
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                              text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(count)]
    return EarlyPrecompile(procs, time.perf_counter() - 1.0, marker=marker_path(CUDA))


def stopped(procs) -> bool:
    return all(p.poll() is not None for p in procs)


def test_the_engine_adopts_trims_or_stops_the_early_workers(fake_cuda, triton_cache, tmp_path):
    shape, plan = peek_shape(CUDA), precompile_plan(CUDA)
    assert shape is not None and plan is not None
    weights = shape.num_parameters() * 2
    per_worker = WORKER_BYTES + max(n * k * 2 for n, k, _ in plan.spec.linear)
    # memory for all three: adopted as they are, with the stamp to write when they succeed
    early = sleepers(3)
    procs = list(early.procs)
    adopted = start_attention_precompile(CUDA, early=early)
    assert isinstance(adopted, AttentionPrecompile)
    assert adopted.procs == procs and adopted.started == early.started
    assert adopted.stamp == tmp_path / "stamp"
    early.stop()
    # memory for one beside the weights (the live workers' own contexts counted back in):
    # the others stopped before the weights load, and no stamp, since their shares are lost
    early = sleepers(3)
    procs = list(early.procs)
    fake_cuda["bytes"] = weights + SPARE_BYTES + per_worker - 3 * WORKER_BYTES + 4096
    trimmed = start_attention_precompile(CUDA, early=early)
    assert isinstance(trimmed, AttentionPrecompile)
    assert trimmed.procs == procs[:1] and stopped(procs[1:]) and trimmed.stamp is None
    early.stop()
    # the stamp says everything is compiled: all stopped, and the marker written
    fake_cuda["bytes"] = 1 << 40
    (tmp_path / "stamp").write_text("compiled\n")
    early = sleepers(2)
    procs = list(early.procs)
    assert start_attention_precompile(CUDA, early=early) is None
    assert stopped(procs) and marker_path(CUDA).is_file()
    # an engine with nothing to precompile (the CPU) stops them too
    early = sleepers(2)
    procs = list(early.procs)
    assert start_attention_precompile(BuiltinEngineConfig(model="tiny", device="cpu"),
                                      early=early) is None
    assert stopped(procs)


def test_config_workers_report_to_the_engine_like_spec_workers(fake_cuda):
    """Real worker processes given the config: on this CPU machine their own precompile rule
    finds nothing to compile (no CUDA in their process), and they say so the way a worker
    reports its share, so the engine's join reads them alike."""
    job = config_job(BuiltinEngineConfig(model="tiny", device="cpu"))
    procs = [subprocess.Popen(worker_command(i, 2, job), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    spec = PrecompileSpec(device="cpu", dtype="float32", num_heads=4, num_kv_heads=2,
                          head_dim=16, block_size=4, keys=((1, 0, 0, 1),))
    report = AttentionPrecompile(spec, 2, None, procs=procs).wait(timeout_s=240)
    assert (report.workers, report.compiled, report.failed) == (2, 0, 0)
    assert report.describe().startswith(
        "2 workers (started before the engine's imports) compiled the 0 kernels")


def reporting(code: int) -> subprocess.Popen:
    """A worker process that reports nothing compiled and exits with `code`."""
    line = json.dumps({"compiled": 0, "start_s": 0.5})
    return subprocess.Popen([sys.executable, "-c", f"import sys; print({line!r}); "
                             f"sys.exit({code})"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_early_workers_that_compiled_everything_mark_the_config(triton_cache, tmp_path):
    spec = PrecompileSpec(device="cpu", dtype="float32", num_heads=4, num_kv_heads=2,
                          head_dim=16, block_size=4, keys=((1, 0, 0, 1),))
    marker = marker_path(CUDA)
    for stamp, codes, marked in ((None, (0, 0), False),         # trimmed: shares lost
                                 (tmp_path / "s1", (0, 1), False),   # one failed
                                 (tmp_path / "s2", (0, 0), True)):
        early = EarlyPrecompile([reporting(c) for c in codes], time.perf_counter(), marker)
        join_precompile(AttentionPrecompile(spec, len(codes), stamp, procs=early.procs), early)
        assert marker.is_file() == marked, (stamp, codes)
    # workers the engine started itself (no early ones) mark nothing
    marker.unlink()
    join_precompile(AttentionPrecompile(spec, 1, tmp_path / "s3", procs=[reporting(0)]), None)
    assert not marker.exists()


def test_create_engine_starts_the_workers_before_building_and_hands_them_over(monkeypatch):
    from parrot.engines import builtin
    from parrot.engines.builtin.cuda import early_precompile

    handed: dict = {}
    sentinel = object()
    monkeypatch.setattr(early_precompile, "launch_early_precompile",
                        lambda config: handed.setdefault("launched", config) and sentinel)
    monkeypatch.setattr(build, "build_engine", lambda name, config, **kw: handed.update(
        built=config, **kw) or "engine")
    assert builtin.create_engine("e", {"model": "tiny", "device": "cuda:0"}) == "engine"
    assert handed["launched"] == handed["built"] == BuiltinEngineConfig(model="tiny",
                                                                        device="cuda:0")
    assert handed["early_precompile"] is sentinel
