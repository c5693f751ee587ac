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
    (["--chunk-tokens", "4096", "--doc-tokens", "1024"],
     "chunk_tokens: 4096 is not valid; allowed: at most doc_tokens (1024)"),
    (["--engines", "0"], "num_engines: 0 is out of range; allowed: integer >= 1 and <= 1024"),
    (["--policy-param", "latency_centric.token_capacity=0", "--compare", "latency_centric"],
     "token_capacity"),
    (["--policy-param", "throughput_centric.token_capacity=1"], "not in --compare"),
    (["--policy-param", "least_queue.x=1"], "unknown parameter(s) ['x']"),
    (["--reference", "throughput_centric"], "--reference"),
    (["--workload", "nope"], "invalid choice: 'nope'"),
    (["--engine-param", "shared_prefix_decode"], "--engine-param: 'shared_prefix_decode'"),
    (["--engine-param", "bogus=1"], "unknown key(s) ['bogus']"),
    (["--compare", "app_centric+affinity=0"], "+policy.KEY=VALUE"),
    (["--clients", "0"], "num_clients: 0 is out of range; allowed: integer >= 1"),
    (["--mode", "live", "--engine-param", "x=1"], "--engine-param: simulation only"),
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


def test_progress_redraws_only_on_a_terminal(capsys):
    from parrot.cli.bench import Progress

    for animate in (False, True):
        progress = Progress(1, 2, quiet=False, animate=animate)
        progress.begin(1, "app_centric:parrot")
        progress.end("ok")
        err = capsys.readouterr().err
        assert ("\r" in err) is animate
        assert err.count("[1/1] app_centric:parrot") == (2 if animate else 1)


def test_new_workload_runs_with_its_own_defaults(tmp_path, capsys):
    out = tmp_path / "copilot"
    code = main(["--workload", "copilot", "--profile", "h200_llama7b", "--clients", "4",
                 "--system-prompt-tokens", "500", "--output-tokens", "8", "--no-plots",
                 "--quiet", "--out", str(out)])
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    assert results["reference"] == "least_queue:baseline"
    assert list(results["variants"]) == [
        "app_centric:parrot", "least_queue:parrot",
        "least_queue:parrot+engine.shared_prefix_decode=false", "least_queue:baseline"]
    static = results["variants"]["least_queue:parrot+engine.shared_prefix_decode=false"]
    assert static["engine_params"] == {"shared_prefix_decode": False}
    assert static["num_apps"] == 4 and static["peak_kv_tokens"] > 0
    assert results["settings"]["workload"]["num_clients"] == 4
    assert results["settings"]["workload"]["output_tokens"] == 8


def test_live_variants_may_carry_engine_params_the_simulator_does_not_know(tmp_path):
    from parrot.cli.bench import build_parser, parse_settings

    parser = build_parser()
    args = parser.parse_args(["--workload", "copilot", "--mode", "live", "--out",
                              str(tmp_path), "--compare",
                              "least_queue+engine.shared_prefix_min_group=1000000"])
    _, (variant,), _ = parse_settings(parser, args)
    assert variant.engine_params == {"shared_prefix_min_group": 1000000}


def test_mixed_takes_a_job_trace_and_uniform_chats_from_the_command_line(tmp_path):
    from parrot.cli.bench import build_parser, parse_settings

    parser = build_parser()
    args = parser.parse_args(["--workload", "mixed", "--out", str(tmp_path),
                              "--job-offsets", "15,15.5,16", "--chat-arrivals", "uniform"])
    settings, _, _ = parse_settings(parser, args)
    assert settings.workload_spec.job_offsets == (15.0, 15.5, 16.0)
    assert settings.workload_spec.chat_arrivals == "uniform"
    for bad in ("15,x", ""):
        with pytest.raises(SystemExit):
            parser.parse_args(["--workload", "mixed", "--out", str(tmp_path),
                               "--job-offsets", bad])
