"""The policy matrix: cell sizing, profile calibration, speedups and the written outputs."""

from __future__ import annotations

import json
import math

import pytest

from parrot.serve_config import auto_throughput_capacity
from parrot.engines.simulated import SimulatedEngine, SimulatedEngineConfig
from bench.matrix import (Cell, MatrixSpec, cell_workload_spec, geometric_mean,
                               latency_capacity_for, latency_centric_capacity_for, markdown_table,
                               run_cell, write_outputs)
from parrot.sim.workloads.registry import WORKLOADS


def test_matrix_covers_every_registered_workload():
    assert MatrixSpec().workloads == tuple(WORKLOADS)
    assert MatrixSpec().engine_counts == (1, 2, 4, 8)
    with pytest.raises(ValueError, match="unknown"):
        MatrixSpec(workloads=("no_such_workload",))


def test_load_scales_down_on_smaller_clusters_only():
    mixed = WORKLOADS["mixed"]   # meant for 4 engines: chat at 1 req/s, 30 jobs at 0.5/s
    assert mixed.num_engines == 4 and mixed.spec_defaults["chat_rate"] == 1.0
    assert (mixed.spec_defaults["num_apps"], mixed.spec_defaults["request_rate"]) == (30, 0.5)
    one = cell_workload_spec("mixed", 1, 0)
    assert (one.chat_rate, one.request_rate, one.num_apps) == (0.25, 0.125, 8)  # ceil(7.5)
    assert (cell_workload_spec("mixed", 2, 0).num_apps, cell_workload_spec("gpts", 2, 0)
            .num_requests) == (15, 50)
    for n in (4, 8):
        cell = cell_workload_spec("mixed", n, 0)
        assert (cell.chat_rate, cell.request_rate, cell.num_apps) == (1.0, 0.5, 30)
    assert cell_workload_spec("chain_summary_bg", 8, 0).chat_rate == 1.0
    assert cell_workload_spec("map_reduce", 1, 3).seed == 3


def test_latency_capacity_is_calibrated_per_profile():
    # The paper's 6144 tokens on its A100 LLaMA-13B; the same decode-time ratio elsewhere.
    assert latency_capacity_for("a100_llama13b") == 6144
    assert latency_capacity_for("h200_llama7b") == 20480
    # the latency-centric baseline's 4096-token cap, calibrated by the same rule
    assert latency_centric_capacity_for("a100_llama13b") == 4096
    assert latency_centric_capacity_for("h200_llama7b") == 13312


async def test_throughput_capacity_keeps_the_paper_profiles_share_of_the_kv_cache():
    async def throughput_capacity_for(profile: str) -> int:
        """What the manager gives an engine of `profile` by default (`auto`), from the KV
        size the simulated engine reports."""
        engine = SimulatedEngine("e0", SimulatedEngineConfig.from_mapping({"profile": profile}))
        info = await engine.info()
        return auto_throughput_capacity(info.num_blocks_total * info.block_size, 1024)

    assert await throughput_capacity_for("a100_llama13b") == 32768  # 56,000 tokens of KV
    # h200_llama7b: 12,900 blocks x 16 = 206,400 tokens; 58.5% of it, rounded down to 1024
    assert await throughput_capacity_for("h200_llama7b") == \
        206400 * 32768 // 56000 // 1024 * 1024


def test_cells_run_the_latency_centric_baseline_with_its_calibrated_cap(monkeypatch):
    """The matrix calibrates both sides' latency caps to the profile: app_centric's latency
    capacity and the latency-centric baseline's token cap (never an A100 cap on one side)."""
    import bench.matrix as matrix

    seen = []
    real = matrix.run_variant

    def spy(settings, variant, *args, **kwargs):
        seen.append((variant.policy, settings.params_for(variant),
                     settings.cluster.latency_capacity))
        return real(settings, variant, *args, **kwargs)

    monkeypatch.setattr(matrix, "run_variant", spy)
    run_cell(MatrixSpec(workloads=("chain_summary",), engine_counts=(1,),
                        profile="h200_llama7b", setting="paper"), "chain_summary", 1)
    by_policy = {policy: (params, capacity) for policy, params, capacity in seen}
    assert by_policy["latency_centric"][0]["token_capacity"] == 13312
    assert by_policy["app_centric"][1] == 20480
    assert by_policy["app_centric"][0] == {"work_conserving": False}


