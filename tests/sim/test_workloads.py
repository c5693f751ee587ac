"""The paper's workloads on the simulated cluster: shapes, determinism, what each one measures."""

from __future__ import annotations

import random

import pytest

from parrot.sim.cluster import ClusterSpec, run_simulation
from parrot.sim.compare import CompareError, Variant, parse_variant, parse_variants
from parrot.sim.workloads.apps import documents
from parrot.sim.workloads.arrivals import poisson_offsets, uniform_offsets
from parrot.sim.workloads.copilot import query_lengths
from parrot.sim.workloads.gpts import system_prompt_lengths
from parrot.sim.workloads.registry import WORKLOADS
from parrot.sim.workloads.spec import WorkloadConfigError, WorkloadSpec

PROFILE = "h200_llama7b"  # a 16k window: copilot's and gpts' prompts fit
TINY = dict(doc_tokens=2048, chunk_tokens=512, output_tokens=8)


def run(name: str, mode: str = "parrot", policy: str = "app_centric", seed: int = 0,
        engine_params: dict | None = None, **spec: object):
    workload = WORKLOADS[name]
    cluster = ClusterSpec(policy=policy, num_engines=workload.num_engines, profile=PROFILE,
                          engine_params=engine_params or {})
    return run_simulation(cluster, workload, WorkloadSpec(**{**TINY, **spec, "seed": seed}),
                          mode=mode, seed=seed)


def fingerprint(result) -> list[tuple]:
    return [(r.app_id, r.started, r.finished,
             tuple((c.engine, c.dispatched, c.finished) for c in r.calls))
            for r in result.records]


def test_the_registry_is_the_list_of_workloads():
    assert sorted(WORKLOADS) == ["agent_loop", "chain_summary", "chain_summary_bg", "chat_batch",
                                 "concurrent_chains", "copilot", "gpts", "map_reduce", "mixed",
                                 "multi_agent", "tiny_apps"]
    for name, workload in WORKLOADS.items():
        assert workload.name == name
        WorkloadSpec(**workload.spec_defaults)  # the defaults are a valid spec
        assert parse_variants(workload.default_compare)


@pytest.mark.parametrize("name, spec", [
    ("concurrent_chains", dict(num_clients=3)),
    ("copilot", dict(num_clients=4, system_prompt_tokens=600)),
    ("gpts", dict(num_requests=6, request_rate=4.0, prompt_scale=0.1)),
    ("multi_agent", dict(num_clients=2, rounds=1)),
    ("mixed", dict(num_apps=1, chat_rate=2.0, max_chat_s=3.0,
                   chat_prompt_tokens=(16, 32), chat_output_tokens=(4, 8))),
    ("chat_batch", dict(num_apps=1, chat_rate=2.0, max_chat_s=3.0,
                        chat_prompt_tokens=(16, 32), chat_output_tokens=(4, 8))),
    ("tiny_apps", dict(num_requests=6, request_rate=4.0)),
    ("agent_loop", dict(num_clients=2, rounds=2, system_prompt_tokens=200)),
])
def test_each_new_workload_is_deterministic_per_seed(name, spec):
    first = run(name, **spec)
    assert first.records and all(r.error is None for r in first.records)
    assert fingerprint(run(name, **spec)) == fingerprint(first)
    assert fingerprint(run(name, seed=1, **spec)) != fingerprint(first)


def test_concurrent_chains_start_together_on_different_documents():
    result = run("concurrent_chains", policy="least_queue", num_clients=3)
    assert [r.app_id for r in result.records] == ["chain-0", "chain-1", "chain-2"]
    # they open their sessions together; each clock starts once its session is open
    assert len({round(r.arrived, 9) for r in result.records}) == 1
    assert all(0.2 <= r.session_open_s <= 0.3 for r in result.records)
    docs = documents(WorkloadSpec(**TINY, num_clients=3), 3)
    assert len({d[0] for d in docs}) == 3  # different documents
    assert [len(r.calls) for r in result.records] == [len(d) for d in docs]


