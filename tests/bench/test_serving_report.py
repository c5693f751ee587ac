"""bench/serving_report.py: the markdown page of a bench_serving JSON, and each policy's runs
against the reference policy's run of the same rate and concurrency."""

from __future__ import annotations

import json
from pathlib import Path

from bench.serving_report import main, markdown, pooled_ratio_rows, ratio_rows


def run(policy: str, rate: object, conc: int | None, tok_s: float, ttft50: float,
        ttft99: float) -> dict:
    pct = {"p50": 10.0, "p90": 20.0, "p99": 30.0}
    return {"policy": policy, "request_rate": rate, "max_concurrency": conc,
            "output_throughput": tok_s, "ttft_ms": {"p50": ttft50, "p90": ttft50, "p99": ttft99},
            "itl_ms": pct, "tpot_ms": pct, "e2e_ms": {"p50": 1500.0, "p90": 2000, "p99": 2500.0},
            "failed": 0}


ROWS = [run("least_queue", "inf", 64, 4000.0, 80.0, 400.0),
        run("least_queue", 20.0, None, 3000.0, 60.0, 100.0),
        run("app_centric", 20.0, None, 3030.0, 57.0, 110.0),
        run("app_centric", "inf", 64, 3960.0, 80.0, 380.0),
        run("app_centric", 30.0, None, 1.0, 1.0, 1.0)]    # no least_queue run at 30: left out


def test_each_run_is_compared_with_the_reference_run_of_the_same_spec():
    assert ratio_rows(ROWS, "least_queue") == [
        ["app_centric", "20", "-", "1.01x", "0.95x", "1.10x"],
        ["app_centric", "inf", "64", "0.99x", "1.00x", "0.95x"]]
    assert ratio_rows(ROWS, "app_centric") == [
        ["least_queue", "inf", "64", "1.01x", "1.00x", "1.05x"],
        ["least_queue", "20", "-", "0.99x", "1.05x", "0.91x"]]


def test_the_page_says_where_and_how_and_has_a_row_per_run(tmp_path: Path, capsys):
    results = {"url": "parrot-serve --config x.yaml", "lengths": "exact", "num_prompts": 400,
               "seed": 0, "mean_prompt_tokens": 342.7, "mean_output_tokens": 211.0,
               "provenance": {"date": "2026-12-05 21:36 UTC", "commit": "abc1234",
                              "device": "NVIDIA H100 80GB HBM3", "cpus": "16",
                              "command": "python3 bench/bench_serving.py --serve x.yaml"},
               "runs": ROWS}
    page = markdown(results)
    lines = page.splitlines()
    assert lines[0] == "# Serving: least_queue, app_centric on parrot-serve --config x.yaml"
    assert lines[2:7] == ["* date: 2026-12-05 21:36 UTC", "* commit: abc1234",
                          "* device: NVIDIA H100 80GB HBM3", "* cpus: 16",
                          "* command: `python3 bench/bench_serving.py --serve x.yaml`"]
    assert ("| least_queue | inf | 64 | 4,000 | 80 / 80 / 400 | 10.0 / 30.0 | 10.0 / 30.0 "
            "| 1.50 / 2.50 | 0 | - | - | - |") in lines
    assert sum(line.startswith("| app_centric | ") for line in lines) == 3 + 2
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results))
    assert main([str(path), "--vs", "app_centric"]) == 0
    assert "Against app_centric, run by run" in capsys.readouterr().out


def test_rounds_compare_within_a_round_then_pool_by_geometric_mean(tmp_path: Path):
    rounds = [{**run("least_queue", "inf", 64, 4000.0, 80.0, 400.0), "round": 0},
              {**run("app_centric", "inf", 64, 3600.0, 100.0, 420.0), "round": 0},
              {**run("app_centric", "inf", 64, 4400.0, 64.0, 380.0), "round": 1},
              {**run("least_queue", "inf", 64, 4000.0, 80.0, 400.0), "round": 1}]
    assert ratio_rows(rounds, "least_queue") == [
        ["app_centric", "inf", "64", "1", "0.90x", "1.25x", "1.05x"],
        ["app_centric", "inf", "64", "2", "1.10x", "0.80x", "0.95x"]]
    # (0.9 x 1.1) ** 0.5, (1.25 x 0.8) ** 0.5, (1.05 x 0.95) ** 0.5
    assert pooled_ratio_rows(rounds, "least_queue") == [
        ["app_centric", "inf", "64", "0.99x", "1.00x", "1.00x", "2"]]
    page = markdown({"url": "u", "runs": rounds}).splitlines()
    assert sum(line.startswith("| round | policy | rate | in flight |") for line in page) == 1
    assert "| 2 | app_centric | inf | 64 | 4,400 | 64 / 64 / 380 " in "\n".join(page)
    assert "| app_centric | inf | 64 | 0.99x | 1.00x | 1.00x | 2 |" in page
    # one round: no round column, no pooled table
    single = markdown({"url": "u", "runs": ROWS})
    assert "| round |" not in single and "geometric mean" not in single


def test_the_load_line_says_how_the_requests_sample():
    assert ", greedy, seed 0," in markdown({"url": "u", "runs": ROWS, "seed": 0})
    assert ", temperature 1, top_p 0.95, seed 0," in markdown(
        {"url": "u", "runs": ROWS, "seed": 0, "temperature": 1.0, "top_p": 0.95})
