"""Sweeps, the sustainable-rate search, and the paper table built from their JSON."""

from __future__ import annotations

import json

import pytest

from parrot.cli.bench import main
from bench.paper.experiments import EXPERIMENTS, Experiment, Ratio
from bench.paper.report import BEGIN, END, ratio_values, splice_page, write_report
from parrot.sim.sweep import RateSearch, Sweep, meets_target, sustainable_rate
from parrot.sim.workloads.spec import WorkloadConfigError, WorkloadSpec


def test_sweep_parses_fields_and_validates_every_value():
    sweep = Sweep.parse("output_tokens=25,50")
    assert sweep == Sweep("output_tokens", (25, 50))
    assert [s.output_tokens for s in sweep.specs(WorkloadSpec())] == [25, 50]
    assert Sweep.parse("chat_rate=0,0.5").values == (0, 0.5)
    with pytest.raises(WorkloadConfigError, match="FIELD one of"):
        Sweep.parse("seed=1,2")
    with pytest.raises(WorkloadConfigError, match="output_tokens: 0"):
        Sweep.parse("output_tokens=10,0").specs(WorkloadSpec())


def entry(norm: float | None, status: str = "ok", failed: int = 0) -> dict:
    return {"status": status, "num_failed": failed,
            "normalized_latency_s_per_token": {"mean": norm}}


def test_a_rate_is_sustained_within_the_target_with_no_failures():
    assert meets_target(entry(0.03), 0.04) == (True, 0.03)
    assert meets_target(entry(0.05), 0.04)[0] is False
    assert meets_target(entry(0.01, failed=1), 0.04)[0] is False
    assert meets_target(entry(None, status="deadlock"), 0.04)[0] is False


def test_the_search_doubles_then_bisects_between_good_and_bad():
    capacity = 10.0  # latency explodes past 10 req/s
    tried = []

    def run_at(rate: float) -> dict:
        tried.append(rate)
        return entry(0.01 if rate <= capacity else 1.0)

    rate, points = sustainable_rate(run_at, 0.04, start=1.0, refinements=3)
    assert tried[:5] == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert 8.0 <= rate <= capacity and len(points) == 8
    assert sustainable_rate(lambda r: entry(1.0), 0.04, start=1.0)[0] == 0.0
    assert sustainable_rate(lambda r: entry(0.01), 0.04, start=1.0, max_rate=8.0)[0] == 8.0


def test_cli_sweep_writes_one_comparison_per_value(tmp_path, capsys):
    out = tmp_path / "sweep"
    code = main(["--workload", "chain_summary", "--doc-tokens", "1024", "--chunk-tokens",
                 "512", "--sweep", "output_tokens=4,8", "--quiet", "--no-plots",
                 "--out", str(out)])
    assert code == 0
    summary = json.loads((out / "sweep.json").read_text())
    assert summary["field"] == "output_tokens" and summary["values"] == [4, 8]
    for value, point in zip((4, 8), summary["points"]):
        results = json.loads((out / f"output_tokens={value}" / "results.json").read_text())
        assert results["settings"]["workload"]["output_tokens"] == value
        figures = point["figures"]["app_centric:parrot"]
        assert figures["speedup"] == results["speedup_vs_reference"]["app_centric:parrot"]
    assert "sweep of output_tokens" in capsys.readouterr().out


def test_report_ratios_come_from_one_comparison_each(tmp_path):
    out = tmp_path / "paper"
    main(["--workload", "chain_summary", "--doc-tokens", "1024", "--chunk-tokens", "512",
          "--sweep", "output_tokens=4,8", "--quiet", "--no-plots",
          "--out", str(out / "chain")])
    experiment = Experiment("chain", "chain", "1.38x", ("--workload", "chain_summary"),
                            (Ratio("vs baseline", "app_centric:parrot",
                                   "least_queue:baseline"),))
    table = write_report(out, [experiment], {"chain": 1.0}, 2.0)
    summary = json.loads((out / "paper.json").read_text())
    values = summary["experiments"]["chain"]["ratios"][0]["values"]
    for value in values:
        results = json.loads((out / "chain" / f"output_tokens={value['at']}" /
                              "results.json").read_text())
        means = {k: v["e2e_latency_s"]["mean"] for k, v in results["variants"].items()}
        assert value["value"] == pytest.approx(means["least_queue:baseline"]
                                               / means["app_centric:parrot"])
    assert "output_tokens 4: " in table and "| pending |" in table
    page = tmp_path / "RESULTS.md"
    page.write_text(f"intro\n{BEGIN}\nold\n{END}\nafter\n")
    splice_page(page, table)
    text = page.read_text()
    assert "old" not in text and table in text and text.endswith(f"{END}\nafter\n")


def test_rate_ratios_say_when_the_search_hit_its_cap():
    data = {"variants": {"a": {"sustainable_rate": 256.0, "capped": True},
                         "b": {"sustainable_rate": 16.0, "capped": False}}}
    (row,) = ratio_values("rates", data, Ratio("x", "a", "b", "sustainable_rate"))
    assert row["value"] == 16.0 and row["ours_capped"] and not row["baseline_capped"]


def test_every_paper_experiment_names_registered_variants():
    from parrot.sim.compare import parse_variants
    from parrot.sim.workloads.registry import WORKLOADS

    keys = [e.key for e in EXPERIMENTS]
    assert len(keys) == len(set(keys))
    for e in EXPERIMENTS:
        args = dict(zip(e.args[::2], e.args[1::2]))
        assert args["--workload"] in WORKLOADS
        labels = {v.label for v in parse_variants(args.get("--compare", WORKLOADS[
            args["--workload"]].default_compare))}
        for ratio in e.ratios:
            assert {ratio.ours, ratio.baseline} <= labels, (e.key, ratio)


