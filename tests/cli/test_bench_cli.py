"""parrot-bench: a tiny comparison end to end, and clear argument errors."""

from __future__ import annotations

import json

import pytest

from parrot.cli.bench import main

TINY = ["--doc-tokens", "2048", "--chunk-tokens", "512", "--output-tokens", "10"]


def test_tiny_comparison_writes_results_table_and_plots(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["--workload", "chain_summary_bg", "--compare",
                 "app_centric,least_queue:baseline", "--engines", "2", "--seed", "1",
                 "--chat-rate", "1", "--chat-prompt-tokens", "32:64",
                 "--chat-output-tokens", "8:16", "--out", str(out), *TINY])
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    assert results["workload"] == "chain_summary_bg" and results["mode"] == "sim"
    assert results["reference"] == "least_queue:baseline"
    for label in ("app_centric:parrot", "least_queue:baseline"):
        entry = results["variants"][label]
        assert entry["status"] == "ok"
        assert all(isinstance(entry["e2e_latency_s"][k], float) for k in ("mean", "p50", "p99"))
        assert entry["background"]["num_apps"] >= 1
        assert len(entry["engines"]) == 2
    assert (out / "latency_cdf.png").stat().st_size > 0
    assert (out / "timeline_app_centric_parrot.png").stat().st_size > 0
    printed = capsys.readouterr()
    assert "app_centric:parrot" in printed.out and "background chat" in printed.out
    assert "[2/2] least_queue:baseline" in printed.err  # the progress bar


@pytest.mark.parametrize("argv, message", [
    (["--compare", "no_such_policy"], "unknown policy 'no_such_policy'"),
    (["--compare", "app_centric,,least_queue"], "empty item"),
    (["--chat-prompt-tokens", "10-20"], "--chat-prompt-tokens: '10-20' is not valid"),
    (["--chunk-tokens", "4096", "--doc-tokens", "1024"], "chunk_tokens: 4096 is larger"),
    (["--engines", "0"], "num_engines: 0 is not valid"),
    (["--policy-param", "latency_centric.token_capacity=0", "--compare", "latency_centric"],
     "token_capacity"),
    (["--policy-param", "throughput_centric.token_capacity=1"], "not in --compare"),
    (["--policy-param", "least_queue.x=1"], "unknown parameter(s) ['x']"),
    (["--reference", "throughput_centric"], "--reference"),
    (["--workload", "nope"], "invalid choice: 'nope'"),
])
def test_argument_errors_are_clear(tmp_path, capsys, argv, message):
    base = ["--workload", "chain_summary", "--out", str(tmp_path / "x"), "--no-plots"]
    if "--workload" in argv:
        base = base[2:]
    with pytest.raises(SystemExit) as exc:
        main(base + argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x" / "results.json").exists()