def test_copilot_shares_the_system_prompt_only_in_parrot_mode():
    spec = dict(num_clients=8, system_prompt_tokens=2000, output_tokens=20)
    shared = run("copilot", policy="least_queue", **spec)
    static = run("copilot", policy="least_queue",
                 engine_params={"shared_prefix_decode": False}, **spec)
    unshared = run("copilot", mode="baseline", policy="least_queue", **spec)
    # KV: one copy of the prompt when shared (also with static sharing), eight without.
    assert shared.peak_kv_tokens == static.peak_kv_tokens
    assert unshared.peak_kv_tokens > 4 * shared.peak_kv_tokens
    # Decode reads the prefix once per step only with the shared-prefix kernel.
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    assert mean(shared.tpot_s) < mean(static.tpot_s) < mean(unshared.tpot_s) * 1.01
    assert max(r.latency_s for r in shared.records) < min(r.latency_s for r in unshared.records)


def test_query_lengths_are_clipped_lognormal():
    lengths = query_lengths(random.Random(0), 2000)
    assert min(lengths) >= 8 and max(lengths) <= 512
    assert 30 <= sorted(lengths)[1000] <= 50  # the median is ~40 tokens


def test_gpts_spreads_poisson_requests_over_four_prompts():
    assert system_prompt_lengths(1.0) == (7437, 1116, 1694, 2031)
    assert system_prompt_lengths(0.5) == (3718, 558, 847, 1016)
    result = run("gpts", num_requests=12, request_rate=2.0, prompt_scale=0.2)
    assert len(result.records) == 12
    assert {r.app_id.split("-")[0] for r in result.records} <= {"gpt0", "gpt1", "gpt2", "gpt3"}
    starts = [r.arrived for r in result.records]
    assert starts == sorted(starts) and starts[-1] > starts[0]
    assert len(result.engines) == 4  # the workload's own cluster size


def test_multi_agent_rounds_see_every_file():
    result = run("multi_agent", policy="least_queue", num_clients=3, rounds=2)
    (team,) = result.records
    assert len(team.calls) == 1 + 3 + 2 * 3 * 2
    calls = sorted(team.calls, key=lambda c: c.dispatched)
    architect, coders, review1 = calls[0], calls[1:4], calls[4:7]
    assert all(c.dispatched >= architect.finished for c in coders)
    # a reviewer reads every file: it starts only after the last coder
    assert min(c.dispatched for c in review1) >= max(c.finished for c in coders)


def test_shared_history_needs_less_kv_than_rendered_prompts():
    spec = dict(num_clients=4, rounds=1, output_tokens=64)
    shared = run("multi_agent", policy="least_queue", **spec)
    rendered = run("multi_agent", mode="baseline", policy="least_queue", **spec)
    assert shared.peak_kv_tokens < rendered.peak_kv_tokens


def test_background_chat_arrives_at_the_same_times_in_every_variant():
    spec = dict(chat_rate=2.0, max_chat_s=6.0, chat_prompt_tokens=(16, 64),
                chat_output_tokens=(4, 16))
    fast = run("chain_summary_bg", **spec)
    slow = run("chain_summary_bg", mode="baseline", policy="least_queue", **spec)
    chats = lambda r: [(c.app_id, round(c.arrived, 9)) for c in r.records if not c.is_main]  # noqa
    assert chats(fast) and chats(fast) == chats(slow)
    assert max(s for _, s in chats(fast)) < 6.0
    offsets = poisson_offsets(random.Random("chat|0"), 2.0, horizon_s=6.0)
    assert [s for _, s in chats(fast)] == pytest.approx(offsets)


def test_variant_items_carry_their_own_policy_and_engine_params():
    variant = parse_variant("app_centric+policy.prefix_affinity=false")
    assert variant == Variant("app_centric", "parrot", {"prefix_affinity": False}, {})
    assert variant.label == "app_centric:parrot+policy.prefix_affinity=false"
    other = parse_variant("least_queue:baseline+engine.shared_prefix_decode=false")
    assert other.mode == "baseline" and other.engine_params == {"shared_prefix_decode": False}
    with pytest.raises(CompareError, match=r"\+policy.KEY=VALUE"):
        parse_variant("app_centric+prefix_affinity=false")
    with pytest.raises(CompareError, match="listed twice"):
        parse_variants("a+policy.x=1,a:parrot+policy.x=1")


