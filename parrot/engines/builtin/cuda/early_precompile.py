"""The precompile workers started before the engine process imports torch (torch-free module).

On a fresh machine the engine process spent 7.7 s in its interpreter and imports (torch,
Triton, on a cold page cache) before `build_engine` started the precompile workers, and each
worker then spent ~5 s in the same imports before compiling anything: 36.7 s to the first
served request, of which 20 s waiting for the workers (docs/results/startup_h200.md). So
`create_engine` calls `launch_early_precompile` first, while nothing heavy is imported: the
workers start with the engine's config instead of a spec, each computes the spec itself
(`precompile_plan.py`, the same function the engine runs) and their imports overlap the
engine's. `build_engine` then adopts them (`precompile_plan.start_attention_precompile`): it checks
the spec's stamp, bounds the workers by the GPU's memory beside the weights (stopping the
extra ones before the weights load), and joins them as it joined the workers it started.

Only the decision to start early is made here, without torch: a CUDA device in the config,
the warm-up and graphs on, the Triton kernels not turned off, and no `marker` saying that an
earlier start with this config and this software found every kernel compiled already (a
warm start must not pay fifteen processes importing torch for nothing). The marker is
written by the engine once its workers all succeeded or it found the stamp (`mark`); it
lives beside the stamp in Triton's cache directory, so clearing that cache clears both. A
wrong guess costs time, never correctness: a marker missing starts workers that find the
stamp and stop, one present where kernels are missing leaves the workers to `build_engine`
as before (after the imports).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parrot.engines.builtin.config import BuiltinEngineConfig

log = logging.getLogger(__name__)

# Workers at most. Triton compiles one kernel at a time per process (its compiler is
# single-threaded: ~0.66-0.86 s a specialisation on the H200's host, ~200 of them), so the
# precompile shortens with every core that runs a worker: `default_workers` takes every core
# but the one the engine loads its weights on. The bound keeps a very large host from
# starting more processes than the work is worth (at 32, ~6 specialisations each, about what
# starting one costs); the engine bounds them by the GPU's memory besides.
MAX_WORKERS = 32
# What each worker runs (`python -m`): precompile_worker.py.
WORKER_MODULE = "parrot.engines.builtin.cuda.precompile_worker"
# The software whose change makes a kept marker stale (read without importing it).
MARKER_PACKAGES = ("torch", "triton")
# Config keys that change nothing the workers compile (scheduling, tracing, tokenizing):
# left out of the marker's key, so a run that only sets one of them (a benchmark's trace
# path) still starts warm. Any key not listed counts, so a new key errs on the side of an
# early start whose workers find the stamp and stop.
MARKER_IGNORED_KEYS = frozenset({"tokenizer", "seed", "step_trace", "speed_probe",
                                 "itl_target_ms", "step_token_budget", "prefix_caching",
                                 "num_threads", "max_mixed_decode_rows",
                                 "prompt_in_generate"})

Spawn = Callable[[list[str]], "subprocess.Popen[str]"]


def default_workers() -> int:
    """A worker on every core this process may run on but the engine's own, at most
    MAX_WORKERS."""
    return max(1, min(MAX_WORKERS, usable_cores() - 1))


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity where the OS tells it (a container's
    cpuset, taskset), at most os.cpu_count()."""
    count = os.cpu_count() or 2
    try:
        return max(1, min(count, len(os.sched_getaffinity(0))))
    except (AttributeError, OSError):    # no affinity on this OS
        return count


def worker_command(worker: int, workers: int, job: str) -> list[str]:
    """A worker's command line: `job` is a PrecompileSpec's JSON or `config_job`'s."""
    return [sys.executable, "-m", WORKER_MODULE, str(worker), str(workers), job,
            repr(time.time())]


def config_job(config: BuiltinEngineConfig) -> str:
    """What a worker started before the spec is known is given: the engine's config, from
    which it computes the spec itself (`precompile_plan.precompile_plan`)."""
    return json.dumps({"config": dataclasses.asdict(config)})


