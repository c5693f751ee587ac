"""The live paper runner end to end on real engine processes (simulated engines, so it runs
in seconds): one process per engine-parameter set, warm-up, one results.json and a table."""

from __future__ import annotations

import json

from parrot.core.config import EngineSpec, ServeConfig
from parrot.sim.live_paper import LIVE_EXPERIMENTS, LiveExperiment, run_live_paper

FAST = {"profile": "h200_llama7b", "max_context_len": 4096}


async def test_live_paper_runs_each_group_on_its_own_engine_process(tmp_path):
    config = ServeConfig(engines=(EngineSpec(name="e0", kind="simulated", params=FAST),))
    tiny = {"doc_tokens": 1024, "chunk_tokens": 512, "output_tokens": 4}
    experiments = (
        LiveExperiment("chain", "chain_summary", "app_centric,least_queue:baseline",
                       "least_queue:baseline", tiny, tiny),
        LiveExperiment("static", "copilot", "least_queue", "least_queue",
                       {"num_clients": 2, "system_prompt_tokens": 200, "output_tokens": 4},
                       {}, {"shared_prefix_decode": False}),
    )
    lines: list[str] = []
    summary = await run_live_paper(config, tmp_path, smoke=False, budget_s=300,
                                   delay_s=(0.0, 0.0), experiments=experiments,
                                   log=lines.append)
    chain = summary["experiments"]["chain"]
    assert chain["mode"] == "live" and chain["reference"] == "least_queue:baseline"
    assert {v["status"] for v in chain["variants"].values()} == {"ok"}
    static = summary["experiments"]["static"]["variants"]["least_queue:parrot"]
    assert static["status"] == "ok" and static["num_apps"] == 2
    assert sum("engines up" in line for line in lines) == 2  # two engine processes
    saved = json.loads((tmp_path / "results.json").read_text())
    assert set(saved["experiments"]) == {"chain", "static"}
    assert "chain" in (tmp_path / "table.txt").read_text()


async def test_a_spent_budget_skips_the_remaining_experiments(tmp_path):
    config = ServeConfig(engines=(EngineSpec(name="e0", kind="simulated", params=FAST),))
    tiny = {"doc_tokens": 1024, "chunk_tokens": 512, "output_tokens": 4}
    experiment = LiveExperiment("chain", "chain_summary", "app_centric", "app_centric",
                                tiny, tiny)
    summary = await run_live_paper(config, tmp_path, smoke=True, budget_s=0.0,
                                   delay_s=(0.0, 0.0), experiments=(experiment,),
                                   log=lambda line: None)
    assert summary["experiments"]["chain"] == {"skipped": "time budget"}


def test_the_gpu_runs_fit_the_random_llama_window():
    for e in LIVE_EXPERIMENTS:
        if e.workload == "copilot":
            # SmolLM2 counts ~1.01 tokens per estimated token on this text (3,400 -> 3,437);
            # + the template's ~30 tokens + the longest query (512) + the answer.
            need = e.spec["system_prompt_tokens"] * 1.02 + 30 + 512 + e.spec["output_tokens"]
            assert need <= 4096
