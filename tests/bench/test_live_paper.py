"""The live paper runner end to end on real engine processes (simulated engines, so it runs
in seconds): one process group per engine count and parameter set, warm-up, one results.json
and a table; experiments pick the config with the engines they need."""

from __future__ import annotations

import dataclasses
import json

import pytest

from parrot.serve_config import EngineSpec, ServeConfig
from parrot.engines.counters import COUNTER_NAMES
from bench.paper.live_experiments import (EXTRA_EXPERIMENTS, LIVE_EXPERIMENTS,
                                         LiveExperiment, LiveExperimentError,
                                         select_experiments, with_output_lengths,
                                         with_policy_params, with_rate_search, with_variants)
from bench.paper.live_runs import ServeSetup, run_live_paper, warmup_spec
from parrot.sim.workloads.gpts import system_prompt_lengths
from parrot.sim.workloads.spec import WorkloadSpec

FAST = {"profile": "h200_llama7b", "max_context_len": 4096}
TINY = {"doc_tokens": 1024, "chunk_tokens": 512, "output_tokens": 4}


def _setup(path: str, *names: str) -> ServeSetup:
    return ServeSetup(path, ServeConfig(engines=tuple(
        EngineSpec(name=n, kind="simulated", latency_capacity=6144, params=FAST)
        for n in names)))


ONE = _setup("one.yaml", "e0")
TWO = _setup("two.yaml", "a0", "b0")


async def test_live_paper_runs_each_group_on_its_own_engine_process(tmp_path):
    experiments = (
        LiveExperiment("chain", "chain_summary", "app_centric,least_queue:baseline",
                       "least_queue:baseline", TINY, TINY),
        LiveExperiment("static", "copilot", "least_queue", "least_queue",
                       {"num_clients": 2, "system_prompt_tokens": 200, "output_tokens": 4},
                       {}, {"shared_prefix_decode": False}),
    )
    lines: list[str] = []
    summary = await run_live_paper([ONE], tmp_path, smoke=False, budget_s=300,
                                   delay_s=(0.0, 0.0), experiments=experiments,
                                   log=lines.append)
    chain = summary["experiments"]["chain"]
    assert chain["mode"] == "live" and chain["reference"] == "least_queue:baseline"
    assert {v["status"] for v in chain["variants"].values()} == {"ok"}
    counters = chain["variants"]["app_centric:parrot"]["engine_counters"]
    assert set(counters) == {"e0"} and set(counters["e0"]) == set(COUNTER_NAMES)
    # the run's own pauses: a warm engine compiles nothing; the log line says so per engine
    assert counters["e0"]["jit_compiles_at_runtime"] == 0 and counters["e0"]["gc_ms"] >= 0
    # TPOT live comes from the engine: the mean over the run's Generates of 2+ tokens
    ours = chain["variants"]["app_centric:parrot"]
    assert counters["e0"]["tpot_generates"] > 0
    assert ours["engine_tpot_s"] == pytest.approx(
        counters["e0"]["tpot_us_sum"] / counters["e0"]["tpot_generates"] / 1e6)
    assert "tpot ms" in (tmp_path / "table.txt").read_text()
    assert any("e0: " in line and "0 Triton compilations while serving (0 ms)" in line
               for line in lines)
    # each run's wall-clock span (a step trace's records of that run lie inside it), in order
    ours, ref = (chain["variants"][v]["wall_window"]
                 for v in ("app_centric:parrot", "least_queue:baseline"))
    assert ours[0] < ours[1] <= ref[0] < ref[1]
    static = summary["experiments"]["static"]["variants"]["least_queue:parrot"]
    assert static["status"] == "ok" and static["num_apps"] == 2
    assert sum("engine(s) up" in line for line in lines) == 2  # two engine processes
    saved = json.loads((tmp_path / "results.json").read_text())
    assert set(saved["experiments"]) == {"chain", "static"}
    assert "chain" in (tmp_path / "table.txt").read_text()


