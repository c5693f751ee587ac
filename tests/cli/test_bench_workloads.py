"""Every workload parrot-bench documents runs with its default arguments on the default
simulated cluster and exits 0; a variant that fails says why on the console."""

from __future__ import annotations

import json

import pytest

from parrot.cli.bench import main
from parrot.sim.workloads.registry import WORKLOADS

# What README.md and docs/BENCHMARKS.md list. The ones that take more than ~10 s on 2 CPU
# cores (background chat for 300 / 60 simulated seconds) are marked slow.
DOCUMENTED = ["chain_summary", "concurrent_chains", "map_reduce", "copilot", "gpts",
              "multi_agent", pytest.param("chain_summary_bg", marks=pytest.mark.slow),
              pytest.param("mixed", marks=pytest.mark.slow),
              pytest.param("chat_batch", marks=pytest.mark.slow), "tiny_apps", "agent_loop"]


def test_the_documented_list_is_every_workload():
    names = {p if isinstance(p, str) else p.values[0] for p in DOCUMENTED}
    assert names == set(WORKLOADS)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("workload", DOCUMENTED)
def test_each_workload_exits_0_with_default_arguments(tmp_path, capsys, workload):
    out = tmp_path / workload
    code = main(["--workload", workload, "--out", str(out), "--no-plots", "--quiet"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    results = json.loads((out / "results.json").read_text())
    assert {v["status"] for v in results["variants"].values()} == {"ok"}
    assert "failed variants" not in printed


def test_a_failing_variant_says_why(tmp_path, capsys):
    # copilot's 6,000-token shared prompt on engines of a 4,096-token window
    code = main(["--workload", "copilot", "--clients", "2", "--compare", "least_queue",
                 "--engine-param", "max_context_len=4096", "--out", str(tmp_path / "c"),
                 "--no-plots", "--quiet"])
    printed = capsys.readouterr().out
    assert code == 1
    assert "failed variants:" in printed
    assert "least_queue:parrot: error: 2 application(s) failed; first: " in printed
    assert "PromptTooLongError" in printed and "max_context_len is 4096" in printed
