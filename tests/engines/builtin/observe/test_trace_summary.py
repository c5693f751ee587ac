"""Summing a step trace: segments at idle gaps, groups by kind of step, the profile's price."""

from __future__ import annotations

import pytest

from parrot.engines.builtin.observe.step_trace import StepRecord
from dataclasses import replace

from parrot.engines.builtin.observe.trace_summary import (kind_of, largest_gaps, row_bucket,
                                                          segments, slowest, summarize)
from parrot.engines.latency_model import LatencyModel


def rec(t: float, *, idle_ms: float = 0.0, rows: int = 0, kv: int = 0, saved: int = 0,
        groups: int = 0, prefill: int = 0, path: str = "graph", step_ms: float = 4.0,
        hit: bool = False) -> StepRecord:
    return StepRecord(t=t, idle_ms=idle_ms, sched_ms=0.5, step_ms=step_ms, post_ms=0.25,
                      path=path, ahead_hit=hit, ahead_miss=False, decode_rows=rows,
                      kv_tokens=kv, shared_saved_tokens=saved, shared_groups=groups,
                      prefill_chunks=1 if prefill else 0, prefill_tokens=prefill)


def test_row_buckets_are_powers_of_two():
    assert [row_bucket(n) for n in (1, 2, 3, 4, 5, 8, 9, 64, 65, 300)] == [
        "1", "2", "3-4", "3-4", "5-8", "5-8", "9-16", "33-64", "65-128", ">256"]


def test_kinds():
    assert kind_of(rec(0, rows=12, groups=1)) == "decode 9-16, shared (graph)"
    assert kind_of(rec(0, rows=1)) == "decode 1 (graph)"
    assert kind_of(rec(0, rows=3, prefill=100, path="piecewise")) == "mixed (piecewise)"
    assert kind_of(rec(0, prefill=2000, path="eager")) == "prefill (eager)"


def test_segments_cut_at_long_idleness():
    trace = [rec(0.0), rec(0.01, idle_ms=30), rec(5.0, idle_ms=4000), rec(5.01)]
    assert [len(s) for s in segments(trace, gap_s=2.0)] == [2, 2]
    assert [len(s) for s in segments(trace, gap_s=0.01)] == [1, 1, 2]


def test_summary_sums_time_and_prices_unique_kv():
    model = LatencyModel(prefill_per_token_ms=0.01, decode_base_ms=3.0, decode_per_seq_ms=0.0,
                         decode_per_token_ms=0.001)
    steps = [rec(10.0, rows=4, kv=4000, saved=3000, groups=1, hit=True),
             rec(10.01, idle_ms=2.0, rows=4, kv=4004, saved=3000, groups=1),
             rec(10.02, idle_ms=1.0, prefill=500, path="piecewise", step_ms=6.0)]
    s = summarize(steps, model)
    assert s.idle_ms == 3.0
    assert s.span_ms == pytest.approx(20.0 + 6.75)
    shared = s.groups["decode 3-4, shared (graph)"]
    assert (shared.steps, shared.ahead_hits) == (2, 1)
    assert shared.iteration_ms == pytest.approx(2 * 4.75)
    assert shared.host_ms == pytest.approx(2 * 0.75)
    # the profile reads the shared prefix once: 1,000 and 1,004 unique KV tokens
    assert shared.priced_ms == pytest.approx(2 * 3.0 + 0.001 * (1000 + 1004))
    assert s.groups["prefill (piecewise)"].priced_ms == pytest.approx(5.0)
    assert s.groups["all"].steps == 3
    assert summarize([]).span_ms == 0.0


def test_largest_gaps_are_the_longest_waits_inside_a_segment():
    steps = [rec(10.0, idle_ms=900.0), rec(10.5, idle_ms=24.0, prefill=3686),
             rec(10.6, idle_ms=2.0), rec(11.0, idle_ms=40.0, prefill=244)]
    # the wait before the segment's first step is not inside it
    assert [(round(t, 3), r.idle_ms) for t, r in largest_gaps(steps, 2)] == [(1.0, 40.0),
                                                                            (0.5, 24.0)]
    assert largest_gaps(steps, 0) == [] and largest_gaps([], 3) == []


def test_slowest_steps_are_those_furthest_over_their_price_with_their_pauses():
    model = LatencyModel(prefill_per_token_ms=0.1, decode_base_ms=3.0, decode_per_seq_ms=0.0,
                         decode_per_token_ms=0.0)
    compiled = replace(rec(10.2, rows=2, prefill=3200, path="eager", step_ms=354.0),
                       jit_compiles=2, jit_ms=260.0, gc_ms=1.5)
    # the long prefill is priced at 400 ms and ran 420: the mixed step, 34 ms over its 323,
    # is the worst; without a profile the longest step is
    steps = [rec(10.0, rows=8), compiled, rec(10.6, prefill=4000, path="piecewise",
                                               step_ms=419.25)]
    assert [(round(t, 3), r.step_ms, round(p, 1)) for t, r, p in slowest(steps, 2, model)] == [
        (0.2, 354.0, 323.0), (0.6, 419.25, 400.0)]
    assert [r.step_ms for _, r, _ in slowest(steps, 1)] == [419.25]
    assert slowest([], 3) == []
    s = summarize(steps, model)
    assert (s.groups["all"].jit_compiles, s.groups["all"].jit_ms, s.groups["all"].gc_ms) == (
        2, 260.0, 1.5)
    assert s.groups["mixed (eager)"].jit_compiles == 2
