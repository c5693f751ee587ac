"""bench/bench_serving.py against a real parrot-serve on a simulated engine: a handful of
streamed completions, every number of its JSON accounted for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench.scripts import load_script
from tests.serve_process import parrot_serve


def load_bench():
    return load_script("bench_serving")


CONFIG = {"manager": {"host": "127.0.0.1", "port": 0},
          "policy": {"name": "app_centric"},
          "engines": [{"name": "sim-0", "kind": "simulated", "in_process": True,
                       "params": {"decode_base_ms": 2.0, "decode_per_token_ms": 0.0,
                                  "prefill_per_token_ms": 0.01}}]}


def test_synthetic_chat_lengths_are_seeded_and_hidden_lengths_travel_in_the_prompt():
    bench = load_bench()
    exact = bench.synthetic_chat(50, 3, "exact", 4.0)
    assert exact == bench.synthetic_chat(50, 3, "exact", 4.0)
    assert all(r.max_tokens == r.output_tokens and r.ignore_eos for r in exact)
    hidden = bench.synthetic_chat(50, 3, "hidden", 4.0)
    assert [r.output_tokens for r in hidden] == [r.output_tokens for r in exact]
    assert all(not r.ignore_eos and r.max_tokens >= r.output_tokens
               and r.prompt.endswith(f"[[eos@{r.output_tokens}]]") for r in hidden)
    assert len({r.max_tokens for r in hidden if r.output_tokens < 800}) == 1   # one loose cap


def test_tpot_is_reported_against_the_target():
    """The share of requests whose TPOT met --slo-tpot-ms, in the results and the table; a
    one-token answer has no TPOT and is not counted."""
    bench = load_bench()
    outcomes = [bench.Outcome(True, ttft_s=0.1, e2e_s=0.1 + 0.02 * 10, output_tokens=11),
                bench.Outcome(True, ttft_s=0.1, e2e_s=0.1 + 0.05 * 10, output_tokens=11),
                bench.Outcome(True, ttft_s=0.1, e2e_s=0.1, output_tokens=1)]
    row = bench.summarize(outcomes, 1.0, bench.RunSpec(1.0, None), 1000.0, 30.0)
    assert row["tpot_within_slo"] == 0.5
    assert bench.table([row]).splitlines()[-1].endswith("50.0%")
    assert bench.summarize(outcomes[2:], 1.0, bench.RunSpec(1.0, None), 1000.0,
                           30.0)["tpot_within_slo"] is None


@pytest.mark.timeout(180)
@pytest.mark.parametrize("lengths,temperature", [("exact", "0"), ("hidden", "1.0")])
def test_bench_serving_against_a_simulated_parrot_serve(tmp_path: Path, lengths: str,
                                                        temperature: str):
    bench = load_bench()
    out = tmp_path / "serving.json"
    with parrot_serve(CONFIG, tmp_path) as (url, _proc):
        code = bench.main(["--url", url, "--num-prompts", "6", "--request-rate", "inf,40",
                           "--max-concurrency", "3", "--lengths", lengths, "--seed", "1",
                           "--temperature", temperature, "--top-p", "0.9",
                           "--out", str(out)])
    assert code == 0
    result = json.loads(out.read_text())
    assert (result["temperature"], result["top_p"]) == (float(temperature), 0.9)
    drawn = sum(r.output_tokens for r in bench.synthetic_chat(6, 1, lengths, 4.0))
    assert [(r["request_rate"], r["max_concurrency"]) for r in result["runs"]] == [
        ("inf", 3), (40.0, 3)]
    for run in result["runs"]:
        assert run["completed"] == 6 and run["failed"] == 0
        # the engine stopped at every drawn length, with or without seeing it as max_tokens
        assert run["output_tokens"] == drawn
        assert 0 < run["ttft_ms"]["p50"] <= run["ttft_ms"]["p99"] <= run["e2e_ms"]["p99"]
        assert 0 < run["tpot_ms"]["p50"] and 0 < run["itl_ms"]["p50"]
        assert run["output_throughput"] == pytest.approx(drawn / run["duration_s"])
        assert 0 <= run["goodput"] <= run["request_throughput"]


@pytest.mark.timeout(240)
def test_serve_mode_runs_each_policy_on_a_parrot_serve_of_its_own(tmp_path: Path):
    import yaml

    bench = load_bench()
    config = tmp_path / "serve.yaml"
    config.write_text(yaml.safe_dump({**CONFIG, "engines": [
        {**CONFIG["engines"][0], "in_process": False}]}))
    out = tmp_path / "serving.json"
    code = bench.main(["--serve", str(config), "--policies", "least_queue,app_centric",
                       "--engine-param", "decode_base_ms=1.0", "--num-prompts", "4",
                       "--specs", "inf@2,50", "--warmup", "2", "--out", str(out),
                       "--md", str(tmp_path / "serving.md")])
    assert code == 0
    runs = json.loads(out.read_text())["runs"]
    page = (tmp_path / "serving.md").read_text().splitlines()
    assert page[0] == f"# Serving: least_queue, app_centric on parrot-serve --config {config}"
    assert [line.split(":")[0] for line in page[2:7]] == [
        "* date", "* commit", "* device", "* cpus", "* command"]
    assert "--policies least_queue,app_centric" in page[6]
    # one row per run, then app_centric against least_queue at each of the two specs
    assert [line.split(" | ")[:3] for line in page if line.startswith("| app_centric")] == [
        ["| app_centric", "inf", "2"], ["| app_centric", "50", "-"],
        ["| app_centric", "inf", "2"], ["| app_centric", "50", "-"]]
    assert [(r["policy"], r["request_rate"], r["max_concurrency"], r["completed"], r["failed"])
            for r in runs] == [("least_queue", "inf", 2, 4, 0), ("least_queue", 50.0, None, 4, 0),
                               ("app_centric", "inf", 2, 4, 0), ("app_centric", 50.0, None, 4, 0)]
    # simulated engines capture no graphs: every run says so
    assert [(r["graph_captures_at_runtime"], r["graph_capture_s_at_runtime"]) for r in runs] \
        == [(0, 0.0)] * 4
    merged = bench.serve_config(config, "least_queue", ["decode_base_ms=1.0", "tag=x"])
    assert merged["policy"]["name"] == "least_queue"
    assert merged["engines"][0]["params"]["decode_base_ms"] == 1.0
    assert merged["engines"][0]["params"]["tag"] == "x"
    assert merged["manager"]["port"] == 0
    with pytest.raises(SystemExit, match="exactly one of --url and --serve"):
        bench.main(["--num-prompts", "1"])


async def test_timing_waits_until_idle_captures_stop():
    """settle_idle_captures: waits while the engines' count of graphs captured while idle
    moves, returns once it has not moved for `quiet_s` (or at the timeout)."""
    load_bench()                 # puts bench/ on sys.path
    from serve_metrics import settle_idle_captures

    counts = iter([0, 1, 3, 5, 5, 5, 5, 5, 5, 5, 5, 5])

    async def read() -> float:
        return next(counts)

    waited, captured = await settle_idle_captures(read, quiet_s=0.05, poll_s=0.01)
    assert captured == 5 and waited >= 0.05

    async def forever() -> float:
        forever.n += 1          # type: ignore[attr-defined]
        return forever.n        # type: ignore[attr-defined]

    forever.n = 0               # type: ignore[attr-defined]
    waited, captured = await settle_idle_captures(forever, quiet_s=0.05, poll_s=0.01,
                                                        timeout_s=0.1)
    assert 0.1 <= waited < 1.0 and captured >= 5


def test_metric_totals_sum_every_engine_and_no_other_metric():
    load_bench()                 # puts bench/ on sys.path
    from serve_metrics import metric_total, steps_total

    page = "\n".join([
        "# HELP parrot_engine_steps_total model steps",
        'parrot_engine_steps_total{engine="a"} 10.0',
        'parrot_engine_steps_total{engine="b"} 5.0',
        'parrot_engine_steps_created{engine="a"} 1.7e9',
        'parrot_engine_graph_captures_idle_total{engine="a"} 4.0',
        'parrot_engine_graph_captures_idle_totalx{engine="a"} 99.0'])
    assert steps_total(page) == 15
    assert metric_total(page, "parrot_engine_graph_captures_idle_total") == 4.0


def test_rounds_alternate_the_policies_order():
    bench = load_bench()
    assert bench.round_order(["least_queue", "app_centric"], 3) == [
        (0, "least_queue"), (0, "app_centric"), (1, "app_centric"), (1, "least_queue"),
        (2, "least_queue"), (2, "app_centric")]
    assert bench.round_order(["x"], 1) == [(0, "x")]
    with pytest.raises(SystemExit, match="--rounds"):
        bench.main(["--url", "http://127.0.0.1:1", "--rounds", "2"])