def test_run_paper_writes_the_table_and_splices_the_page(tmp_path):
    from bench.paper.experiments import run_paper

    tiny = ("--doc-tokens", "1024", "--chunk-tokens", "512", "--output-tokens", "4")
    experiments = (
        Experiment("chain", "chain summary", "1.38x", ("--workload", "chain_summary", *tiny,
                                                        "--sweep", "num_apps=1,2"),
                   (Ratio("vs request-level", "app_centric:parrot", "least_queue:baseline"),)),
        Experiment("mr", "map-reduce", "2.37x", ("--workload", "map_reduce", *tiny),
                   (Ratio("vs capped", "app_centric:parrot", "latency_centric:baseline"),)),
    )
    page = tmp_path / "RESULTS.md"
    page.write_text(f"# Results\n{BEGIN}\n{END}\n")
    code = run_paper(tmp_path / "out", quiet=True, plots=False, jobs=1, page=page,
                     experiments=experiments)
    assert code == 0
    text = page.read_text()
    assert "| chain summary | 1.38x | vs request-level: num_apps 1: " in text
    assert "| map-reduce | 2.37x | vs capped: " in text
    assert "`parrot-bench --workload map_reduce" in text
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert set(run["runs"]) == {"chain", "mr"} and run["wall_s"] > 0


def test_run_paper_reports_each_experiment_as_it_finishes(tmp_path, capsys):
    """Not in submission order: the slow one (submitted first) is reported after the fast."""
    from bench.paper.experiments import run_paper

    slow = ("--doc-tokens", "4096", "--chunk-tokens", "512", "--output-tokens", "8",
            "--sweep", "num_apps=1,2,3")
    fast = ("--doc-tokens", "1024", "--chunk-tokens", "512", "--output-tokens", "2")
    experiments = (
        Experiment("slow", "chain summary", "1.38x", ("--workload", "chain_summary", *slow),
                   (Ratio("vs request-level", "app_centric:parrot", "least_queue:baseline"),)),
        Experiment("fast", "map-reduce", "2.37x", ("--workload", "map_reduce", *fast),
                   (Ratio("vs capped", "app_centric:parrot", "latency_centric:baseline"),)),
    )
    assert run_paper(tmp_path / "out", plots=False, jobs=2, experiments=experiments) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "[paper]" in line]
    assert lines[0].startswith("[paper] 2 experiments, 2 at a time")
    assert lines[1].startswith("[paper] 1/2 fast: exit 0") and "2/2 slow: exit 0" in lines[2]


def test_rate_search_doubles_then_bisects_and_checks_what_it_is_told():
    search = RateSearch(start=2.0, max_rate=64.0, refinements=2)
    tried = []
    while (rate := search.next_rate()) is not None:
        tried.append(rate)
        search.record(rate, rate <= 10.0, 0.01)
    assert tried == [2.0, 4.0, 8.0, 16.0, pytest.approx(8 * 2 ** 0.5),
                     pytest.approx((8 * 8 * 2 ** 0.5) ** 0.5)]
    # 11.3 fails, 9.5 holds: the search reports the last rate that held
    assert search.result[0] == pytest.approx(tried[-1]) and search.bad == pytest.approx(tried[4])
    assert [p.ok for p in search.result[1]] == [True, True, True, False, False, True]
    fresh = RateSearch(start=2.0)
    with pytest.raises(ValueError, match="expected a result for 2.0"):
        fresh.record(4.0, True)
    capped = RateSearch(start=2.0, max_rate=4.0)
    capped.record(2.0, True)
    capped.record(4.0, True)
    assert capped.next_rate() is None and capped.result[0] == 4.0 and capped.bad is None


def test_the_calibrated_paper_table_runs_both_caps_calibrated(tmp_path):
    """bench.paper.reproduce --calibrate: app_centric's latency capacity and the
    latency-centric baseline's
    cap calibrated to the profile on every run, said in each command (the throughput
    capacity is the profile's share of KV by default); the live column (measured with the
    paper's caps) is left out."""
    from bench.paper.experiments import calibration_args, run_paper

    assert calibration_args("h200_llama7b") == (
        "--latency-capacity", "20480", "--policy-param", "latency_centric.token_capacity=13312")
    assert calibration_args("a100_llama13b")[1::2] == (
        "6144", "latency_centric.token_capacity=4096")             # the paper's own figures
    assert calibration_args("h200_llama7b", with_latency_centric=False) == (
        "--latency-capacity", "20480")                              # no baseline param
    tiny = ("--doc-tokens", "4096", "--chunk-tokens", "1024", "--output-tokens", "8")
    experiments = (Experiment("mr", "map-reduce", "2.37x", ("--workload", "map_reduce", *tiny),
                              (Ratio("vs capped", "app_centric:parrot",
                                     "latency_centric:baseline"),)),)
    out = tmp_path / "results" / "paper_calibrated"
    assert run_paper(out, quiet=True, plots=False, jobs=1, experiments=experiments,
                     calibrate=True) == 0
    results = json.loads((out / "mr" / "results.json").read_text())
    assert results["settings"]["cluster"]["latency_capacity"] == 20480
    assert results["settings"]["cluster"]["throughput_capacity"] is None     # auto:
    assert [e["throughput_capacity"] for e in results["variants"]["app_centric:parrot"][
        "engines"]] == [119808]                                   # the profile's share of KV
    assert results["settings"]["policy_params"]["latency_centric"]["token_capacity"] == 13312
    table = (out / "table.md").read_text()
    assert "--latency-capacity 20480 --policy-param latency_centric.token_capacity=13312" \
        in table
    assert "see the main table" in table
    assert json.loads((out / "run.json").read_text())["calibrated"] is True
