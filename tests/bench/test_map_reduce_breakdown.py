"""bench/map_reduce_breakdown.py: the phases of a map-reduce application and engine busy time."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

from parrot.sim.workloads.base import AppRecord, CallRecord

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "map_reduce_breakdown.py"


@pytest.fixture(scope="module")
def breakdown():
    spec = importlib.util.spec_from_file_location("map_reduce_breakdown", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def call(engine, ready, dispatched, finished):
    return CallRecord(app_id="a", kind="map_reduce", engine=engine, criterion=None,
                      submitted=0.0, ready=ready, dispatched=dispatched, finished=finished,
                      state="DONE")


def test_phases_split_the_end_to_end_time(breakdown):
    maps = [call("e0", 0.3, 0.3, 2.0), call("e1", 0.4, 0.5, 2.5)]
    reduce = call("e0", 2.5, 2.7, 4.0)
    app = AppRecord("a", "map_reduce", True, started=0.0, finished=4.2, output_tokens=150,
                    calls=[reduce, *maps])
    got = breakdown.phases(app)
    assert got == pytest.approx({"to first map": 0.3, "maps": 2.2, "reduce wait": 0.2,
                                 "reduce": 1.3, "return": 0.2})
    assert math.isclose(sum(got.values()), app.latency_s)


def test_busy_intervals_merge_overlapping_calls(breakdown):
    calls = [call("e0", 0, 1.0, 2.0), call("e0", 0, 1.5, 3.0), call("e0", 0, 4.0, 5.0)]
    assert breakdown.busy_intervals(calls) == [(1.0, 3.0), (4.0, 5.0)]


def test_script_prints_one_row_per_variant(breakdown, capsys):
    assert breakdown.main(["--engines", "2", "--apps", "1", "--delay-ms", "0:0",
                           "--compare", "app_centric,least_queue:baseline"]) == 0
    out = capsys.readouterr().out
    assert "| app_centric |" in out and "| least_queue:baseline |" in out
    assert "sim-0:" in out and "sim-1:" in out
