"""A step trace (step_trace.py) summed up: where a live run's engine time went, by kind of
step, and what a simulated engine's profile says the same steps cost.

A trace covers everything an engine did, warm-up and several runs included; `segments` cuts it
where the engine sat idle for long (a run ends, the next starts), so each run is summed on its
own. `summarize` groups one segment's steps by how they ran (decode graph, piecewise, eager)
and, for decode-only steps, by batch size; each group gets its count, its time in the loop
(scheduling, the model step, postprocessing) and, with a pricer, the price of the same shapes
(decode rows, KV read with shared prefixes read once, prefill tokens): a LatencyModel's (how
the simulated engine prices an iteration) or any other `StepPricer`'s (bench/serving_floor.py
`StepFloor`: the serving floor's, step by step).
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Sequence
from typing import Protocol

from parrot.engines.builtin.observe.step_trace import StepRecord


class StepPricer(Protocol):
    """What an iteration of these shapes should cost, in seconds (LatencyModel is one)."""

    def iteration_seconds(self, decode_rows: int, decode_kv_tokens: int,
                          prefill_tokens: int, /) -> float: ...

ROW_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def segments(records: Sequence[StepRecord], gap_s: float) -> list[list[StepRecord]]:
    """The trace cut before every step that followed more than gap_s of idleness."""
    out: list[list[StepRecord]] = []
    for record in records:
        if not out or record.idle_ms > 1000 * gap_s:
            out.append([])
        out[-1].append(record)
    return out


def row_bucket(rows: int) -> str:
    """A decode batch's size class: '1', '2', '3-4', '5-8', ... (powers of two)."""
    low = 1
    for high in ROW_BUCKETS:
        if rows <= high:
            return str(high) if low >= high else f"{low}-{high}"
        low = high + 1
    return f">{ROW_BUCKETS[-1]}"


def kind_of(record: StepRecord) -> str:
    """'decode N, shared' / 'decode N' (decode-only steps by row bucket), or 'prefill' /
    'mixed', each with how it ran."""
    if record.prefill_tokens == 0:
        shared = ", shared" if record.shared_groups else ""
        return f"decode {row_bucket(record.decode_rows)}{shared} ({record.path})"
    what = "mixed" if record.decode_rows else "prefill"
    return f"{what} ({record.path})"


@dataclass
class Group:
    steps: int = 0
    iteration_ms: float = 0.0
    step_ms: float = 0.0
    host_ms: float = 0.0         # scheduling + postprocessing
    priced_ms: float = 0.0       # the profile's price of the same steps
    ahead_hits: int = 0
    ahead_misses: int = 0
    jit_compiles: int = 0        # Triton compilations inside the steps (host_pauses.py)
    jit_ms: float = 0.0
    gc_ms: float = 0.0           # garbage collections inside the steps

    def add(self, record: StepRecord, priced_ms: float) -> None:
        self.steps += 1
        self.iteration_ms += record.iteration_ms
        self.step_ms += record.step_ms
        self.host_ms += record.sched_ms + record.post_ms
        self.priced_ms += priced_ms
        self.ahead_hits += record.ahead_hit
        self.ahead_misses += record.ahead_miss
        self.jit_compiles += record.jit_compiles
        self.jit_ms += record.jit_ms
        self.gc_ms += record.gc_ms


@dataclass
class Summary:
    span_ms: float               # first step's start to the last step's end
    idle_ms: float               # waiting for work between the segment's steps
    groups: dict[str, Group]     # by kind_of, plus "all"


def price_ms(record: StepRecord, model: StepPricer) -> float:
    """The profile's time for the record's step (the simulated engine's iteration price)."""
    return 1000 * model.iteration_seconds(record.decode_rows, record.unique_kv_tokens,
                                          record.prefill_tokens)


def summarize(steps: Sequence[StepRecord], model: StepPricer | None = None) -> Summary:
    groups: dict[str, Group] = {"all": Group()}
    for record in steps:
        priced = 0.0 if model is None else price_ms(record, model)
        groups["all"].add(record, priced)
        groups.setdefault(kind_of(record), Group()).add(record, priced)
    if not steps:
        return Summary(0.0, 0.0, groups)
    last = steps[-1]
    span = 1000 * (last.t - steps[0].t) + last.iteration_ms
    return Summary(span, sum(r.idle_ms for r in steps[1:]), groups)


def largest_gaps(steps: Sequence[StepRecord], n: int) -> list[tuple[float, StepRecord]]:
    """The n longest waits for work inside a segment, longest first: (seconds since the
    segment's first step, the step that ended the wait). Long ones mark where the engine
    waited on the manager (a stage of dependent calls, a round trip)."""
    if not steps:
        return []
    t0 = steps[0].t
    waits = sorted(steps[1:], key=lambda r: -r.idle_ms)[:n]
    return [(r.t - t0, r) for r in waits if r.idle_ms > 0]


def slowest(steps: Sequence[StepRecord], n: int, model: StepPricer | None = None
            ) -> list[tuple[float, StepRecord, float]]:
    """The n steps that ran the longest over their price (over nothing without a model),
    worst first: (seconds since the segment's first step, the step, its price in ms). A step
    far over its price with a compilation or a collection inside has its cause named."""
    if not steps:
        return []
    t0 = steps[0].t
    priced = [(r, 0.0 if model is None else price_ms(r, model)) for r in steps]
    worst = sorted(priced, key=lambda rp: -(rp[0].iteration_ms - rp[1]))[:n]
    return [(r.t - t0, r, p) for r, p in worst]
