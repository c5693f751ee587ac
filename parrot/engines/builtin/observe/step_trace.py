"""The engine's step trace: one JSON line per batching-loop iteration that ran a model step.

Counters (EngineStats) say how much time the loop spent in steps and between them; the trace
says which steps. Each line holds the iteration's timing (waiting for work before it,
scheduling, the model step in the worker thread, postprocessing), its shape (decode rows and
the KV they read, the tokens a shared prefix saved, prefill chunks and tokens), how it ran
(a decode graph, piecewise graphs or eagerly; whether it used the step launched ahead) and the
process's pauses inside it (Triton compilations, garbage collections: host_pauses.py).
`bench/step_trace_report.py` sums a trace by kind of step and prices every step with a
simulated engine's profile, so a live run can be compared with its simulation step by step.

Writing costs one `json.dumps` per step; the file is flushed whenever the loop waits for work
(and when the engine closes), never inside a busy stretch.
"""

from __future__ import annotations

import gzip
import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO
from collections.abc import Callable

from parrot.engines.builtin.llama.cascade import GroupedRows
from parrot.engines.builtin.batch_scheduler import Batch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepRecord:
    t: float                 # wall clock (time.time()) when the iteration began
    idle_ms: float           # waiting for work right before it
    sched_ms: float
    step_ms: float           # the model step in the worker thread (waiting on the GPU included)
    post_ms: float
    path: str                # "graph", "piecewise" or "eager"
    ahead_hit: bool          # the step was the one launched ahead (its result was ready)
    ahead_miss: bool         # a step launched ahead was thrown away
    decode_rows: int
    kv_tokens: int           # context tokens the decode rows attend to, each row its own
    shared_saved_tokens: int  # of kv_tokens, read once per shared-prefix group, not per row
    shared_groups: int
    prefill_chunks: int
    prefill_tokens: int
    # the process's pauses inside the step (host_pauses.py); defaults: traces written before
    jit_compiles: int = 0    # Triton compilations
    jit_ms: float = 0.0
    gc_ms: float = 0.0       # garbage collections

    @property
    def unique_kv_tokens(self) -> int:
        """The KV the step reads with its shared prefixes read once."""
        return self.kv_tokens - self.shared_saved_tokens

    @property
    def iteration_ms(self) -> float:
        return self.sched_ms + self.step_ms + self.post_ms


def step_shape(batch: Batch, groups: GroupedRows | None) -> dict[str, int]:
    """The shape fields of a record: `groups` is the shared-prefix plan the step ran with."""
    decode_rows = kv_tokens = prefill_chunks = prefill_tokens = 0
    for chunk in batch.chunks:
        n = chunk.end - chunk.start
        if n == 1:
            decode_rows += 1
            kv_tokens += chunk.end
        else:
            prefill_chunks += 1
            prefill_tokens += n
    saved = 0
    if groups is not None:
        for g, prefix in enumerate(groups.prefix_lens):
            saved += (groups.indptr[g + 1] - groups.indptr[g] - 1) * prefix
    return {"decode_rows": decode_rows, "kv_tokens": kv_tokens, "shared_saved_tokens": saved,
            "shared_groups": 0 if groups is None else len(groups.prefix_lens),
            "prefill_chunks": prefill_chunks, "prefill_tokens": prefill_tokens}


class StepTrace:
    """Appends StepRecords to a JSON-lines file. A trace that cannot be written (a full disk,
    a removed folder) is given up with one warning: it never stops the engine's loop."""

    def __init__(self, path: str | Path, *,
                 open_file: Callable[[Path], IO[str]] | None = None) -> None:
        """open_file: opens the trace file (default: append, UTF-8); tests pass a failing one."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = (open_file(self.path) if open_file is not None
                                      else self.path.open("a", encoding="utf-8"))

    def write(self, record: StepRecord) -> None:
        if self._file is not None:
            self._guard(self._file.write, json.dumps(asdict(record), separators=(",", ":")) + "\n")

    def flush(self) -> None:
        if self._file is not None:
            self._guard(self._file.flush)

    def close(self) -> None:
        failed = self._drop()
        if failed is not None:
            log.warning("step trace %s: closing failed: %s", self.path, failed)

    def _guard(self, fn: Callable[..., object], *args: object) -> None:
        try:
            fn(*args)
        except OSError as exc:
            log.warning("step trace %s: writing failed (%s); tracing stops", self.path, exc)
            self._drop()

    def _drop(self) -> OSError | None:
        """Stop tracing: close the file (once); the error closing it, if any."""
        file, self._file = self._file, None
        if file is not None:
            try:
                file.close()
            except OSError as exc:
                return exc
        return None


def read_trace(path: str | Path) -> list[StepRecord]:
    """The records of a trace file (gzipped when its name ends in .gz), in order."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [StepRecord(**json.loads(line)) for line in f if line.strip()]
