"""The live column of the paper table comes from the committed live results."""

from __future__ import annotations

import json

from parrot.sim.live_cells import live_cell, load_live


def _run(mean: float) -> dict:
    return {"status": "ok", "e2e_latency_s": {"mean": mean}}


LIVE = {"map_reduce": {"reference": "latency_centric:baseline",
                       "variants": {"app_centric:parrot": _run(5.0),
                                    "latency_centric:baseline": _run(10.0)}},
        "copilot_32": {"reference": "least_queue:baseline",
                       "variants": {"least_queue:parrot": _run(3.0),
                                    "app_centric:parrot": {"status": "error"},
                                    "least_queue:baseline": _run(9.0)}},
        "copilot_32_static": {"reference": "least_queue:parrot",
                              "variants": {"least_queue:parrot": _run(1.5)}}}


def test_ratios_are_the_reference_mean_over_ours_and_failures_say_na():
    assert live_cell(LIVE, "map_reduce_apps") == "vs latency-capped request-level: 2.00×"
    cell = live_cell(LIVE, "copilot").split("<br>")
    assert cell[0] == "32 users, sharing vs no sharing: 3.00×"
    assert cell[1] == "32 users, app_centric vs no sharing: n/a"      # that run failed
    assert cell[2] == "64 users, sharing vs no sharing: n/a"          # not in the results
    assert cell[3] == "32 users, sharing vs static sharing: 0.50×"    # cross-run baseline
    assert live_cell(LIVE, "gpts_rate") == "not run live"


def test_no_results_or_a_smoke_run_leave_the_column_pending(tmp_path):
    assert live_cell(load_live(tmp_path / "missing.json"), "map_reduce_apps") == "pending"
    smoke = tmp_path / "results.json"
    smoke.write_text(json.dumps({"smoke": True, "experiments": LIVE}))
    assert load_live(smoke) is None
    real = tmp_path / "real.json"
    real.write_text(json.dumps({"smoke": False, "experiments": LIVE}))
    assert load_live(real) == LIVE
