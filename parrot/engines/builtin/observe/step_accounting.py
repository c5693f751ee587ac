"""What the batching loop counts per model step (the engine's step counters and the step trace).

`StepCounters` accumulate over the engine's life. A `StepWatch` is started before one step
(it notes the runner's path counters, the launch-ahead counters and the process's pauses) and
finished after it: it adds the step to the counters and returns a `StepRun`, the one record
that both the counters and the step trace read (the batch's shape is worked out once).
"""

from __future__ import annotations

import time
from itertools import islice
from dataclasses import dataclass

from parrot.engines.counters import engine_counters
from parrot.engines.builtin.observe.host_pauses import PauseMonitor, PauseTotals
from parrot.engines.builtin.runner import ModelRunner
from parrot.engines.builtin.batch_scheduler import Batch
from parrot.engines.builtin.observe.step_trace import step_shape


@dataclass
class StepCounters:
    """Cumulative work of the batching loop (`EngineStats.counters` reports them)."""

    num_steps: int = 0
    step_s: float = 0.0          # inside the model step (the worker thread)
    graph_step_s: float = 0.0    # of step_s, in steps replayed from a CUDA graph
    piecewise_step_s: float = 0.0  # of step_s, in steps run as piecewise graphs
    loop_s: float = 0.0          # whole iterations that ran a batch: schedule, step, postprocess
    prefill_tokens: int = 0
    decode_tokens: int = 0
    generated_tokens: int = 0    # sampled rows: a decode's, or a prompt's last chunk's

    def counters(self) -> dict[str, int]:
        """As engine counters (`EngineStats.counters`), times in milliseconds."""
        return engine_counters(num_steps=self.num_steps, step_ms=round(self.step_s * 1000),
                               graph_step_ms=round(self.graph_step_s * 1000),
                               piecewise_step_ms=round(self.piecewise_step_s * 1000),
                               loop_ms=round(self.loop_s * 1000),
                               prefill_tokens=self.prefill_tokens,
                               decode_tokens=self.decode_tokens,
                               generated_tokens=self.generated_tokens)


@dataclass(frozen=True)
class StepRun:
    """How one model step ran: the seconds in the worker thread; "graph", "piecewise" or
    "eager"; whether it was the step launched ahead, or a launch ahead was thrown away; the
    process's pauses (Triton compilations, garbage collections) during it; its shape
    (step_trace.step_shape)."""

    seconds: float
    path: str
    ahead_hit: bool
    ahead_miss: bool
    pauses: PauseTotals
    shape: dict[str, int]


class StepWatch:
    """One model step, from just before it is handed to the worker thread to its return."""

    def __init__(self, runner: ModelRunner, pauses: PauseMonitor) -> None:
        self._runner, self._pauses = runner, pauses
        graphs = runner.graphs
        self._ahead = ((graphs.num_ahead_hits, graphs.num_ahead_misses)
                       if graphs is not None else (0, 0))
        self._paths = (runner.num_graph_steps, runner.num_piecewise_steps)
        self._pauses_before = pauses.totals()
        self._started = time.perf_counter()

    def finish(self, batch: Batch, counters: StepCounters) -> StepRun:
        """The step returned: add it to `counters`; how it ran."""
        seconds = time.perf_counter() - self._started
        runner = self._runner
        counters.num_steps += 1
        counters.step_s += seconds
        path = "eager"
        if runner.num_graph_steps > self._paths[0]:        # this step replayed a graph
            counters.graph_step_s += seconds
            path = "graph"
        elif runner.num_piecewise_steps > self._paths[1]:
            counters.piecewise_step_s += seconds
            path = "piecewise"
        shape = step_shape(batch, runner.last_groups)
        counters.prefill_tokens += shape["prefill_tokens"]
        counters.decode_tokens += shape["decode_rows"]
        # every decode row samples (a decoding Generate's chunk ends at its last token); of
        # the prefill chunks, a Generate's prompt's last one does: a walk over those alone
        counters.generated_tokens += batch.decode_rows + sum(
            1 for chunk in islice(batch.chunks, batch.decode_rows, None) if chunk.sample)
        graphs = runner.graphs
        return StepRun(seconds, path,
                       ahead_hit=graphs is not None and graphs.num_ahead_hits > self._ahead[0],
                       ahead_miss=graphs is not None and graphs.num_ahead_misses > self._ahead[1],
                       pauses=self._pauses.totals() - self._pauses_before, shape=shape)