async def test_policy_params_reach_every_variant_of_their_policy(tmp_path):
    """--policy-param POLICY.KEY=VALUE: every variant of POLICY runs with it (a bad value is
    that variant's error, the others run), the labels stay, the results record it."""
    base = LiveExperiment("chain", "chain_summary", "app_centric,least_queue:baseline",
                          "least_queue:baseline", TINY, TINY)
    (bad,) = with_policy_params((base,), ["app_centric.default_criterion=sometimes"])
    summary = await run_live_paper([ONE], tmp_path, smoke=False, budget_s=300,
                                   delay_s=(0.0, 0.0), experiments=(bad,),
                                   log=lambda *_: None)
    chain = summary["experiments"]["chain"]
    assert chain["variants"]["least_queue:baseline"]["status"] == "ok"
    assert chain["variants"]["app_centric:parrot"]["status"] == "error"
    assert "default_criterion" in chain["variants"]["app_centric:parrot"]["error"]
    # on top of the paper's setting every live experiment keeps (work_conserving off)
    assert chain["settings"]["policy_params"] == {
        "app_centric": {"work_conserving": False, "default_criterion": "sometimes"}}
    # the engines are the serve config's (each variant lists them), not a simulated cluster
    assert chain["settings"]["cluster"] is None and chain["settings"]["serve_config"]
    assert with_policy_params((base,), []) == (base,)
    for item in ("capacity=1", "latency_centric.token_capacity", ".x=1", "p.=1"):
        with pytest.raises(LiveExperimentError, match="--policy-param"):
            with_policy_params((base,), [item])


async def test_each_experiment_runs_on_the_config_with_its_engine_count(tmp_path):
    gpts = LiveExperiment("gpts", "gpts", "least_queue,least_queue:baseline",
                          "least_queue:baseline",
                          {}, {"prompt_scale": 0.05, "request_rate": 50.0, "num_requests": 6,
                               "output_tokens": 4}, engines=2)
    chain = LiveExperiment("chain", "chain_summary", "app_centric", "app_centric", TINY, TINY)
    lines: list[str] = []
    summary = await run_live_paper([TWO, ONE], tmp_path, smoke=True, budget_s=300,
                                   delay_s=(0.0, 0.0), experiments=(gpts, chain),
                                   log=lines.append)
    two = summary["experiments"]["gpts"]
    assert two["num_engines"] == 2 and two["settings"]["serve_config"] == "two.yaml"
    for variant in two["variants"].values():
        assert variant["status"] == "ok" and variant["num_apps"] == 6
        assert [e["name"] for e in variant["engines"]] == ["a0", "b0"]
    one = summary["experiments"]["chain"]
    assert one["num_engines"] == 1 and one["settings"]["serve_config"] == "one.yaml"
    assert [e["name"] for e in one["variants"]["app_centric:parrot"]["engines"]] == ["e0"]
    assert [line.split(" (")[0] for line in lines if "up (" in line] == [
        "2 engine(s) up", "1 engine(s) up"]
    table = (tmp_path / "table.txt").read_text()
    assert "ms/tok" in table and "gpts" in table


async def test_a_missing_engine_count_fails_before_any_engine_starts(tmp_path):
    mixed = LiveExperiment("mixed", "mixed", "app_centric", "app_centric", {}, {}, engines=2)
    with pytest.raises(LiveExperimentError, match="mixed needs a config with 2 engine"):
        await run_live_paper([ONE], tmp_path, smoke=True, budget_s=300, delay_s=(0.0, 0.0),
                             experiments=(mixed,), log=lambda line: None)
    assert not (tmp_path / "results.json").exists()
    with pytest.raises(LiveExperimentError, match="both have 1 engines"):
        await run_live_paper([ONE, _setup("other.yaml", "x")], tmp_path, smoke=True,
                             budget_s=300, delay_s=(0.0, 0.0), experiments=(mixed,))


async def test_a_spent_budget_skips_the_remaining_experiments(tmp_path):
    experiment = LiveExperiment("chain", "chain_summary", "app_centric", "app_centric",
                                TINY, TINY)
    summary = await run_live_paper([ONE], tmp_path, smoke=True, budget_s=0.0,
                                   delay_s=(0.0, 0.0), experiments=(experiment,),
                                   log=lambda line: None)
    assert summary["experiments"]["chain"] == {"skipped": "time budget"}


