"""Pauses of an engine's process that no step shape explains: Triton compilations and Python's
garbage collections.

A warm engine should compile nothing while serving: a kernel specialisation the warm-up did not
compile (a new constexpr, a new alignment or divisibility of an argument) costs a compilation,
or at least a load from Triton's disk cache, inside the step that meets it -- tens to hundreds
of milliseconds that the step's shape does not explain. A collection of the oldest garbage-
collector generation walks every container the process holds (every context's token list) and
stops every thread, the model step's included.

Both are process-wide, so one `PauseMonitor` per process counts them through Triton's compile
hooks (`triton.knobs.runtime.jit_cache_hook` / `jit_post_compile_hook`, chained after any hook
already set) and `gc.callbacks`. An engine reads `totals()` when it starts serving and around
each step; the difference is what happened in between (in a process that holds several engines,
each also sees the others' pauses: they stop it too).
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from parrot.engines.counters import engine_counters

log = logging.getLogger(__name__)

RECENT_COMPILES = 16   # kernel names kept for the warning that names them


@dataclass(frozen=True)
class PauseTotals:
    """Cumulative pauses of the process since the monitor was installed."""

    jit_compiles: int = 0
    jit_s: float = 0.0
    gc_collections: int = 0
    gc_s: float = 0.0

    def __sub__(self, before: PauseTotals) -> PauseTotals:
        return PauseTotals(self.jit_compiles - before.jit_compiles, self.jit_s - before.jit_s,
                           self.gc_collections - before.gc_collections, self.gc_s - before.gc_s)

    def counters(self) -> dict[str, int]:
        """As engine counters (`EngineStats.counters`), times in milliseconds."""
        return engine_counters(jit_compiles_at_runtime=self.jit_compiles,
                               jit_compile_ms_at_runtime=round(1000 * self.jit_s),
                               gc_collections=self.gc_collections, gc_ms=round(1000 * self.gc_s))


class PauseMonitor:
    """Counts the process's Triton compilations and garbage collections (see the module)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jit_compiles = 0
        self._jit_s = 0.0
        self._gc_collections = 0
        self._gc_s = 0.0
        self._gc_started: float | None = None
        self._compile_started = threading.local()
        self.recent_compiles: deque[str] = deque(maxlen=RECENT_COMPILES)
        self.watches_triton = False
        self.watches_gc = False
        self._triton_missing = False   # checked once: no hooks in this Triton (or no Triton)

    def totals(self) -> PauseTotals:
        with self._lock:
            return PauseTotals(self._jit_compiles, self._jit_s, self._gc_collections,
                               self._gc_s)

    # -- garbage collection ---------------------------------------------------------------------

    def install_gc(self) -> None:
        if not self.watches_gc:
            gc.callbacks.append(self.on_gc)
            self.watches_gc = True

    def on_gc(self, phase: str, info: dict[str, Any]) -> None:
        """A `gc.callbacks` callback: phase "start" or "stop" of one collection."""
        now = time.perf_counter()
        if phase == "start":
            self._gc_started = now
        elif phase == "stop" and self._gc_started is not None:
            with self._lock:
                self._gc_collections += 1
                self._gc_s += now - self._gc_started
            self._gc_started = None

    # -- Triton compilations --------------------------------------------------------------------

    def install_triton(self) -> bool:
        """Chain the compile hooks; False where this Triton has no such hooks (or no Triton)."""
        if self.watches_triton or self._triton_missing:
            return self.watches_triton
        try:
            import triton
        except ImportError:
            self._triton_missing = True
            return False
        runtime = getattr(getattr(triton, "knobs", None), "runtime", None)
        if runtime is None or not hasattr(runtime, "jit_post_compile_hook"):
            log.warning("triton %s has no compile hooks: compilations while serving are not "
                        "counted", getattr(triton, "__version__", "?"))
            self._triton_missing = True
            return False
        runtime.jit_cache_hook = self._chain(runtime.jit_cache_hook, self.before_compile)
        runtime.jit_post_compile_hook = self._chain(runtime.jit_post_compile_hook,
                                                    self.after_compile)
        self.watches_triton = True
        return True

    @staticmethod
    def _chain(previous: Callable[..., Any] | None, ours: Callable[..., None]
               ) -> Callable[..., Any]:
        def hook(**kwargs: Any) -> Any:
            ours(**kwargs)
            # the previous hook's answer stands: a true answer to jit_cache_hook skips the
            # compilation, which only the hook's owner may ask for
            return None if previous is None else previous(**kwargs)
        return hook

    def before_compile(self, **kwargs: Any) -> None:
        self._compile_started.t = time.perf_counter()

    def after_compile(self, **kwargs: Any) -> None:
        started = getattr(self._compile_started, "t", None)
        self._compile_started.t = None
        seconds = 0.0 if started is None else time.perf_counter() - started
        fn = kwargs.get("fn")
        name = str(getattr(fn, "name", None) or kwargs.get("repr") or "?")
        with self._lock:
            self._jit_compiles += 1
            self._jit_s += seconds
            self.recent_compiles.append(name)


_MONITOR: PauseMonitor | None = None
_MONITOR_LOCK = threading.Lock()


def pause_monitor(*, triton: bool) -> PauseMonitor:
    """The process's monitor, its garbage-collection callback installed (once), and its
    Triton hooks too when `triton` (an engine that runs the Triton kernels)."""
    global _MONITOR
    with _MONITOR_LOCK:
        if _MONITOR is None:
            _MONITOR = PauseMonitor()
        _MONITOR.install_gc()
        if triton:
            _MONITOR.install_triton()
        return _MONITOR
