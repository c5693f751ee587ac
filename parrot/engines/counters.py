"""An engine's cumulative counters: the one list of their names, read by `GET /v1/engine/stats`
(`EngineStats.counters`), /metrics and the benchmark reports.

An engine reports its counters as one mapping, name -> integer, so an engine kind reports the
counters it keeps without the protocol growing a field per counter. Every name an engine
reports is one of `COUNTERS`, so that a misspelt name fails where it is written:
`engine_counters()` builds the mapping and refuses any other name, and
`EngineStats.counter(name)` refuses one too (a counter the engine does not keep reads 0).
A name from an engine newer than the manager travels in the mapping but is not exported.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# The units a counter may count in besides plain counts, as seconds: /metrics exports seconds.
_SECONDS_PER_UNIT = {"": 1.0, "ms": 1e-3, "us": 1e-6}


@dataclass(frozen=True)
class EngineCounter:
    """One cumulative counter: its name on the wire, what it counts (one line, also its
    /metrics help text), its /metrics counter (Prometheus appends `_total`) and its unit."""

    name: str
    meaning: str
    metric: str
    unit: str = ""   # "" (a count), "ms" or "us": exported as seconds

    def __post_init__(self) -> None:
        if self.unit not in _SECONDS_PER_UNIT:
            raise ValueError(f"{self.name}: unit must be one of {sorted(_SECONDS_PER_UNIT)}")

    @property
    def scale(self) -> float:
        """The factor from the counter's unit to the exported one (ms -> s: 1e-3)."""
        return _SECONDS_PER_UNIT[self.unit]


# rate(parrot_engine_step_seconds_total) is the fraction of time an engine computes;
# the loop - step difference is its host time between steps.
COUNTERS: tuple[EngineCounter, ...] = (
    EngineCounter("num_steps", "model steps the engine ran", "parrot_engine_steps"),
    EngineCounter("num_graph_steps", "model steps replayed from a CUDA graph (the others ran "
                  "eagerly)", "parrot_engine_graph_steps"),
    EngineCounter("step_ms", "time inside model steps", "parrot_engine_step_seconds", "ms"),
    EngineCounter("graph_step_ms", "time inside model steps replayed from a CUDA graph (the "
                  "rest of the step time ran eagerly)", "parrot_engine_graph_step_seconds",
                  "ms"),
    EngineCounter("loop_ms", "time in batching-loop iterations that ran a step (scheduling "
                  "and postprocessing included)", "parrot_engine_loop_seconds", "ms"),
    EngineCounter("prefill_tokens", "tokens prefilled", "parrot_engine_prefill_tokens"),
    EngineCounter("decode_tokens", "tokens decoded (one a decode row; a Generate's first "
                  "token sampled by its prompt's prefill is not one)",
                  "parrot_engine_decode_tokens"),
    EngineCounter("generated_tokens", "tokens the Generates produced, each one's first "
                  "included", "parrot_engine_generated_tokens"),
    EngineCounter("graph_captures_at_runtime", "CUDA graphs captured while serving (each "
                  "stalls the engine)", "parrot_engine_graph_captures_at_runtime"),
    EngineCounter("graph_capture_ms_at_runtime", "time spent capturing CUDA graphs while "
                  "serving", "parrot_engine_graph_capture_seconds", "ms"),
    EngineCounter("graph_captures_while_idle", "CUDA graphs the warm-up left for later, "
                  "captured while the engine had no work", "parrot_engine_graph_captures_idle"),
    EngineCounter("ahead_hits", "decode steps served by a step launched ahead",
                  "parrot_engine_ahead_hits"),
    EngineCounter("ahead_misses", "steps launched ahead and not used (wasted GPU steps)",
                  "parrot_engine_ahead_misses"),
    EngineCounter("num_piecewise_steps", "model steps whose layers ran as CUDA graphs between "
                  "eager attention calls (prefill, mixed)", "parrot_engine_piecewise_steps"),
    EngineCounter("piecewise_step_ms", "time inside model steps run as piecewise CUDA graphs",
                  "parrot_engine_piecewise_step_seconds", "ms"),
    EngineCounter("graph_stopgap_steps", "decode steps replayed on a larger stopgap graph "
                  "instead of capturing their own", "parrot_engine_graph_stopgap_steps"),
    EngineCounter("jit_compiles_at_runtime", "Triton kernel compilations while serving (each "
                  "stalls a step; a warm engine has none)",
                  "parrot_engine_jit_compiles_at_runtime"),
    EngineCounter("jit_compile_ms_at_runtime", "time spent compiling Triton kernels while "
                  "serving", "parrot_engine_jit_compile_seconds", "ms"),
    EngineCounter("gc_collections", "Python garbage collections in the engine's process while "
                  "serving", "parrot_engine_gc_collections"),
    EngineCounter("gc_ms", "time in Python garbage collections in the engine's process while "
                  "serving (every thread stops)", "parrot_engine_gc_seconds", "ms"),
    EngineCounter("tpot_generates", "finished Generates of two or more tokens (the count of "
                  "parrot_engine_tpot_seconds)", "parrot_engine_tpot_generates"),
    EngineCounter("tpot_us_sum", "the sum of each finished Generate's time per output token "
                  "after the first, as the engine handed them over (over "
                  "parrot_engine_tpot_generates_total: the mean)", "parrot_engine_tpot_seconds",
                  "us"),
    EngineCounter("prefix_cache_query_tokens", "prompt tokens looked up in the engine's "
                  "automatic prefix cache (whole blocks)",
                  "parrot_engine_prefix_cache_query_tokens"),
    EngineCounter("prefix_cache_hit_tokens", "prompt tokens found computed in the engine's "
                  "automatic prefix cache (not prefilled)",
                  "parrot_engine_prefix_cache_hit_tokens"),
    EngineCounter("aborted_generates", "Generates aborted before they finished (caller gone, "
                  "stream dropped, abort route, context freed under them)",
                  "parrot_engine_aborted_generates"),
    EngineCounter("aborted_decode_tokens", "tokens decoded for Generates before they were "
                  "aborted (work decoded for nobody)", "parrot_engine_aborted_decode_tokens"),
)

COUNTER_NAMES: tuple[str, ...] = tuple(c.name for c in COUNTERS)
_KNOWN = frozenset(COUNTER_NAMES)


def check_counter_names(names: Iterable[str]) -> None:
    """ValueError naming every name that is not one of `COUNTER_NAMES`."""
    unknown = sorted(set(names) - _KNOWN)
    if unknown:
        raise ValueError(f"unknown engine counter(s) {unknown}; known: {list(COUNTER_NAMES)}")


def engine_counters(**values: int) -> dict[str, int]:
    """An engine's counters for `EngineStats.counters`, in `COUNTERS`' order; a name that is
    not a known counter is a ValueError, a value that is not an integer a TypeError (the wire
    form is integers: a float would fail the manager's parse, far from its cause)."""
    check_counter_names(values)
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"engine counter {name} must be an integer, got {value!r}")
    return {name: values[name] for name in COUNTER_NAMES if name in values}
