"""Plot data: the CDF starts at zero, idle engines keep their timeline row, and a missing
matplotlib is one line naming the extra."""

from __future__ import annotations

import sys

from parrot.cli.bench import main
from parrot.sim.plots import MAX_BARS, cdf_points, timeline_bars, timeline_rows
from parrot.sim.workloads.base import AppRecord, CallRecord


def test_cdf_of_one_app_is_a_step_from_zero():
    assert cdf_points([3.0]) == ([0.0, 3.0], [0.0, 1.0])
    assert cdf_points([2.0, 1.0]) == ([0.0, 1.0, 2.0], [0.0, 0.5, 1.0])


def test_engines_without_calls_keep_a_row():
    call = CallRecord("a", "chat", "sim-1", "latency", 0.0, 0.0, 0.0, 1.0, "done")
    record = AppRecord("a", "chat", True, 0.0, 1.0, 1, [call])
    rows = timeline_rows([record], ["sim-0", "sim-1", "sim-10", "sim-2"])
    assert rows == ["sim-0", "sim-1", "sim-2", "sim-10"]
    assert timeline_rows([record]) == ["sim-1"]


def test_timeline_draws_only_calls_that_ran_to_an_end_in_dispatch_order():
    late = CallRecord("a", "chat", "sim-1", "latency", 0.0, 0.0, 2.0, 3.0, "done")
    early = CallRecord("a", "chat", "sim-0", "latency", 0.0, 0.0, 1.0, 4.0, "done")
    running = CallRecord("a", "chat", "sim-0", "latency", 0.0, 0.0, 1.5, None, "running")
    never = CallRecord("a", "chat", None, None, 0.0, 0.5, None, None, "failed")
    record = AppRecord("a", "chat", True, 0.0, 4.0, 1, [late, running, never, early],
                       error="CallFailedError: x")
    assert timeline_bars([record]) == [(early, ("sim-0", 1.0, 4.0)),
                                       (late, ("sim-1", 2.0, 3.0))]


def test_timeline_keeps_the_earliest_bars():
    calls = [CallRecord("a", "chat", "sim-0", None, 0.0, 0.0, float(MAX_BARS - i),
                        float(MAX_BARS - i) + 0.5, "done") for i in range(MAX_BARS + 1)]
    bars = timeline_bars([AppRecord("a", "chat", True, 0.0, 1.0, 1, calls)])
    assert len(bars) == MAX_BARS
    assert bars[0][1][1] == 0.0 and bars[-1][1][1] == MAX_BARS - 1


def test_without_matplotlib_bench_says_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    out = tmp_path / "run"
    code = main(["--workload", "chain_summary", "--doc-tokens", "1024", "--chunk-tokens", "512",
                 "--output-tokens", "4", "--quiet", "--out", str(out)])
    assert code == 0 and (out / "results.json").exists()
    err = capsys.readouterr().err
    assert err.strip() == ("plots skipped: matplotlib is not installed; install the bench "
                           "extra: pip install 'parrot-serve[bench]'")
    assert not list(out.glob("*.png"))
