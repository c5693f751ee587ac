"""Run figures from call records, including calls of a failed application that never got a
dispatch time (failed upstream, or still queued when the application failed)."""

from __future__ import annotations

import pytest

from parrot.sim.summary import summarize
from parrot.sim.workloads.base import AppRecord, CallRecord


def _call(ready: float | None, dispatched: float | None, finished: float | None,
          state: str) -> CallRecord:
    return CallRecord("a", "map_reduce", "sim-0" if dispatched is not None else None,
                      "throughput", 0.0, ready, dispatched, finished, state)


def test_queue_time_leaves_out_calls_never_dispatched():
    ran = _call(ready=1.0, dispatched=1.5, finished=3.0, state="done")
    queued_when_app_failed = _call(ready=2.0, dispatched=None, finished=None, state="failed")
    failed_upstream = _call(ready=None, dispatched=None, finished=None, state="failed")
    app = AppRecord("a", "map_reduce", True, 0.0, 3.0, 8,
                    [ran, queued_when_app_failed, failed_upstream], error="CallFailedError: x")
    summary = summarize([app], engines=[], duration_s=3.0)
    assert summary["queue_s_per_call"] == {"mean": 0.5, "p50": 0.5, "p99": 0.5}
    assert summary["queue_s_by_criterion"] == {"throughput": {"mean": 0.5, "p50": 0.5,
                                                              "p99": 0.5}}
    assert summary["num_failed"] == 1


def test_queue_time_is_split_by_criterion():
    latency = CallRecord("a", "multi_agent", "sim-0", "latency", 0.0, 1.0, 3.0, 4.0, "done")
    undecided = CallRecord("a", "multi_agent", "sim-0", None, 0.0, 1.0, 1.25, 2.0, "done")
    app = AppRecord("a", "multi_agent", True, 0.0, 4.0, 8,
                    [_call(ready=1.0, dispatched=1.0, finished=2.0, state="done"), latency,
                     undecided])
    by = summarize([app], engines=[], duration_s=4.0)["queue_s_by_criterion"]
    assert list(by) == ["latency", "none", "throughput"]
    assert (by["latency"]["mean"], by["none"]["mean"], by["throughput"]["mean"]) == \
        (2.0, 0.25, 0.0)


def test_queue_time_of_no_dispatched_call_is_none():
    app = AppRecord("a", "map_reduce", True, 0.0, 1.0, 8,
                    [_call(ready=0.5, dispatched=None, finished=None, state="failed")])
    assert summarize([app], engines=[], duration_s=1.0)["queue_s_per_call"] == {
        "mean": None, "p50": None, "p99": None}


def test_background_apps_report_their_calls_queue_time_apart_from_the_main_apps():
    main = AppRecord("m", "map_reduce", True, 0.0, 2.0, 8,
                     [_call(ready=0.0, dispatched=0.0, finished=2.0, state="done")])
    chat = AppRecord("c", "chat", False, 0.0, 3.0, 4, [CallRecord(
        "c", "chat", "sim-0", "latency", 0.0, 0.5, 1.25, 3.0, "done")])
    summary = summarize([main, chat], engines=[], duration_s=3.0)
    assert summary["queue_s_per_call"]["mean"] == 0.0
    assert summary["background"]["queue_s_per_call"] == {"mean": 0.75, "p50": 0.75,
                                                         "p99": 0.75}


def test_tpot_per_engine_against_the_target():
    from parrot.sim.summary import tpot_against_target

    by_engine = {"sim-1": [0.02, 0.03, 0.05, 0.06], "sim-0": []}
    out = tpot_against_target(by_engine, 40.0)
    assert list(out) == ["sim-0", "sim-1"]
    assert out["sim-1"]["within_target"] == 0.5 and out["sim-1"]["target_ms"] == 40.0
    assert out["sim-1"]["generates"] == 4 and out["sim-1"]["mean"] == pytest.approx(0.04)
    assert out["sim-0"]["within_target"] is None
    assert "target_ms" not in tpot_against_target(by_engine, None)["sim-1"]
