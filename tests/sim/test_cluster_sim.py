"""The simulated cluster: deterministic runs, the workloads' shapes, the comparison figures."""

from __future__ import annotations

import math

import pytest

from parrot.sim.cluster import ClusterConfigError, ClusterSpec, run_simulation
from parrot.sim.compare import (CompareError, Settings, Variant, parse_variants, results_json,
                                run_variant)
from parrot.sim.summary import percentile
from parrot.sim.network import NetworkDelay
from parrot.sim.workloads.apps import chain_summary, documents, map_reduce
from parrot.sim.workloads.spec import WorkloadConfigError, WorkloadSpec

# exact lengths: the tests below count every output at its declared 10 tokens
TINY = WorkloadSpec(doc_tokens=2048, chunk_tokens=512, output_tokens=10, output_lengths="exact")
TINY_BG = WorkloadSpec(doc_tokens=2048, chunk_tokens=512, output_tokens=10, chat_rate=2.0,
                       chat_prompt_tokens=(32, 128), chat_output_tokens=(8, 32), seed=3)


def fingerprint(result) -> list[tuple]:
    return [(r.app_id, r.started, r.finished, r.output_tokens,
             tuple((c.engine, c.criterion, c.dispatched, c.finished) for c in r.calls))
            for r in result.records]


@pytest.mark.timeout(300)  # three full simulations: 60-70 s on 2 busy cores
def test_same_seed_same_numbers_and_another_seed_differs():
    spec = ClusterSpec(policy="app_centric", num_engines=2)
    first = run_simulation(spec, chain_summary, TINY_BG, mode="parrot", seed=3)
    again = run_simulation(spec, chain_summary, TINY_BG, mode="parrot", seed=3)
    assert fingerprint(first) == fingerprint(again)
    assert any(not r.is_main for r in first.records)  # background chat ran
    other_spec = WorkloadSpec(**{**TINY_BG.__dict__, "seed": 4})
    other = run_simulation(spec, chain_summary, other_spec, mode="parrot", seed=4)
    assert fingerprint(other) != fingerprint(first)


def test_chain_summary_runs_its_steps_one_after_another_on_the_virtual_clock():
    result = run_simulation(ClusterSpec(policy="least_queue"), chain_summary, TINY,
                            mode="parrot", seed=0)
    (app,) = result.records
    assert app.error is None and len(app.calls) >= 4
    assert app.output_tokens == 10 * len(app.calls)
    assert all(c.state == "done" for c in app.calls)
    for before, after in zip(app.calls, app.calls[1:]):
        assert after.dispatched >= before.finished  # each step needs the previous summary
    assert 0 < app.latency_s < 60 and result.wall_s < 5
    # the engine's work counters, as a live run records them
    (engine,) = result.engines
    # every output token decoded but each call's first: the step that prefilled the call's
    # prompt (sent in its Generate) sampled it
    assert engine["decode_tokens"] == app.output_tokens - len(app.calls)
    assert engine["generated_tokens"] == app.output_tokens
    assert engine["num_steps"] >= app.output_tokens and engine["prefill_tokens"] > 0
    assert 0 < engine["step_ms"] <= app.latency_s * 1000


def test_an_auto_latency_capacity_is_calibrated_to_the_engines_profile():
    """`parrot-bench --latency-capacity auto`: the paper's rule on each engine's profile."""
    for profile, tokens in (("a100_llama13b", 6144), ("h200_llama7b", 20480)):
        result = run_simulation(ClusterSpec(policy="app_centric", profile=profile,
                                            latency_capacity=None),
                                chain_summary, TINY, mode="parrot", seed=0)
        (engine,) = result.engines
        assert (engine["latency_capacity"], engine["profile_source"]) == (tokens, "configured")


def test_baseline_mode_pays_a_round_trip_per_step():
    spec = ClusterSpec(policy="least_queue")
    parrot_run = run_simulation(spec, chain_summary, TINY, mode="parrot", seed=0)
    baseline_run = run_simulation(spec, chain_summary, TINY, mode="baseline", seed=0)
    gap = baseline_run.records[0].latency_s - parrot_run.records[0].latency_s
    steps = len(baseline_run.records[0].calls)
    assert gap > (steps - 1) * 0.2  # at least one 200 ms message per dependent step
    assert baseline_run.network_messages > parrot_run.network_messages


def test_map_reduce_maps_form_a_throughput_group_and_batch_beyond_the_latency_cap():
    spec = WorkloadSpec(doc_tokens=8192, chunk_tokens=1024, output_tokens=20)
    parrot_run = run_simulation(ClusterSpec(policy="app_centric"), map_reduce, spec,
                                mode="parrot", seed=0)
    capped = run_simulation(ClusterSpec(policy="latency_centric",
                                        policy_params={"token_capacity": 4096}),
                            map_reduce, spec, mode="parrot", seed=0)
    (app,) = parrot_run.records
    maps = [c for c in app.calls if c.criterion == "throughput"]
    assert len(maps) == len(app.calls) - 1 >= 8
    assert capped.records[0].latency_s > app.latency_s


def test_network_delay_is_seeded_per_application():
    a, b = NetworkDelay(0.2, 0.3, "0|chain-0"), NetworkDelay(0.2, 0.3, "0|chain-0")
    draws = [a() for _ in range(5)]
    assert draws == [b() for _ in range(5)] and all(0.2 <= d <= 0.3 for d in draws)
    a.stop()
    assert a() == 0.0 and a.num_messages == 5