async def test_a_rate_search_finds_each_variants_rate_on_live_engines(tmp_path):
    from bench.paper.live_experiments import RateSearchSpec

    search = LiveExperiment(
        "gpts_rate", "gpts", "least_queue,least_queue:baseline", "least_queue:baseline",
        {"prompt_scale": 0.05, "output_tokens": 4}, {}, engines=2,
        rate_search=RateSearchSpec(target_s_per_token=10.0, window_s=0.5, start=4.0,
                                   max_rate=8.0, refinements=1))
    lines: list[str] = []
    saved_midway: list[dict] = []

    def log(line: str) -> None:
        # the second variant's first rate: the first variant's search is already saved
        if line.startswith("gpts_rate least_queue:baseline") and not saved_midway:
            saved_midway.append(json.loads((tmp_path / "results.json").read_text()))
        lines.append(line)

    summary = await run_live_paper([TWO], tmp_path, smoke=False, budget_s=300,
                                   delay_s=(0.0, 0.0), experiments=(search,), log=log)
    (midway,) = saved_midway
    assert midway["partial"] and set(midway["experiments"]["gpts_rate"]["variants"]) == {
        "least_queue:parrot"}
    assert midway["experiments"]["gpts_rate"]["variants"]["least_queue:parrot"][
        "ratio_vs_reference"] is None     # the reference has not run yet
    result = summary["experiments"]["gpts_rate"]
    assert result["reference"] == "least_queue:baseline" and result["rate_search"]["start"] == 4
    for label in ("least_queue:parrot", "least_queue:baseline"):
        entry = result["variants"][label]
        # a generous target: both rates hold, the search stops at max_rate (capped)
        assert [p["rate"] for p in entry["points"]] == [4.0, 8.0]
        assert entry["sustainable_rate"] == 8.0 and entry["capped"]
    assert result["variants"]["least_queue:baseline"]["ratio_vs_reference"] == 1.0
    assert sum("req/s ->" in line for line in lines) == 4
    assert "gpts_rate" in (tmp_path / "table.txt").read_text()


async def test_a_rate_search_stops_at_the_budget_and_keeps_the_finished_variants(tmp_path,
                                                                                 monkeypatch):
    from types import SimpleNamespace

    from bench.paper import live_runs as live_paper
    from bench.paper.live_experiments import RateSearchSpec

    search = LiveExperiment(
        "gpts_rate", "gpts", "least_queue,least_queue:baseline,app_centric",
        "least_queue:baseline", {"prompt_scale": 0.05, "output_tokens": 4}, {}, engines=2,
        rate_search=RateSearchSpec(target_s_per_token=10.0, window_s=0.5, start=4.0,
                                   max_rate=8.0, refinements=1))
    real, late = live_paper.time.perf_counter, [0.0]
    monkeypatch.setattr(live_paper, "time",
                        SimpleNamespace(perf_counter=lambda: real() + late[0]))

    def log(line: str) -> None:
        if line.startswith("gpts_rate least_queue:baseline: 4 req/s"):
            late[0] = 1e6   # the budget is spent during the reference's search

    summary = await run_live_paper([TWO], tmp_path, smoke=False, budget_s=300,
                                   delay_s=(0.0, 0.0), experiments=(search,), log=log)
    variants = summary["experiments"]["gpts_rate"]["variants"]
    assert variants["least_queue:parrot"]["sustainable_rate"] == 8.0   # finished before
    for point in variants["least_queue:parrot"]["points"]:   # what the engines did there
        assert set(point["engine_counters"]) == {"a0", "b0"}
        assert sum(c["num_steps"] for c in point["engine_counters"].values()) > 0
    assert variants["least_queue:parrot"]["ratio_vs_reference"] is None
    assert variants["least_queue:baseline"]["skipped"] == "time budget"
    assert [p["rate"] for p in variants["least_queue:baseline"]["points"]] == [4.0]
    assert variants["app_centric:parrot"] == {"skipped": "time budget"}
    table = (tmp_path / "table.txt").read_text()
    assert "least_queue:baseline" in table and "skipped" in table


def test_the_rate_search_is_run_only_when_named():
    assert "gpts_rate" not in {e.key for e in select_experiments(None)}
    (chosen,) = select_experiments("gpts_rate")
    assert chosen.rate_search is not None and chosen.engines == 2
    assert "request_rate" not in chosen.spec        # set per rate tried