def test_the_fair_setting_hides_lengths_caches_prefixes_and_caps_both_sides_alike(monkeypatch):
    """Fair cells: sampled (hidden) lengths, every variant's engines with automatic prefix
    caching, app_centric with its defaults, and the latency-centric cap equal to
    app_centric's latency capacity on the profile; the paper setting keeps exact lengths and
    plain baselines."""
    import bench.matrix as matrix

    seen = []
    real = matrix.run_variant

    def spy(settings, variant, *args, **kwargs):
        seen.append((variant, settings))
        return real(settings, variant, *args, **kwargs)

    monkeypatch.setattr(matrix, "run_variant", spy)
    spec = MatrixSpec(workloads=("chain_summary",), engine_counts=(1,), profile="h200_llama7b")
    run_cell(spec, "chain_summary", 1)
    assert [v.policy for v, _ in seen] == ["app_centric", "least_queue", "latency_centric",
                                           "throughput_centric"]
    assert [v.engine_params for v, _ in seen[1:]] == [{"prefix_caching": True}] * 3
    assert seen[0][0].engine_params == {}
    settings = seen[0][1]
    assert settings.workload_spec.output_lengths == "sampled"
    assert settings.params_for(seen[0][0]) == {}
    assert settings.params_for(seen[2][0]) == {"token_capacity": 20480}
    assert settings.cluster.latency_capacity == 20480
    # every variant on the same engines: app_centric's cache prefixes too
    assert settings.cluster.engine_params == {"prefix_caching": True}
    paper = MatrixSpec(setting="paper")
    assert paper.baselines == matrix.BASELINES
    assert cell_workload_spec("map_reduce", 1, 0, "paper").output_lengths == "exact"
    with pytest.raises(ValueError, match="setting"):
        MatrixSpec(setting="oracle")


def cell(workload, n, ours, *baselines):
    names = ("least_queue:baseline", "latency_centric:baseline", "throughput_centric:baseline")
    return Cell(workload, n, {"app_centric": ours, **dict(zip(names, baselines))}, {}, 0.0)


def test_speedup_is_over_the_best_baseline():
    c = cell("map_reduce", 4, 4.0, 5.0, 6.0, None)
    assert c.best_baseline == "least_queue:baseline" and c.speedup == 1.25
    assert cell("map_reduce", 4, None, 5.0, 6.0, 7.0).speedup is None
    assert cell("map_reduce", 4, 2.0, None, None, None).speedup == math.inf
    assert geometric_mean([2.0, 0.5, math.inf]) == pytest.approx(1.0)


def test_outputs_hold_the_table_json_and_heatmap(tmp_path):
    spec = MatrixSpec(workloads=("map_reduce",), engine_counts=(1, 2))
    cells = [cell("map_reduce", 1, 4.0, 5.0, 6.0, 8.0), cell("map_reduce", 2, 4.0, 3.0, 6.0, 8.0)]
    table = write_outputs(cells, spec, tmp_path, 1.0)
    assert "| map_reduce | 1.25× (least_queue) | 0.75× (least_queue) |" in table
    assert (tmp_path / "matrix.png").stat().st_size > 1000
    data = json.loads((tmp_path / "matrix.json").read_text())
    assert [c["speedup"] for c in data["cells"]] == [1.25, 0.75]
    assert markdown_table(cells, spec) in (tmp_path / "matrix.md").read_text()


def test_a_cell_is_deterministic_and_app_centric_wins_map_reduce_on_two_engines():
    spec = MatrixSpec(workloads=("map_reduce",), engine_counts=(2,), setting="paper")
    first, again = run_cell(spec, "map_reduce", 2), run_cell(spec, "map_reduce", 2)
    assert first.mean_e2e_s == again.mean_e2e_s
    assert first.speedup is not None and first.speedup > 1.0


def test_the_script_runs_from_a_checkout_as_documented(tmp_path):
    """`python bench/policy_matrix.py` (docs/MATRIX.md), from any folder: one small cell."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "bench" / "policy_matrix.py"
    run = subprocess.run([sys.executable, str(script), "--out", str(tmp_path), "--workloads",
                          "chain_summary", "--engines", "1", "--processes", "1"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert (tmp_path / "matrix.json").is_file() and "Geometric mean" in run.stdout


def test_the_app_centric_variant_takes_parameters_of_its_own(monkeypatch, tmp_path, capsys):
    """`--parrot app_centric+policy.KEY=VALUE`: app_centric runs with them over the setting's
    and its cells stay under "app_centric"; a parameter it does not have is a usage error."""
    import bench.matrix as matrix
    from bench.policy_matrix import main

    seen = []
    real = matrix.run_variant

    def spy(settings, variant, *args, **kwargs):
        seen.append((variant.policy, settings.params_for(variant)))
        return real(settings, variant, *args, **kwargs)

    monkeypatch.setattr(matrix, "run_variant", spy)
    spec = MatrixSpec(workloads=("chain_summary",), engine_counts=(1,),
                      parrot="app_centric+policy.hold_background_work=true")
    cell = run_cell(spec, "chain_summary", 1)
    assert dict(seen)["app_centric"] == {"hold_background_work": True}
    assert cell.speedup is not None and cell.mean_e2e_s["app_centric"] is not None
    with pytest.raises(SystemExit) as exit_:
        main(["--out", str(tmp_path), "--workloads", "chain_summary", "--engines", "1",
              "--parrot", "app_centric+policy.no_such_knob=1"])
    assert exit_.value.code == 2 and "no_such_knob" in capsys.readouterr().err
