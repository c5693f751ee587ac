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


def test_calls_running_together_on_one_engine_get_a_row_each():
    """A batch on one engine is a stack of bars (its concurrency visible), not one block."""
    from parrot.sim.plots import timeline_lanes

    def call(engine: str, start: float, end: float) -> CallRecord:
        return CallRecord("a", "map_reduce", engine, "throughput", 0.0, 0.0, start, end, "done")

    calls = [call("sim-0", 0.0, 2.0), call("sim-0", 0.5, 1.0), call("sim-0", 1.0, 3.0),
             call("sim-1", 0.0, 1.0), call("sim-0", 2.5, 4.0)]
    bars = timeline_bars([AppRecord("a", "map_reduce", True, 0.0, 4.0, 1, calls)])
    rows, lanes = timeline_lanes(bars, ["sim-0", "sim-1", "sim-2"])
    assert rows == ["sim-0", "sim-0 #2", "sim-1", "sim-2"]   # peak concurrency 2 on sim-0
    by_call = {(b[1][0], b[1][1]): rows[lane] for b, lane in zip(bars, lanes)}
    assert by_call == {("sim-0", 0.0): "sim-0", ("sim-0", 0.5): "sim-0 #2",
                       ("sim-0", 1.0): "sim-0 #2", ("sim-1", 0.0): "sim-1",
                       ("sim-0", 2.5): "sim-0"}


def test_the_timeline_and_rate_plots_draw(tmp_path):
    import pytest

    pytest.importorskip("matplotlib")
    from parrot.sim.plots import rate_plot, timeline

    calls = [CallRecord(f"app-{i}", "chain_summary", "sim-0", "latency", 0.0, 0.0, i * 0.1,
                        1.0 + i * 0.1, "done") for i in range(3)]
    records = [AppRecord(f"app-{i}", "chain_summary", True, 0.0, 2.0, 1, [calls[i]])
               for i in range(3)]
    timeline("x", records, tmp_path / "t.png", "title", ["sim-0", "sim-1"])
    assert (tmp_path / "t.png").stat().st_size > 0
    summary = {"target_s_per_token": 0.04, "variants": {"a": {
        "sustainable_rate": 4.0, "capped": False,
        "points": [{"rate": r, "normalized_latency_s_per_token": 0.02 + r / 1000}
                   for r in (1.0, 2.0, 4.0)]}}}
    rate_plot(summary, tmp_path / "r.png", "rates")
    assert (tmp_path / "r.png").stat().st_size > 0