def test_a_shorter_rate_search_changes_only_what_is_given():
    chosen = select_experiments("gpts_rate,mixed")
    short = with_rate_search(chosen, window_s=8.0, start=4.0, refinements=None)
    assert short[0].rate_search == dataclasses.replace(chosen[0].rate_search, window_s=8.0,
                                                       start=4.0)
    higher = with_rate_search(chosen, max_rate=512.0)[0].rate_search
    assert higher == dataclasses.replace(chosen[0].rate_search, max_rate=512.0)
    assert chosen[0].rate_search.max_rate == 256.0     # the simulated search's cap
    assert short[1] == chosen[1]                       # no rate search: unchanged
    assert with_rate_search(chosen) == chosen
    with pytest.raises(LiveExperimentError, match="gpts_rate"):
        with_rate_search(select_experiments("mixed"), window_s=8.0)
    with pytest.raises(LiveExperimentError, match="window_s"):
        with_rate_search(chosen, window_s=0.0)


def test_only_selects_experiments_in_the_order_given():
    chosen = select_experiments("mixed,gpts")
    assert [e.key for e in chosen] == ["mixed", "gpts"]
    assert {e.engines for e in chosen} == {2}
    assert select_experiments(None) == LIVE_EXPERIMENTS
    for bad in ("gpts,nope", "", "gpts,gpts"):
        with pytest.raises(LiveExperimentError, match="--only"):
            select_experiments(bad)
    with pytest.raises(LiveExperimentError, match="engines=0"):
        LiveExperiment("x", "gpts", "app_centric", "app_centric", {}, {}, engines=0)


def test_variants_replace_one_experiments_runs_in_the_order_given():
    gpts = select_experiments("gpts")
    (chosen,) = with_variants(gpts, "app_centric+policy.prefix_affinity=false,"
                                    "least_queue:baseline,app_centric")
    assert chosen.compare.split(",")[0] == "app_centric+policy.prefix_affinity=false"
    assert chosen.reference == gpts[0].reference and chosen.spec == gpts[0].spec
    with pytest.raises(LiveExperimentError, match="reference"):
        with_variants(gpts, "app_centric,least_queue")
    with pytest.raises(LiveExperimentError, match="exactly one"):
        with_variants(select_experiments("gpts,mixed"), "app_centric,least_queue:baseline")
    with pytest.raises(LiveExperimentError, match="--variants"):
        with_variants(gpts, "app_centric,,least_queue:baseline")


def test_lengths_are_exact_by_default_and_sampled_when_asked():
    chosen = select_experiments("map_reduce,chain_summary")
    assert {e.workload_spec(smoke=False).output_lengths for e in chosen} == {"exact"}
    sampled = with_output_lengths(chosen, "sampled")
    for before, after in zip(chosen, sampled):
        spec = after.workload_spec(smoke=False)
        assert spec.output_lengths == "sampled"
        assert dataclasses.replace(spec, output_lengths="exact") == \
            before.workload_spec(smoke=False)           # nothing else changes
    with pytest.raises(LiveExperimentError, match="--lengths"):
        with_output_lengths(chosen, "oracle")


def test_the_two_engine_experiments_are_the_papers_multi_engine_ones():
    by_key = {e.key: e for e in LIVE_EXPERIMENTS}
    assert {k for k, e in by_key.items() if e.engines == 2} == {"gpts", "mixed"}
    assert by_key["gpts"].reference == "least_queue:baseline"
    assert "app_centric+policy.prefix_affinity=false" in by_key["gpts"].compare
    assert by_key["mixed"].compare == "app_centric,throughput_centric,latency_centric"


