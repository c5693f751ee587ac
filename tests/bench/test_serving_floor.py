"""bench/serving_floor.py: the cost model of a LLaMA shape and the floor of a token mix."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.bench.scripts import load_script
from tests.serve_process import NEEDS_SMOLLM2, ROOT, smollm2_config


def test_llama_7b_costs_its_known_parameter_count():
    from parrot.engines.builtin.llama.shapes import NAMED_SHAPES

    floor = load_script("serving_floor")
    cost = floor.ModelCost.of(NAMED_SHAPES["llama-7b"], 2)
    assert cost.weight_bytes == 6_738_415_616 * 2          # LLaMA-7B's 6.74B weights, bf16
    # every weight but the input embedding and the norms is multiplied, twice a FLOP each
    assert cost.matmul_flops_per_token == 2 * (6_738_415_616 - 131_072_000 - 32 * 8192 - 4096)
    assert cost.attention_flops_per_pair == 4 * 32 * 32 * 128
    assert cost.kv_bytes_per_token == 2 * 32 * 32 * 128 * 2


def test_the_floor_adds_prefill_flops_and_decode_bytes():
    floor = load_script("serving_floor")
    cost = floor.ModelCost(weight_bytes=1000, matmul_flops_per_token=10,
                           attention_flops_per_pair=2, kv_bytes_per_token=3)
    rates = floor.Rates(matmul_flops_per_s=100.0, copy_bytes_per_s=1000.0)
    got = floor.serving_floor([(4, 3), (2, 1)], steps=5, cost=cost, rates=rates)
    # prefill: (4 + 2) tokens x 10 + 2 x (4*5/2 + 2*3/2) pairs = 60 + 26 FLOPs
    assert got.prefill_s == pytest.approx(86 / 100)
    # decode: 5 steps x 1000 bytes; the first request's tokens 2 and 3 read 5 and 6 keys, the
    # second's only token came from its prefill
    assert got.decode_s == pytest.approx((5000 + (5 + 6) * 3) / 1000)
    assert got.total_s == pytest.approx(got.prefill_s + got.decode_s)


def test_a_step_is_priced_by_the_floors_rule():
    floor = load_script("serving_floor")
    cost = floor.ModelCost(weight_bytes=1000, matmul_flops_per_token=10,
                           attention_flops_per_pair=2, kv_bytes_per_token=3)
    step = floor.StepFloor(cost, floor.Rates(matmul_flops_per_s=100.0, copy_bytes_per_s=1000.0))
    # a mixed step: 7 prefill tokens' FLOPs, the weights once, its 3 rows' 40 KV tokens
    assert step.iteration_seconds(3, 40, 7) == pytest.approx(70 / 100 + (1000 + 120) / 1000)
    assert step.iteration_seconds(0, 0, 7) == pytest.approx(70 / 100 + 1)   # weights too
    assert step.iteration_seconds(2, 10, 0) == pytest.approx((1000 + 30) / 1000)


def test_the_trace_report_prices_each_kind_of_step_at_the_floor(tmp_path: Path):
    """step_trace_report.py --floor: each kind's floor is the StepFloor of its steps, summed,
    and its ratio the loop time over it."""
    import subprocess

    from parrot.engines.builtin.llama.shapes import NAMED_SHAPES
    from parrot.engines.builtin.observe.step_trace import StepRecord, StepTrace

    def record(t: float, rows: int, kv: int, prefill: int, ms: float) -> StepRecord:
        return StepRecord(t=t, idle_ms=0.0, sched_ms=1.0, step_ms=ms - 2.0, post_ms=1.0,
                          path="graph" if not prefill else "eager", ahead_hit=False,
                          ahead_miss=False, decode_rows=rows, kv_tokens=kv,
                          shared_saved_tokens=0, shared_groups=0,
                          prefill_chunks=1 if prefill else 0, prefill_tokens=prefill)

    trace = StepTrace(tmp_path / "trace.jsonl")
    steps = [record(100.0, 4, 2000, 0, 10.0), record(100.01, 4, 2004, 0, 10.0),
             record(100.02, 4, 2008, 300, 40.0)]
    for r in steps:
        trace.write(r)
    trace.close()
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "step_trace_report.py"),
                          str(tmp_path / "trace.jsonl"), "--floor", "800:4000"],
                         capture_output=True, text=True, check=True).stdout
    floor = load_script("serving_floor")
    price = floor.StepFloor(floor.ModelCost.of(NAMED_SHAPES["llama-7b"], 2),
                            floor.Rates(800e12, 4000e9))
    decode_ms = sum(1000 * price.iteration_seconds(4, r.kv_tokens, 0) for r in steps[:2])
    mixed_ms = 1000 * price.iteration_seconds(4, 2008, 300)
    lines = {line.split("  ")[0]: line.split() for line in out.splitlines()}
    assert lines["kind"][-4:] == ["floor", "ms", "x", "floor"]
    assert lines["decode 3-4 (graph)"][-2:] == [f"{decode_ms:.0f}", f"{20 / decode_ms:.2f}"]
    assert lines["mixed (eager)"][-2:] == [f"{mixed_ms:.0f}", f"{40 / mixed_ms:.2f}"]


def test_steps_are_summed_over_engines_from_metrics():
    floor = load_script("serve_metrics")
    page = ("# HELP parrot_engine_steps_total steps\n# TYPE parrot_engine_steps_total counter\n"
            'parrot_engine_steps_total{engine="a"} 12.0\n'
            'parrot_engine_steps_total{engine="b"} 30.0\n'
            'parrot_engine_graph_steps_total{engine="a"} 7.0\n')
    assert floor.steps_total(page) == 42


@NEEDS_SMOLLM2
@pytest.mark.timeout(420)
def test_bench_serving_prints_the_floor_of_a_builtin_engine_run(tmp_path: Path):
    import yaml

    bench = load_script("bench_serving")
    config = smollm2_config(kv_cache_tokens=4096)
    config["engines"][0]["in_process"] = False
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(config))
    out = tmp_path / "serving.json"
    assert bench.main(["--serve", str(path), "--num-prompts", "2", "--max-concurrency", "2",
                       "--warmup", "0", "--floor", "--out", str(out)]) == 0
    run = json.loads(out.read_text())["runs"][0]
    floor = run["floor"]
    assert floor["steps"] > 0 and floor["prefill_s"] > 0 and floor["decode_s"] > 0
    assert floor["total_s"] == pytest.approx(floor["prefill_s"] + floor["decode_s"])
    assert floor["wall_over_floor"] == pytest.approx(run["duration_s"] / floor["total_s"])
    with pytest.raises(SystemExit, match="--floor needs --serve"):
        bench.main(["--url", "http://127.0.0.1:1", "--floor"])