def spawn_worker(command: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def triton_cache_guess() -> Path:
    """Triton's cache directory as Triton 3 chooses it by default (TRITON_CACHE_DIR, else
    TRITON_HOME or the home directory, then .triton/cache), found without importing it."""
    explicit = os.environ.get("TRITON_CACHE_DIR")
    if explicit:
        return Path(explicit)
    home = os.environ.get("TRITON_HOME") or str(Path.home())
    return Path(home) / ".triton" / "cache"


def _kernels_source_digest() -> str:
    """parrot_kernels' own digest of its source (`version.source_digest`), read from its
    version module alone: importing the package imports torch."""
    found = importlib.util.find_spec("parrot_kernels")
    if found is None or not found.submodule_search_locations:
        return "none"
    path = Path(next(iter(found.submodule_search_locations))) / "version.py"
    spec = importlib.util.spec_from_file_location("_parrot_kernels_version", path)
    if spec is None or spec.loader is None:
        return "none"
    version = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(version)
    return str(version.source_digest())


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "none"


def marker_path(config: BuiltinEngineConfig) -> Path:
    """The file saying an earlier start with this config and this software found every kernel
    its workers compile in Triton's cache: the config (less MARKER_IGNORED_KEYS), the
    versions of torch and Triton, the kernels' source, the visible GPUs."""
    compiled_for = {key: value for key, value in dataclasses.asdict(config).items()
                    if key not in MARKER_IGNORED_KEYS}
    parts = [compiled_for, [_version(p) for p in MARKER_PACKAGES],
             _kernels_source_digest(), os.environ.get("CUDA_VISIBLE_DEVICES")]
    key = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()
    return triton_cache_guess() / "parrot-precompiled" / f"early-{key[:32]}"


def wants_cuda_workers(config: BuiltinEngineConfig) -> bool:
    """Whether the engine will warm up on CUDA through the Triton kernels, as far as the
    config says without torch (`auto` devices: where an NVIDIA driver's device node exists)."""
    device = config.device
    on_cuda = device.startswith("cuda") or (device == "auto"
                                            and os.path.exists("/dev/nvidiactl"))
    return (on_cuda and config.warmup and bool(config.cuda_graphs)
            and config.attention_backend != "torch")


@dataclass
class EarlyPrecompile:
    """Worker processes started from the config (`launch_early_precompile`), for
    `build_engine` to adopt, trim or stop."""

    procs: list[subprocess.Popen[str]]
    started: float                       # time.perf_counter() when they were started
    marker: Path

    def keep(self, count: int) -> None:
        """Stop every worker from `count` on (the GPU's memory holds only `count` beside the
        weights), waiting until they are gone so their memory is free for the weights."""
        extra, self.procs = self.procs[count:], self.procs[:count]
        for proc in extra:
            proc.kill()
        for proc in extra:
            proc.communicate()

    def stop(self) -> None:
        """Stop every worker (nothing to compile, or the stamp says it is compiled)."""
        self.keep(0)

    def mark(self) -> None:
        """Say that this config's kernels are all compiled: the next start starts no early
        workers."""
        try:
            self.marker.parent.mkdir(parents=True, exist_ok=True)
            self.marker.write_text("every precompiled kernel of this config is cached\n")
        except OSError as exc:
            log.warning("could not write the early precompile marker %s: %s", self.marker, exc)


def launch_early_precompile(config: BuiltinEngineConfig, *, workers: int | None = None,
                            spawn: Spawn = spawn_worker) -> EarlyPrecompile | None:
    """Start the precompile workers from `config` now, before the engine's imports, when the
    engine will want them (`wants_cuda_workers`) and no marker says they would find everything
    compiled; else None (`build_engine` decides as before). Never fails the start."""
    try:
        if not wants_cuda_workers(config):
            return None
        marker = marker_path(config)
        if marker.is_file():
            return None
        count = workers or default_workers()
        started = time.perf_counter()
        job = config_job(config)
        procs = [spawn(worker_command(i, count, job)) for i in range(count)]
        log.info("%d attention precompile workers started before the engine's imports", count)
        return EarlyPrecompile(procs, started, marker)
    except Exception:  # noqa: BLE001 - an optimisation never stops the engine
        log.exception("starting the precompile workers early failed; the engine starts them "
                      "after its imports")
        return None


def job_config(job: Any) -> dict[str, Any] | None:
    """The engine config of a worker's job (`config_job`), or None for a spec's JSON."""
    if isinstance(job, dict) and set(job) == {"config"} and isinstance(job["config"], dict):
        return job["config"]
    return None