def test_warmup_keeps_the_shapes_and_cuts_the_time():
    spec = LIVE_EXPERIMENTS[-1].workload_spec(smoke=False)   # mixed
    warm = warmup_spec(spec)
    assert (warm.doc_tokens, warm.chunk_tokens, warm.chat_prompt_tokens) == (
        spec.doc_tokens, spec.chunk_tokens, spec.chat_prompt_tokens)
    assert warm.num_apps == 1 and warm.max_chat_s == 5.0 and warm.chat_output_tokens == (8, 8)
    # Poisson arrivals: the run's rate for WARMUP_ARRIVALS_S (20 s), so the batches and group
    # counts of a steady stream are met before timing; at least 8 requests, at most the run's
    gpts = warmup_spec(WorkloadSpec(num_requests=640, request_rate=16.0))
    assert gpts.num_requests == 320 and gpts.request_rate == 16.0
    assert warmup_spec(WorkloadSpec(num_requests=320, request_rate=0.2)).num_requests == 8
    assert warmup_spec(WorkloadSpec(num_requests=20, request_rate=16.0)).num_requests == 20
    assert warmup_spec(WorkloadSpec(num_requests=320, request_rate=16.0),   # a rate search
                       arrivals_s=0).num_requests == 8
    # Parrot mode: the run's output lengths, so shared-prefix steps meet their graph buckets
    full = warmup_spec(spec, full_outputs=True)
    assert (full.output_tokens, full.chat_output_tokens) == (spec.output_tokens,
                                                              spec.chat_output_tokens)
    assert full.num_apps == 1 and full.max_chat_s == 5.0 and warm.output_tokens == 8 < (
        spec.output_tokens)
    # a job trace (mixed_artifact: nine jobs from 15 s on) warms with one job at once
    trace = next(e for e in EXTRA_EXPERIMENTS if e.key == "mixed_artifact")
    spec = trace.workload_spec(smoke=False)
    assert len(spec.job_offsets) == 9 and spec.chat_arrivals == "uniform"
    assert warmup_spec(spec).job_offsets == (0.0,)
    assert warmup_spec(WorkloadSpec()).job_offsets == ()


def test_the_gpu_runs_fit_the_random_llama_window():
    for e in LIVE_EXPERIMENTS:
        spec = e.workload_spec(smoke=False)
        if e.workload == "copilot":
            # SmolLM2 counts ~1.01 tokens per estimated token on this text (3,400 -> 3,437);
            # + the template's ~30 tokens + the longest query (512) + the answer.
            need = e.spec["system_prompt_tokens"] * 1.02 + 30 + 512 + e.spec["output_tokens"]
            assert need <= 4096
        if e.workload == "gpts":   # the longest of the four system prompts, scaled
            need = max(system_prompt_lengths(spec.prompt_scale)) * 1.02 + 30 + 512
            assert need + spec.output_tokens <= 4096
        if e.workload == "mixed":  # a chunk, or the reduce over every map's summary
            assert spec.chunk_tokens + 100 + spec.output_tokens <= 4096
            assert spec.num_chunks * (spec.output_tokens + 10) + 100 <= 4096
            assert max(spec.chat_prompt_tokens) + max(spec.chat_output_tokens) <= 4096


def test_smoke_sizes_differ_from_gpu_sizes():
    for e in LIVE_EXPERIMENTS:
        assert dataclasses.asdict(e.workload_spec(True)) != dataclasses.asdict(
            e.workload_spec(False)), e.key


async def test_results_are_saved_after_each_experiment(tmp_path):
    first = LiveExperiment("first", "chain_summary", "app_centric", "app_centric", TINY, TINY)
    second = dataclasses.replace(first, key="second")
    seen: list[dict] = []

    def log(line: str) -> None:   # the second experiment's run has just finished
        if line.startswith("second "):
            seen.append(json.loads((tmp_path / "results.json").read_text()))

    await run_live_paper([ONE], tmp_path, smoke=True, budget_s=300, delay_s=(0.0, 0.0),
                         experiments=(first, second), log=log)
    assert seen[0]["partial"] is True and set(seen[0]["experiments"]) == {"first"}
    final = json.loads((tmp_path / "results.json").read_text())
    assert "partial" not in final and set(final["experiments"]) == {"first", "second"}


def test_capacity_overrides_set_every_engine_and_say_so():
    from bench.paper.live_runs import with_engine_capacity

    setup = with_engine_capacity(TWO, "latency_capacity", 20480)
    assert [e.latency_capacity for e in setup.config.engines] == [20480, 20480]
    assert [e.latency_capacity for e in TWO.config.engines] == [6144, 6144]   # untouched
    assert setup.path == "two.yaml (latency_capacity=20480)"
    both = with_engine_capacity(setup, "throughput_capacity", 119808)
    assert [(e.latency_capacity, e.throughput_capacity) for e in both.config.engines] == [
        (20480, 119808)] * 2
    assert both.path == "two.yaml (latency_capacity=20480) (throughput_capacity=119808)"
    auto = with_engine_capacity(TWO, "latency_capacity", "auto")
    assert [e.latency_capacity for e in auto.config.engines] == [None, None]
    assert auto.path == "two.yaml (latency_capacity=auto)"
    for field, flag in (("latency_capacity", "--latency-capacity"),
                        ("throughput_capacity", "--throughput-capacity")):
        for bad in (0, -5, 2.5, True, "fast"):
            with pytest.raises(LiveExperimentError, match=flag):
                with_engine_capacity(TWO, field, bad)


