"""The builtin engine's batching task (engine.py is the protocol in front of it): schedule ->
model step (in a worker thread, the one blocking boundary) -> postprocess, while there is work;
when there is none it captures a graph the warm-up deferred, or waits on `wake`, which
admissions and frees set: nothing polls.

When the batch scheduler raises (a bug), the loop fails every queued request with
EngineUnavailableError, says why in `unhealthy` (the engine reports itself unhealthy and refuses
new requests with the same error, so the manager re-dispatches them elsewhere) and retries
scheduling with a growing back-off; the first iteration that schedules without raising makes it
healthy again. A failed model step fails its requests, never the loop.
"""

from __future__ import annotations

import asyncio
import logging
import time

from parrot.engines.builtin.batch_scheduler import Batch, BatchScheduler
from parrot.engines.builtin.observe.host_pauses import PauseMonitor
from parrot.engines.builtin.observe.step_accounting import StepCounters, StepRun, StepWatch
from parrot.engines.builtin.observe.step_trace import StepRecord, StepTrace
from parrot.engines.builtin.runner import ModelRunner
from parrot.errors import EngineError, EngineUnavailableError

log = logging.getLogger(__name__)

# While the batch scheduler raises, scheduling is retried after a back-off growing from
# RETRY_MIN_S to RETRY_MAX_S: the loop awaits on its error path, so a broken scheduler never
# starves the event loop (or the engine server's /healthz) with a busy retry loop.
RETRY_MIN_S = 0.01
RETRY_MAX_S = 1.0


class EngineLoop:
    """One builtin engine's batching task and the state its front reads: `wake` (set by
    admissions and frees), `closing`, `unhealthy` (why, while the scheduler keeps raising),
    `step_in_flight` (a free defers its blocks until the step ends), `probing` (no idle-time
    graph capture inside the start-up probe's timing) and the step `counters`."""

    def __init__(self, name: str, runner: ModelRunner, scheduler: BatchScheduler,
                 pauses: PauseMonitor, trace: StepTrace | None) -> None:
        self.name = name
        self._runner, self._scheduler = runner, scheduler
        self._pauses = pauses
        self._trace = trace             # one line per step (step_trace.py), when configured
        self.counters = StepCounters()
        self.wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.closing = False
        self._closed = asyncio.Event()  # ends a back-off early
        self.step_in_flight = False
        self.unhealthy: str | None = None
        self.probing = False

    @property
    def started(self) -> bool:
        return self._task is not None

    @property
    def alive(self) -> bool:
        """Not stopped by a bug: the task runs (or was never started)."""
        return self._task is None or not self._task.done()

    def start(self) -> None:
        """Start the task (once)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"builtin-engine-{self.name}")

    async def close(self) -> None:
        """Stop: the step in flight finishes, then the task returns."""
        self.closing = True
        self._closed.set()
        self.wake.set()
        if self._task is not None:
            await self._task
            self._task = None

    async def _run(self) -> None:
        retry_s = RETRY_MIN_S
        idle_s = 0.0
        while not self.closing:
            self.wake.clear()
            started = time.perf_counter()
            try:
                # A decode step launched ahead is in flight: new prefill work waits one step,
                # so that this step is the launched one (used, not wasted); it is not
                # launched ahead again while prefill work waits (runner.hold_ahead).
                batch = self._scheduler.schedule(decode_only=self._runner.has_ahead)
                self._runner.hold_ahead = self._scheduler.prefill_waits_after(batch)
            except Exception as exc:  # noqa: BLE001 - a scheduling bug: fail, back off, retry
                self._scheduling_failed(exc)
                await self._back_off(retry_s)
                retry_s = min(2 * retry_s, RETRY_MAX_S)
                continue
            retry_s = RETRY_MIN_S
            if self.unhealthy is not None:
                log.warning("engine %s schedules again: healthy", self.name)
                self.unhealthy = None
            if batch is None:
                if self._runner.has_deferred_captures and not self.probing:
                    # Idle: capture one graph the warm-up deferred (warmup.py
                    # deferred_keys), then look for work again, so a request
                    # that arrives waits for at most one capture.
                    await asyncio.to_thread(self._runner.capture_deferred)
                    continue
                if self._trace is not None:
                    self._trace.flush()   # never inside a busy stretch
                await self.wake.wait()
                idle_s += time.perf_counter() - started
                continue
            if self._trace is None:
                await self._step(batch)
            else:
                await self._traced_step(batch, started, idle_s)
            idle_s = 0.0
            elapsed = time.perf_counter() - started
            self.counters.loop_s += elapsed

    async def _traced_step(self, batch: Batch, started: float, idle_s: float
                           ) -> StepRun | None:
        """`_step`, with its StepRecord written to the trace (a failed step writes none)."""
        assert self._trace is not None
        stepping = time.perf_counter()
        run = await self._step(batch)
        ended = time.perf_counter()
        if run is None:
            return None
        self._trace.write(StepRecord(
            t=round(time.time() - (ended - started), 6), idle_ms=round(1000 * idle_s, 3),
            sched_ms=round(1000 * (stepping - started), 3), step_ms=round(1000 * run.seconds, 3),
            post_ms=round(1000 * (ended - stepping - run.seconds), 3), path=run.path,
            ahead_hit=run.ahead_hit, ahead_miss=run.ahead_miss, **run.shape,
            jit_compiles=run.pauses.jit_compiles, jit_ms=round(1000 * run.pauses.jit_s, 3),
            gc_ms=round(1000 * run.pauses.gc_s, 3)))
        return run

    def _scheduling_failed(self, exc: Exception) -> None:
        if self.unhealthy is None:  # the traceback once, not at every retry
            log.exception("engine %s: scheduling failed; unhealthy until it succeeds", self.name)
        self.unhealthy = f"its batch scheduler failed: {exc!r}"
        error = EngineUnavailableError(f"engine {self.name!r} is unhealthy: {self.unhealthy}")
        for work in self._scheduler.works:
            work.fail(error)

    async def _back_off(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._closed.wait(), seconds)
        except TimeoutError:
            pass

    async def _step(self, batch: Batch) -> StepRun | None:
        """Run one model step and postprocess it; how it ran, or None when the step failed."""
        self.step_in_flight = True
        watch = StepWatch(self._runner, self._pauses)
        try:
            sampled = await asyncio.to_thread(self._runner.step, batch)  # the blocking boundary
            run = watch.finish(batch, self.counters)
        except Exception as exc:  # a failed step fails its requests, never the loop
            log.exception("model step failed")
            self._scheduler.fail_batch(batch, EngineError(f"model step failed: {exc!r}"))
            return None
        finally:
            self.step_in_flight = False
        if run.pauses.jit_compiles:
            log.warning("engine %s: %d Triton compilation(s) inside one %s step (%.0f ms): a "
                        "kernel specialisation the warm-up did not compile; latest: %s",
                        self.name, run.pauses.jit_compiles, run.path, 1000 * run.pauses.jit_s,
                        ", ".join(list(self._pauses.recent_compiles)[-run.pauses.jit_compiles:]))
        try:
            self._scheduler.postprocess(batch, sampled)
        except Exception as exc:
            log.exception("postprocessing a step failed")
            for chunk in batch.chunks:
                chunk.work.fail(EngineError(f"postprocessing failed: {exc!r}"))
        return run