@pytest.mark.parametrize("field, value", [("num_clients", 0), ("request_rate", 0.0),
                                          ("prompt_scale", -1.0), ("rounds", True)])
def test_bad_spec_values_name_the_field(field, value):
    with pytest.raises(WorkloadConfigError, match=field):
        WorkloadSpec(**{field: value})


def test_mixed_jobs_and_chats_arrive_at_fixed_times_in_every_variant():
    spec = dict(num_apps=3, request_rate=1.0, chat_rate=2.0, max_chat_s=3.0,
                chat_prompt_tokens=(16, 32), chat_output_tokens=(4, 8))
    runs = [run("mixed", policy=p, **spec) for p in ("least_queue", "latency_centric")]
    starts = [[(r.app_id, round(r.arrived, 9)) for r in result.records] for result in runs]
    assert starts[0] == starts[1]
    jobs = [r for r in runs[0].records if r.is_main]
    assert [r.app_id for r in jobs] == ["mapreduce-0", "mapreduce-1", "mapreduce-2"]
    offsets = poisson_offsets(random.Random("jobs|0"), 1.0, count=3)
    assert [r.arrived for r in jobs] == pytest.approx(offsets)
    assert any(not r.is_main for r in runs[0].records)


def test_mixed_jobs_follow_a_trace_and_chats_a_fixed_interval():
    # The paper's artifact: jobs in bursts (here two of two, 0.5 s apart), one chat a second.
    spec = dict(job_offsets=(0.5, 1.0, 4.0, 4.5), num_apps=9, chat_rate=1.0, max_chat_s=3.0,
                chat_arrivals="uniform", chat_prompt_tokens=(16, 32), chat_output_tokens=(4, 8))
    result = run("mixed", **spec)
    jobs = [r for r in result.records if r.is_main]
    assert [r.app_id for r in jobs] == [f"mapreduce-{i}" for i in range(4)]  # not num_apps
    assert [r.arrived for r in jobs] == pytest.approx([0.5, 1.0, 4.0, 4.5])
    chats = sorted(r.arrived for r in result.records if not r.is_main)
    assert chats == pytest.approx([0.0, 1.0, 2.0])
    assert all(r.error is None for r in result.records)


def test_uniform_offsets_are_one_interval_apart_before_the_horizon():
    assert uniform_offsets(2.0, horizon_s=2.0) == [0.0, 0.5, 1.0, 1.5]
    assert uniform_offsets(1.0, horizon_s=2.5) == [0.0, 1.0, 2.0]
    assert uniform_offsets(0.0, horizon_s=10.0) == []


@pytest.mark.parametrize("offsets", [(1.0, 0.5), (-1.0,), (float("inf"),), (float("nan"),),
                                     ("1",), (True,)])
def test_job_offsets_must_be_seconds_in_arrival_order(offsets):
    with pytest.raises(WorkloadConfigError, match="job_offsets"):
        WorkloadSpec(job_offsets=offsets)


def test_job_offsets_become_a_tuple_of_floats_and_chat_arrivals_a_known_kind():
    assert WorkloadSpec(job_offsets=[1, 2.5]).job_offsets == (1.0, 2.5)
    with pytest.raises(WorkloadConfigError, match="chat_arrivals"):
        WorkloadSpec(chat_arrivals="bursty")


def test_documents_never_repeat_when_the_text_wraps_around():
    docs = documents(WorkloadSpec(doc_tokens=20_480, chunk_tokens=1024, num_apps=12))
    assert len({d[0] for d in docs}) == 12