def test_engine_params_set_every_engine_and_say_so():
    from bench.paper.live_runs import with_engine_params

    setup = with_engine_params(TWO, ["prefill_attention=paged", "max_num_seqs=32"])
    for engine, before in zip(setup.config.engines, TWO.config.engines):
        assert engine.params == {**before.params, "prefill_attention": "paged",
                                 "max_num_seqs": 32}
        assert "prefill_attention" not in before.params               # untouched
    assert setup.path == "two.yaml (prefill_attention=paged max_num_seqs=32)"
    assert with_engine_params(TWO, []) is TWO
    for bad in ("prefill_attention", "=paged"):
        with pytest.raises(LiveExperimentError, match="--engine-param"):
            with_engine_params(TWO, [bad])


async def test_the_warm_up_generates_full_outputs_in_parrot_mode_only(tmp_path, monkeypatch):
    """Shared-prefix graph buckets are met only as outputs grow, so the Parrot-mode warm-up
    runs the experiment's output lengths; the baseline's (paged buckets, captured at
    start-up) stays short. One app either way."""
    from bench.paper import live_runs as live_paper

    seen: list[tuple[str, int, int]] = []
    real_run = live_paper.run_variant

    async def spy(config, experiment, variant, spec, delay_s, **kwargs):
        seen.append((variant.mode, spec.output_tokens, spec.num_apps))
        return await real_run(config, experiment, variant, spec, delay_s, **kwargs)

    monkeypatch.setattr(live_paper, "run_variant", spy)
    chain = LiveExperiment("chain", "chain_summary", "app_centric,least_queue:baseline",
                           "least_queue:baseline", {**TINY, "output_tokens": 12,
                                                    "num_apps": 2}, TINY)
    await run_live_paper([ONE], tmp_path, smoke=False, budget_s=300, delay_s=(0.0, 0.0),
                         experiments=(chain,), log=lambda *_: None)
    assert seen[:2] == [("parrot", 12, 1), ("baseline", 8, 1)]       # the warm-up pass
    assert seen[2:] == [("parrot", 12, 2), ("baseline", 12, 2)]      # the timed runs


def test_every_parrot_variant_warms_and_one_request_level_variant():
    """Shared-prefix buckets depend on each policy's placement; request-level runs meet only
    the buckets captured at start-up."""
    from bench.paper.live_runs import warmup_variants

    gpts = {e.key: e for e in LIVE_EXPERIMENTS}["gpts"]
    assert [v.label for v in warmup_variants(gpts.compare)] == [
        "app_centric:parrot", "least_queue:parrot",
        "app_centric:parrot+policy.prefix_affinity=false", "least_queue:baseline"]
    assert [v.label for v in warmup_variants(
        "app_centric,throughput_centric:baseline,latency_centric:baseline")] == [
        "app_centric:parrot", "throughput_centric:baseline"]


def test_the_engines_tpot_is_the_mean_over_every_engines_generates():
    from bench.paper.live_report import engine_tpot_s

    window = {"a": {"tpot_generates": 3, "tpot_us_sum": 30_000},
              "b": {"tpot_generates": 1, "tpot_us_sum": 50_000}}
    assert engine_tpot_s(window) == pytest.approx(0.020)          # (30 + 50) ms / 4
    assert engine_tpot_s({"a": {"tpot_generates": 0, "tpot_us_sum": 0}}) is None
    assert engine_tpot_s({"a": {"num_steps": 5}}) is None          # an engine that does not count