def test_documents_are_distinct_per_app_and_cover_the_requested_tokens():
    docs = documents(WorkloadSpec(doc_tokens=4096, chunk_tokens=1024, num_apps=3))
    assert len(docs) == 3 and all(len(d) in (4, 5) for d in docs)  # cuts at whitespace
    assert len({d[0] for d in docs}) == 3
    assert all("{{" not in chunk for d in docs for chunk in d)


def test_results_json_has_the_required_figures():
    settings = Settings("chain_summary", workload_spec=TINY)
    runs = [run_variant(settings, Variant("app_centric")),
            run_variant(settings, Variant("least_queue", "baseline"))]
    results = results_json(settings, runs, runs[-1].variant)
    entry = results["variants"]["app_centric:parrot"]
    assert set(entry["e2e_latency_s"]) == {"mean", "p50", "p99"}
    for key in ("normalized_latency_s_per_token", "throughput", "prefix_hit_rate", "engines",
                "queue_s_per_call", "apps"):
        assert key in entry
    assert results["speedup_vs_reference"]["least_queue:baseline"] == 1.0
    assert results["speedup_vs_reference"]["app_centric:parrot"] > 1.0


def test_results_report_each_engines_tpot_against_the_variants_target():
    settings = Settings("chain_summary", workload_spec=TINY,
                        cluster=ClusterSpec(num_engines=2),
                        policy_params={"app_centric": {"tpot_target_ms": 1000.0}})
    runs = [run_variant(settings, Variant("app_centric")),
            run_variant(settings, Variant("least_queue", "baseline"))]
    variants = results_json(settings, runs, runs[-1].variant)["variants"]
    ours = variants["app_centric:parrot"]["tpot_by_engine"]
    assert sorted(ours) == ["sim-0", "sim-1"]
    generates = sum(e["generates"] for e in ours.values())
    assert generates == sum(len(r.calls) for r in runs[0].records) > 0
    busy = [e for e in ours.values() if e["generates"]]
    assert all(e["target_ms"] == 1000.0 and e["within_target"] == 1.0 for e in busy)
    theirs = variants["least_queue:baseline"]["tpot_by_engine"]   # no target of its own
    assert all("target_ms" not in e for e in theirs.values())


def test_a_run_with_failed_applications_is_an_error_with_no_speedup():
    # Prompts of 512+ tokens on an engine that holds 256: every chain fails. The figures of
    # the applications that did not fail must not read as a speedup.
    small = Settings("chain_summary", workload_spec=TINY,
                     cluster=ClusterSpec(engine_params={"max_context_len": 256}))
    failing = run_variant(small, Variant("app_centric"))
    assert failing.status == "error"
    assert failing.error.startswith("1 application(s) failed; first:")
    assert "max_context_len" in failing.error
    fine = run_variant(Settings("chain_summary", workload_spec=TINY),
                       Variant("least_queue", "baseline"))
    results = results_json(small, [failing, fine], fine.variant)
    assert results["variants"]["app_centric:parrot"]["status"] == "error"
    assert results["speedup_vs_reference"] == {"app_centric:parrot": None,
                                               "least_queue:baseline": 1.0}
    # a failed reference leaves nothing to compare against
    results = results_json(small, [failing, fine], failing.variant)
    assert results["speedup_vs_reference"] == {"app_centric:parrot": None,
                                               "least_queue:baseline": None}


def test_parse_variants():
    assert parse_variants("app_centric,least_queue:baseline,pkg.mod:Cls:baseline,pkg.mod:Cls") \
        == [Variant("app_centric"), Variant("least_queue", "baseline"),
            Variant("pkg.mod:Cls", "baseline"), Variant("pkg.mod:Cls", "parrot")]
    with pytest.raises(CompareError, match="listed twice"):
        parse_variants("app_centric,app_centric:parrot")
    with pytest.raises(CompareError, match="empty item"):
        parse_variants("app_centric,,least_queue")


def test_bad_settings_name_the_value():
    with pytest.raises(ClusterConfigError, match="num_engines"):
        ClusterSpec(num_engines=0)
    with pytest.raises(WorkloadConfigError, match="chunk_tokens"):
        WorkloadSpec(doc_tokens=100, chunk_tokens=512)
    with pytest.raises(WorkloadConfigError, match="chat_rate"):
        WorkloadSpec(chat_rate=-1)


def test_percentile_matches_linear_interpolation():
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([5.0], 99) == 5.0
    assert math.isclose(percentile(list(map(float, range(101))), 99), 99.0)


def test_a_small_kv_cache_still_completes_with_prefix_eviction():
    # 8 steps of ~600 tokens overflow a 3200-token cache: finished calls' cached prefixes
    # must make room (the manager evicts LRU prefixes when its KV accounting overflows)
    # rather than leave requests waiting forever.
    spec = WorkloadSpec(doc_tokens=4096, chunk_tokens=512, output_tokens=10)
    for mode in ("baseline", "parrot"):
        run = run_variant(Settings("chain_summary", workload_spec=spec,
                                   cluster=ClusterSpec(engine_params={"num_blocks": 200})),
                          Variant("least_queue", mode))
        assert run.status == "ok" and run.records[0].error is None