@pytest.mark.parametrize("mode", ["parrot", "baseline"])
def test_an_applications_clock_starts_once_its_session_is_open(mode):
    # zero-latency engines and a fixed 0.2-s round trip: what is left is the round trips
    # after the open. Parrot: one, the batch submit that waits for the reduce's output (the
    # program awaits it at once); the request-level baseline: two, the map calls (in
    # parallel), then the reduce call, answered with its output.
    cluster = ClusterSpec(policy="least_queue", num_engines=1, profile=PROFILE,
                          engine_params={"zero_latency": True}, network_delay_s=(0.2, 0.2))
    result = run_simulation(cluster, WORKLOADS["map_reduce"], WorkloadSpec(**TINY), mode=mode,
                            seed=0)
    [app] = result.records
    assert app.session_open_s == pytest.approx(0.2)
    assert app.arrived == pytest.approx(0.0)
    assert app.latency_s == pytest.approx(0.2 if mode == "parrot" else 0.4)


# --- everyday serving shapes ------------------------------------------------------------------

def test_chat_batch_times_the_chats_and_fetches_the_batch_as_throughput():
    """The chats are the applications under test, each one latency call; the batch jobs are
    background, their summaries placed as throughput (declared when fetched together)."""
    result = run("chat_batch", num_apps=2, request_rate=2.0, chat_rate=2.0, max_chat_s=3.0,
                 chat_prompt_tokens=(16, 32), chat_output_tokens=(4, 8))
    chats = [r for r in result.records if r.kind == "chat"]
    jobs = [r for r in result.records if r.kind == "batch"]
    assert chats and all(r.is_main and len(r.calls) == 1 for r in chats)
    assert {c.criterion for r in chats for c in r.calls} == {"latency"}
    assert len(jobs) == 2 and not any(r.is_main for r in jobs)
    assert len({len(r.calls) for r in jobs}) == 1 and len(jobs[0].calls) >= 4  # its chunks
    assert {c.criterion for r in jobs for c in r.calls} == {"throughput"}


@pytest.mark.parametrize("mode", ["parrot", "baseline"])
def test_tiny_apps_are_one_or_two_calls_and_cost_one_round_trip_each_in_parrot_mode(mode):
    result = run("tiny_apps", mode=mode, num_requests=12, request_rate=4.0)
    sizes = [len(r.calls) for r in result.records]
    assert sorted(set(sizes)) == [1, 2] and len(sizes) == 12
    # per application, the messages with network delay: opening its session, then one
    # (parrot: the submit that brings the answer back) or one per call (baseline)
    expected = 12 * 2 if mode == "parrot" else sum(1 + n for n in sizes)
    assert result.network_messages == expected


def test_an_agent_loop_re_sends_its_history_which_the_engines_prefix_cache_reuses():
    """Each turn's prompt is the client's history so far (a literal): without the engine's
    prefix cache every turn prefills it again, with it only what is new."""
    spec = dict(num_clients=2, rounds=4, system_prompt_tokens=400)
    plain = run("agent_loop", **spec)
    cached = run("agent_loop", engine_params={"prefix_caching": True}, **spec)
    assert [len(r.calls) for r in plain.records] == [4, 4]
    prefilled = [sum(e["prefill_tokens"] for e in r.engines) for r in (plain, cached)]
    assert prefilled[1] < prefilled[0] / 2
    # the tool's second between turns is on the application's clock: 3 waits per agent
    assert all(r.latency_s > 3.0 for r in plain.records)


# --- output lengths: sampled and hidden by default, exact as the paper's setting -------------

def test_sampled_lengths_are_seeded_per_call_under_a_loose_cap():
    from parrot.sim.workloads.base import output_length

    spec = WorkloadSpec(seed=3)
    draws = [output_length(spec, 100, f"app|{i}") for i in range(2000)]
    assert draws[7] == output_length(spec, 100, "app|7")        # the same in every variant
    assert {d.sampling["max_tokens"] for d in draws} == {400}    # 4 x the mean
    assert all(d.sampling["ignore_eos"] is False for d in draws)
    assert all(1 <= d.num_tokens <= 400 and d.marker == f" [[eos@{d.num_tokens}]]"
               for d in draws)
    assert 95 <= sum(d.num_tokens for d in draws) / len(draws) <= 105
    assert len({d.num_tokens for d in draws}) > 100
    exact = output_length(WorkloadSpec(output_lengths="exact"), 100, "app|7")
    assert (exact.sampling, exact.num_tokens, exact.marker) == (
        {"max_tokens": 100, "ignore_eos": True}, 100, "")