async def test_results_record_each_engines_reported_profile_and_its_capacity():
    """results.json's engine_profiles: what `latency_capacity: auto` made of each engine."""
    from types import SimpleNamespace

    from parrot.engines.protocol import EngineInfo
    from bench.paper.live_runs import engine_profiles
    from parrot.speed_profile import SpeedProfile

    class Reporting:
        def __init__(self, profile):
            self.profile = profile

        async def info(self):
            return EngineInfo("e", "builtin", "m", 4096, 16, 6250, speed_profile=self.profile)

    h200 = SpeedProfile(0.022, ((0, 3.95), (33616, 9.0)))
    engines = [SimpleNamespace(name="a", engine=Reporting(h200)),
               SimpleNamespace(name="b", engine=Reporting(None))]
    profiles = await engine_profiles(engines)
    assert profiles == {"a": {"prefill_per_token_ms": 0.022,
                              "decode_table": [[0, 3.95], [33616, 9.0]],
                              # 40/22 x 3.95 ms at 21,529 tokens, rounded down to 1024
                              "calibrated_latency_capacity": 21504},
                        "b": None}


def test_the_table_names_the_gpu_the_engines_ran_on(monkeypatch):
    from bench import provenance
    from bench.paper import live_runs
    from bench.paper.live_report import live_table
    summary = {"wall_s": 1.0, "smoke": False, "experiments": {}}
    assert live_table({**summary, "device": "NVIDIA H100 80GB HBM3"}).startswith(
        "live paper runs (NVIDIA H100 80GB HBM3; 1s wall)")
    assert live_table(summary).startswith("live paper runs (H200; ")   # results before it
    monkeypatch.setattr(provenance.shutil, "which", lambda name: None)
    assert live_runs.device_name() == "no GPU"


async def test_a_prefix_cache_that_cannot_be_reset_is_said(caplog):
    from types import SimpleNamespace

    from bench.paper.live_report import reset_prefix_caches

    resets = []

    class Engine:
        def __init__(self, name, fails):
            self.name, self.fails = name, fails

        async def reset_prefix_cache(self):
            if self.fails:
                raise ConnectionError("refused")
            resets.append(self.name)
            return 0

    engines = [SimpleNamespace(name=n, engine=Engine(n, n == "b")) for n in ("a", "b", "c")]
    with caplog.at_level("WARNING", logger="bench.paper.live_report"):
        await reset_prefix_caches(engines)
    assert resets == ["a", "c"]
    assert [r.getMessage() for r in caplog.records] == [
        "engine b: its prefix cache could not be reset (refused); the next run may reuse "
        "what the one before it computed"]


def _live_main(monkeypatch, tmp_path, *argv: str) -> dict:
    """live.py's main with these options, stopped where the runs would start: what it hands
    to them."""
    import sys

    from bench.paper import live

    seen: dict = {}

    def fake_run(setups, out, **kwargs):  # noqa: ANN001, ANN003
        seen.update(setups=setups, **kwargs)
        return 0

    monkeypatch.setattr(live, "run", fake_run)
    monkeypatch.setattr(sys, "argv", ["live.py", "--out", str(tmp_path),
                                      "--only", "chain_summary", *argv])
    assert live.main() == 0
    return seen


def test_the_fair_setting_calibrates_every_side_and_options_beside_it_win(monkeypatch, tmp_path):
    paper = _live_main(monkeypatch, tmp_path)
    (experiment,) = paper["experiments"]
    assert experiment.policy_params == {"app_centric": {"work_conserving": False}}
    assert experiment.workload_spec(smoke=False).output_lengths == "exact"
    (engine,) = paper["setups"][0].config.engines
    assert engine.params["prefix_caching"] is False   # the config says so outright

    fair = _live_main(monkeypatch, tmp_path, "--setting", "fair")
    (experiment,) = fair["experiments"]
    assert experiment.policy_params == {"app_centric": {"work_conserving": True},
                                        "latency_centric": {"token_capacity": "auto"}}
    assert experiment.workload_spec(smoke=False).output_lengths == "sampled"
    (engine,) = fair["setups"][0].config.engines
    assert engine.params["prefix_caching"] is True
    assert "latency_capacity=auto" in fair["setups"][0].path   # whatever the config says

    mixed = _live_main(monkeypatch, tmp_path, "--setting", "fair", "--lengths", "exact",
                       "--policy-param", "app_centric.work_conserving=false",
                       "--engine-param", "prefix_caching=false", "--latency-capacity", "20480")
    (experiment,) = mixed["experiments"]
    assert experiment.policy_params["app_centric"] == {"work_conserving": False}
    assert experiment.workload_spec(smoke=False).output_lengths == "exact"
    (engine,) = mixed["setups"][0].config.engines
    assert engine.params["prefix_caching"] is False and engine.latency_capacity == 20480