@pytest.mark.parametrize("lengths", ["sampled", "exact"])
def test_the_engine_generates_the_hidden_lengths_and_the_service_sees_only_the_cap(lengths):
    """gpts with 6 requests: the engines generate exactly the tokens the workload drew (its
    records' output_tokens), which differ from max_tokens when sampled."""
    result = run("gpts", num_requests=6, request_rate=4.0, prompt_scale=0.1,
                 output_tokens=20, output_lengths=lengths)
    generated = sum(r.output_tokens for r in result.records)
    assert sum(e["generated_tokens"] for e in result.engines) == generated
    if lengths == "exact":
        assert generated == 6 * 20
    else:
        assert generated != 6 * 20 and all(r.output_tokens <= 80 for r in result.records)


@pytest.mark.parametrize("name, spec", [
    ("copilot", dict(num_clients=5, system_prompt_tokens=300, output_tokens=20)),
    ("map_reduce", dict(output_tokens=20)),
    ("multi_agent", dict(num_clients=2, rounds=1, output_tokens=20)),
])
@pytest.mark.parametrize("mode", ["parrot", "baseline"])
def test_every_call_of_these_workloads_stops_at_its_hidden_length(name, spec, mode):
    """copilot, map-reduce (the reduce too) and multi-agent draw each call's length and hide
    it under a loose cap: the engines generate exactly the drawn tokens (the records'
    output_tokens), not the calls' max_tokens; with exact lengths, every call's max_tokens."""
    def decoded(lengths: str) -> tuple[int, int, int]:
        result = run(name, mode=mode, output_lengths=lengths, **spec)
        calls = sum(len(r.calls) for r in result.records)
        return (sum(e["generated_tokens"] for e in result.engines),
                sum(r.output_tokens for r in result.records), calls)

    sampled, drawn, calls = decoded("sampled")
    assert sampled == drawn and drawn != calls * 20 and drawn <= calls * 80
    exact, declared, calls = decoded("exact")
    assert exact == declared == calls * 20


def test_the_reduce_stops_at_its_own_hidden_length():
    from parrot.sim.workloads.base import output_length

    spec = WorkloadSpec(**{**TINY, "output_tokens": 20})
    result = run("map_reduce", output_tokens=20)
    chunks = len(result.records[0].calls) - 1
    maps = sum(output_length(spec, 20, f"mapreduce-0|{i}").num_tokens for i in range(chunks))
    reduce = output_length(spec, 20, "mapreduce-0|reduce").num_tokens
    assert reduce != 20
    assert sum(e["generated_tokens"] for e in result.engines) == maps + reduce


def test_the_prefix_caching_baseline_reuses_the_shared_system_prompt():
    """copilot, request-level (`least_queue:baseline`): every request renders the same
    600-token system prompt. With the engine's automatic prefix caching
    (`+engine.prefix_caching=true`) the first request prefills it and the others fork its
    cached blocks: far fewer prompt tokens prefilled, and every request is faster."""
    spec = dict(num_clients=4, system_prompt_tokens=600, output_lengths="exact")
    plain = run("copilot", mode="baseline", policy="least_queue", **spec)
    cached = run("copilot", mode="baseline", policy="least_queue",
                 engine_params={"prefix_caching": True}, **spec)
    prefilled = [sum(e["prefill_tokens"] for e in r.engines) for r in (plain, cached)]
    assert prefilled[1] < prefilled[0] - 3 * 500
    assert parse_variant("least_queue:baseline+engine.prefix_caching=true").engine_params == {
        "prefix_caching": True}
    mean = [sum(r.latency_s for r in run_.records) / len(run_.records)
            for run_ in (plain, cached)]
    assert mean[1] < mean[0]
