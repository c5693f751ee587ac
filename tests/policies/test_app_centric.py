"""Algorithm 1: task groups, prefix affinity, latency/throughput isolation, capacity."""

from __future__ import annotations

import pytest

from parrot.policies import PolicyConfigError, default_registry
from parrot.policies.app_centric import AppCentricParams, AppCentricPolicy
from parrot.speed_profile import SpeedProfile
from parrot.types import Criterion
from policy_factories import LAT, THR, by_call, make_call, make_engine


# The latency limit held even while latency calls wait (the tests of what the limit is).
CAPPED = {"admit_latency_backlog": False, "work_conserving": False}


def schedule(calls, engines, **params):
    # These tests pin the paper's latency rule (latency calls keep to the latency capacity
    # among themselves, the backlog may pass it); the work-conserving default has its own
    # tests in test_work_conserving.py.
    params.setdefault("work_conserving", False)
    return by_call(AppCentricPolicy(AppCentricParams(**params)).schedule(calls=calls,
                                                                         engines=engines))


# --- load-aware placement: spread when idle, pack when saturated, groups whole ------------

def map_group(n, *, tokens=1100, output=50, group="g"):
    return [make_call(f"m{i}", criterion=THR, group=group, group_size=n, tokens=tokens,
                      output=output, seq=i) for i in range(n)]


def test_task_group_spreads_over_idle_engines():
    # 8 maps of 1100 tokens: two per idle engine finish in ~2 s, all on one in ~4 s.
    engines = [make_engine(f"e{i}") for i in range(4)]
    placed = schedule(map_group(8), engines)
    assert sorted(placed.values()) == ["e0", "e0", "e1", "e1", "e2", "e2", "e3", "e3"]


def test_task_group_stays_whole_while_splitting_is_not_faster():
    # Two small members: splitting them saves almost nothing, so they stay together, on an
    # idle cluster and on a busy one alike.
    small = map_group(2, tokens=300)
    assert schedule(small, [make_engine("e0"), make_engine("e1")]) == {"m0": "e0", "m1": "e0"}
    busy = [make_engine("e0", tokens=16000, thr=4), make_engine("e1", tokens=16000, thr=4)]
    assert schedule(small, busy) == {"m0": "e0", "m1": "e0"}
    # With no slack for co-location, the split (a little faster) wins.
    assert schedule(small, busy, colocation_slack=0.0) == {"m0": "e0", "m1": "e1"}


def test_saturated_cluster_packs_groups_whole_onto_the_fullest_engine():
    # 8000 + 16000 tokens ready, 12768 + 8768 free: work waits for engines either way.
    engines = [make_engine("e0", tokens=20000, thr=3), make_engine("e1", tokens=24000, thr=3)]
    g = [make_call(f"g{i}", criterion=THR, group="g", group_size=4, tokens=2000, output=50)
         for i in range(4)]
    h = [make_call(f"h{i}", criterion=THR, group="h", group_size=4, tokens=4000, output=50)
         for i in range(4)]
    assert schedule(g + h, engines) == {"g0": "e1", "g1": "e1", "g2": "e1", "g3": "e1",
                                        "h0": "e0", "h1": "e0", "h2": "e0"}
    # The same group alone is not saturating: it goes where it finishes first (mostly e0).
    assert schedule(g, engines) != {"g0": "e1", "g1": "e1", "g2": "e1", "g3": "e1"}


def test_new_task_group_goes_whole_to_an_engine_with_room_for_it():
    # e0 (throughput, 30000/32768) has room for one 1000-token call but not for 4 of them.
    engines = [make_engine("e0", tokens=30000, thr=5), make_engine("e1")]
    group = [make_call(f"g{i}", criterion=THR, group="g", group_size=4, output=50)
             for i in range(4)]
    assert schedule(group, engines) == {f"g{i}": "e1" for i in range(4)}


def test_task_group_member_joins_its_group_while_not_slower():
    engines = [make_engine("e0", tokens=9000, thr=3),
               make_engine("e1", tokens=9500, thr=2, groups={"g"})]
    late = [make_call("late", criterion=THR, group="g", group_size=3, output=50)]
    assert schedule(late, engines) == {"late": "e1"}
    assert schedule([make_call("solo", criterion=THR, output=50)], engines) == {"solo": "e0"}
    # Much slower there (a full engine): the member runs elsewhere instead.
    engines = [make_engine("e0"), make_engine("e1", tokens=30000, thr=8, groups={"g"})]
    assert schedule(late, engines) == {"late": "e0"}
    assert schedule(late, engines, colocate_task_groups=False) == {"late": "e0"}


def test_full_group_engine_sends_member_elsewhere_instead_of_waiting():
    engines = [make_engine("e0", tokens=32000, thr=8, groups={"g"}), make_engine("e1")]
    calls = [make_call("g9", criterion=THR, group="g", group_size=9)]
    assert schedule(calls, engines) == {"g9": "e1"}


def test_engine_speed_and_profile_enter_the_cost():
    from parrot.speed_profile import SpeedProfile

    calls = [make_call("x", criterion=THR, tokens=1100, output=50)]
    loaded = dict(tokens=2000, thr=1)
    assert schedule(calls, [make_engine("e0", **loaded), make_engine("e1")]) == {"x": "e1"}
    fast = make_engine("e0", speed=4.0, **loaded)
    assert schedule(calls, [fast, make_engine("e1")]) == {"x": "e0"}
    slow_decode = SpeedProfile(0.15, ((0, 100.0), (65536, 400.0)))
    from dataclasses import replace

    assert schedule(calls, [make_engine("e0", **loaded),
                            replace(make_engine("e1"), profile=slow_decode)]) == {"x": "e0"}


# --- shared-prefix sets and prefix affinity ------------------------------------------------

def sys_call(call_id, *, shared="sys", tokens=3300):
    return make_call(call_id, tokens=tokens, output=50, prefixes=["sys", f"sys/{call_id}"],
                     prefix_tokens=[3000, 3250], shared=shared)


def test_queued_calls_sharing_a_prefix_are_placed_as_one_set():
    # Filling the 3000-token prefix once and forking it beats two engines each prefilling it.
    engines = [make_engine("e0", lat_cap=8192), make_engine("e1", lat_cap=8192)]
    calls = [sys_call("a"), make_call("other", tokens=500, output=50), sys_call("b")]
    assert schedule(calls, engines) == {"a": "e0", "b": "e0", "other": "e1"}
    # Without affinity they are independent calls and spread.
    assert schedule(calls, engines, prefix_affinity=False) == {
        "a": "e0", "other": "e1", "b": "e1"}


def test_shared_prefix_set_splits_past_the_load_gate():
    engines = [make_engine("e0", lat_cap=6144), make_engine("e1", lat_cap=6144)]
    # Six members: 3300 + 5 x 300 = 4800 tokens, under the gate (0.8 x 6144): one engine.
    six = [sys_call(c) for c in "abcdef"]
    assert set(schedule(six, engines).values()) == {"e0"}
    # Twelve do not fit under the gate: the set is split and every member still runs.
    twelve = [sys_call(c) for c in "abcdefghijkl"]
    placed = schedule(twelve, engines)
    assert len(placed) == 12 and set(placed.values()) == {"e0", "e1"}


def test_members_of_a_latency_set_past_the_limit_join_as_a_backlog_or_wait():
    """One engine, latency capacity 6,144: twelve calls forking a 3,000-token prefix with 300
    tokens each need 6,600; ten fit under the limit. The other two would wait a whole turn:
    as a latency backlog they join while the estimated mean completion drops
    ((12/11 + 1) x d(6,300) <= (12/10 + 1) x d(6,000) on DEFAULT_PROFILE, then again at 11);
    with the backlog off they wait (the limit holds)."""
    engine = [make_engine("e0", lat_cap=6144)]
    twelve = [sys_call(f"c{i}") for i in range(12)]
    assert len(schedule(twelve, engine)) == 12
    assert len(schedule(twelve, engine, **CAPPED)) == 10
    # throughput calls never pass their capacity: it is memory
    thr = [make_call(f"t{i}", criterion=THR, tokens=3300, output=50,
                     prefixes=["sys", f"sys/t{i}"], prefix_tokens=[3000, 3250], shared="sys")
           for i in range(12)]
    assert len(schedule(thr, [make_engine("e0", thr_cap=6144)])) == 10


def test_prefix_affinity_to_context_already_on_an_engine():
    # A cached context of the prefix saves the prefill of its 3000 tokens (not their load).
    engines = [make_engine("e0", tokens=500, lat=1, lat_cap=8192),
               make_engine("e1", tokens=1000, lat=1, lat_cap=8192, prefixes={"sys"})]
    calls = [sys_call("x", shared=None)]
    assert schedule(calls, engines) == {"x": "e1"}
    assert schedule(calls, engines, prefix_affinity=False) == {"x": "e0"}


def test_deepest_shared_prefix_wins():
    engines = [make_engine("e0", tokens=100, lat=1, lat_cap=8192, prefixes={"a"}),
               make_engine("e1", tokens=900, lat=1, lat_cap=8192, prefixes={"a", "a/b"})]
    x = make_call("x", tokens=2500, output=50, prefixes=["a", "a/b", "a/b/x"],
                  prefix_tokens=[1000, 2000, 2400])
    assert schedule([x], engines) == {"x": "e1"}
    y = make_call("y", tokens=2500, output=50, prefixes=["a", "a/c"], prefix_tokens=[1000, 2400])
    assert schedule([y], engines) == {"y": "e0"}


def test_affinity_is_gated_on_load():
    # A running call on e1 has 800 of the call's 950 prompt tokens, but 3200 + 200 > 0.8 x
    # 4096: past the gate e1 is costed as if it had to prefill them, and e0, less loaded
    # after taking the call (3000 vs 3400 tokens), finishes it first.
    engines = [make_engine("e0", tokens=2000, lat=1),
               make_engine("e1", tokens=3200, lat=1, running={"sys"})]
    calls = [make_call("x", tokens=1000, output=50, prefixes=["sys"], prefix_tokens=[800])]
    assert schedule(calls, engines) == {"x": "e0"}
    assert schedule(calls, engines, affinity_max_load_fraction=1.0) == {"x": "e1"}


def test_past_the_gate_a_shared_prefix_still_counts_once_for_room():
    # The gate decides where a call is cheapest, not whether it fits: e0 already counts the
    # 800-token prefix, so the call adds 200 tokens (3400 <= 4096) and runs now instead of
    # waiting for the running calls to finish. So does affinity off (the paper's ablation
    # turns off the preference for engines holding a prefix, not the engine's accounting).
    engines = [make_engine("e0", tokens=3200, lat=1, running={"sys"})]
    calls = [make_call("x", tokens=1000, output=50, prefixes=["sys"], prefix_tokens=[800])]
    assert schedule(calls, engines) == {"x": "e0"}
    assert schedule(calls, engines, prefix_affinity=False) == {"x": "e0"}
    # a call whose prefix nothing running holds still needs its whole size
    other = [make_call("y", tokens=1000, output=50, prefixes=["other"], prefix_tokens=[800])]
    assert schedule(other, engines, prefix_affinity=False, **CAPPED) == {}


def test_without_affinity_a_set_sharing_a_prefix_fits_as_the_engine_counts_it():
    # Ten 3,300-token calls forking one 3,000-token prefix weigh 3,000 + 10 x 300 = 6,000
    # tokens on an engine (its accounting counts the prefix once): under the 6,144 capacity.
    # Affinity off still spreads them by cost, but no longer refuses room they have.
    engines = [make_engine("e0", lat_cap=6144)]
    calls = [sys_call(c, shared=None) for c in "abcdefghij"]
    assert len(schedule(calls, engines, prefix_affinity=False)) == 10
    assert len(schedule(calls + [sys_call("k", shared=None)], engines,
                        prefix_affinity=False, **CAPPED)) == 10


def test_hot_prefix_spreads_and_capacity_is_respected():
    engines = [make_engine("e0"), make_engine("e1")]
    calls = [make_call(f"c{i}", output=50, prefixes=["hot"], prefix_tokens=[100], shared="hot")
             for i in range(10)]
    placed = schedule(calls, engines, **CAPPED)
    # 4096 latency capacity: at most four 1000-token calls (the prefix counted once: 4 x 900
    # + 100) per engine; the rest stay queued.
    assert list(placed.values()).count("e0") == 4 and list(placed.values()).count("e1") == 4


def test_cached_prefix_saves_prefill_but_a_running_one_also_saves_load():
    # 3300 tokens, 3000 of them the prefix: where only cached, the call still adds 3300.
    call = [make_call("x", tokens=3300, output=50, prefixes=["sys"], prefix_tokens=[3000])]
    cached = [make_engine("e0", tokens=1000, lat=1), make_engine("e1", prefixes={"sys"})]
    assert schedule(call, cached) == {"x": "e1"}
    full = [make_engine("e0", tokens=3500, lat=1, prefixes={"sys"}), make_engine("e1")]
    assert schedule(call, full) == {"x": "e1"}                     # 3500 + 3300 > 4096
    shared = [make_engine("e0", tokens=3500, lat=1, running={"sys"}), make_engine("e1")]
    assert schedule(call, shared, affinity_max_load_fraction=1.0) == {"x": "e0"}  # + 300


def test_affinity_does_not_cross_criteria():
    # The prefix lives on a throughput engine; the latency call goes to the idle engine.
    engines = [make_engine("e0", tokens=1000, thr=1, prefixes={"sys"}), make_engine("e1")]
    x = make_call("x", output=50, prefixes=["sys"], prefix_tokens=[500])
    assert schedule([x], engines) == {"x": "e1"}


# --- latency / throughput ----------------------------------------------------------------

def isolation_cluster(latency_load=2000):
    return [make_engine("thr", tokens=1000, thr=1), make_engine("idle"),
            make_engine("lat", tokens=latency_load, lat=1)]


def test_latency_call_spreads_to_an_idle_engine():
    assert schedule([make_call("x", criterion=LAT)], isolation_cluster()) == {"x": "idle"}


def test_equal_cost_prefers_the_engine_serving_the_same_criterion():
    engines = [make_engine("idle"), make_engine("lat", lat=1)]   # a running call of 0 tokens
    assert schedule([make_call("x", criterion=LAT)], engines) == {"x": "lat"}


def test_throughput_call_avoids_engine_serving_latency_calls():
    # "thr" is a little slower (1200 vs 500 tokens) but serves no latency call.
    x = [make_call("x", criterion=THR, output=50)]
    engines = [make_engine("lat", tokens=500, lat=1), make_engine("thr", tokens=1200, thr=1)]
    assert schedule(x, engines) == {"x": "thr"}
    assert schedule(x, engines, isolate_criteria=False) == {"x": "lat"}
    # Much slower (3000 tokens): the call joins the latency engine, under its latency cap.
    engines = [make_engine("lat", tokens=500, lat=1), make_engine("thr", tokens=3000, thr=1)]
    assert schedule(x, engines) == {"x": "lat"}


def test_latency_call_avoids_throughput_engine_while_another_fits():
    assert schedule([make_call("x", criterion=LAT)], isolation_cluster(4000)) == {"x": "idle"}


def test_latency_call_uses_throughput_engine_when_nothing_else_fits():
    engines = [make_engine("thr", tokens=1000, thr=1), make_engine("lat", tokens=4000, lat=1)]
    assert schedule([make_call("x", criterion=LAT)], engines) == {"x": "thr"}


def test_isolation_can_be_switched_off():
    engines = [make_engine("thr", tokens=1000, thr=1), make_engine("lat", tokens=2000, lat=1)]
    assert schedule([make_call("x", criterion=LAT)], engines, isolate_criteria=False) == {
        "x": "thr"}


def test_engine_serving_latency_calls_is_held_to_latency_capacity():
    engines = [make_engine("lat", tokens=2000, lat=1),
               make_engine("thr", tokens=12000, thr=1)]
    assert schedule([make_call("small", criterion=THR, tokens=2000)], engines) == {
        "small": "lat"}
    # 3000 more would take "lat" past its latency capacity (4096): the slower "thr" instead
    # (526 ms there against 487 on "lat": 8% later, within isolation_slack).
    assert schedule([make_call("big", criterion=THR, tokens=3000)], engines) == {"big": "thr"}
    # Where "thr" would be much slower (24000 tokens: 589 ms, 21% later), isolation gives way.
    engines[1] = make_engine("thr", tokens=24000, thr=1)
    assert schedule([make_call("big", criterion=THR, tokens=3000)], engines) == {"big": "lat"}


def test_throughput_work_joins_latency_engines_when_latency_free_engines_are_full():
    # "thr" (the only engine free of latency calls) has room for 2768 tokens; the ready
    # throughput work needs 3000. Holding it to the latency capacity on "lat" would only queue
    # it while "lat" has room, so it fills "lat" up to the throughput capacity.
    engines = [make_engine("lat", tokens=2000, lat=1),
               make_engine("thr", tokens=30000, thr=1)]
    assert schedule([make_call("big", criterion=THR, tokens=3000)], engines) == {"big": "lat"}
    # The ready work counts, not each call alone: 3 x 1400 tokens do not fit "thr" (one call
    # would), so all three run, "lat" past its latency capacity (2000 + 2 x 1400 > 4096).
    trio = [make_call(f"t{i}", criterion=THR, tokens=1400, seq=i) for i in range(3)]
    assert sorted(schedule(trio, engines).values()) == ["lat", "lat", "thr"]
    # A latency call keeps to the latency capacity among latency calls: past it on "lat", it
    # runs beside the throughput work on "thr" rather than wait for room.
    assert schedule([make_call("chat", criterion=LAT, tokens=3000)], engines, **CAPPED) == {
        "chat": "thr"}
    # Latency calls of its own there count: with 2000 latency tokens on "thr" too, it waits.
    engines[1] = make_engine("thr", tokens=30000, thr=1, lat=1, thr_tokens=28000)
    assert schedule([make_call("chat", criterion=LAT, tokens=3000)], engines, **CAPPED) == {}


def test_prompt_tokens_queued_on_an_engine_delay_a_call_placed_there():
    # Equal loads, but e0 must still prefill 8000 prompt tokens placed in earlier rounds
    # (1.2 s at 0.15 ms a token): the call finishes first on e1.
    engines = [make_engine("e0", tokens=2000, lat=1, queued_prefill=8000),
               make_engine("e1", tokens=2000, lat=1)]
    assert schedule([make_call("x", criterion=LAT)], engines) == {"x": "e1"}
    engines[0] = make_engine("e0", tokens=2000, lat=1)
    assert schedule([make_call("x", criterion=LAT)], engines) == {"x": "e0"}


def test_isolation_holds_while_confining_throughput_work_costs_little():
    # 12 maps of 1100 tokens; latency engines carry 1000 tokens under a capacity of 4096.
    maps = map_group(12, tokens=1100, output=50)

    def loads(engines, **params):
        placed = list(schedule(maps, engines, **params).values())
        return {e.engine_id: e.num_tokens_in_use + 1100 * placed.count(e.engine_id)
                for e in engines}

    # Three of four engines are free of latency calls: confining the maps to them costs
    # ~8%, so the latency engine is held to its capacity.
    mostly_free = [make_engine("lat", tokens=1000, lat=1)] + [make_engine(f"free{i}")
                                                              for i in range(3)]
    assert loads(mostly_free)["lat"] <= 4096
    # One of four: confined, the maps would finish over twice as late as spread, so the
    # latency engines take maps past their capacity...
    mostly_latency = [make_engine(f"lat{i}", tokens=1000, lat=1) for i in range(3)] + [
        make_engine("free")]
    spread = loads(mostly_latency)
    assert max(spread[f"lat{i}"] for i in range(3)) > 4096
    # ... unless isolation may cost that much (`isolation_slack`).
    held = loads(mostly_latency, isolation_slack=10.0)
    assert max(held[f"lat{i}"] for i in range(3)) <= 4096
    # A round that does not isolate ranks by cost alone: the maps spread evenly, none of
    # them sent to the latency-free engine only because it is free of latency calls.
    placed = list(schedule(maps, mostly_latency).values())
    assert sorted(placed.count(e.engine_id) for e in mostly_latency) == [3, 3, 3, 3]


def test_when_every_engine_serves_latency_throughput_fills_to_throughput_capacity():
    # No engine is free of latency calls: isolation is impossible, and holding throughput
    # work to the latency cap would only starve it behind the latency stream.
    engines = [make_engine("lat", tokens=2000, lat=1)]
    assert schedule([make_call("big", criterion=THR, tokens=3000)], engines) == {"big": "lat"}
    # Latency calls still keep to the latency capacity.
    assert schedule([make_call("chat", criterion=LAT, tokens=3000)], engines, **CAPPED) == {}


def test_a_call_that_fits_nowhere_is_not_overtaken_by_later_smaller_calls():
    engines = [make_engine("e0", tokens=3000, lat=1)]
    calls = [make_call("big", tokens=2000, seq=0), make_call("small", tokens=500, seq=1)]
    assert schedule(calls, engines, **CAPPED) == {}
    # With a second engine, the small call runs there; "big" keeps its place on e0.
    engines.append(make_engine("e1", tokens=3000, lat=1))
    assert schedule(calls, engines, **CAPPED) == {"small": "e1"}


def test_calls_go_where_they_finish_first_while_not_saturated():
    lat_engines = [make_engine("e0", tokens=2000, lat=1), make_engine("e1", tokens=1000, lat=1)]
    assert schedule([make_call("x", criterion=LAT)], lat_engines) == {"x": "e1"}
    thr_engines = [make_engine("e0", tokens=10000, thr=1),
                   make_engine("e1", tokens=20000, thr=1)]
    assert schedule([make_call("x", criterion=THR)], thr_engines) == {"x": "e0"}


def test_throughput_fills_up_to_throughput_capacity():
    engines = [make_engine("e0", thr_cap=10000)]
    calls = [make_call(f"c{i}", criterion=THR, tokens=3000) for i in range(4)]
    assert schedule(calls, engines) == {"c0": "e0", "c1": "e0", "c2": "e0"}


def test_no_criterion_is_latency_by_default_and_configurable():
    engines = [make_engine("thr", tokens=1000, thr=1), make_engine("lat", tokens=1000, lat=1)]
    call = make_call("x", criterion=None)
    assert schedule([call], engines) == {"x": "lat"}
    assert schedule([call], engines, default_criterion=Criterion.THROUGHPUT) == {"x": "thr"}


# --- a latency backlog ----------------------------------------------------------------------

def full_latency_engine(**kwargs):
    """Four latency calls at the 4,096-token limit (4,000 tokens)."""
    return make_engine("e0", tokens=4000, lat=4, **kwargs)


def backlog(n):
    return [make_call(f"c{i}", criterion=LAT, tokens=1000, output=50, seq=i) for i in range(n)]


def test_waiting_latency_calls_join_while_the_mean_completion_drops():
    """Four 1,000-token calls wait behind four running at the limit: 8 calls in all. Run 4 at
    a time they take ~(8/4 + 1)/2 turns of d(4,000) (DEFAULT_PROFILE 33.7 ms); a 5th, 6th
    and 7th concurrent call each lower that estimate ((8/5 + 1) x 36.6 ms = 95.3 < 101.2;
    then 92.3, 92.0), an 8th would raise it (2 x 46.3 = 92.7): three join, one waits."""
    assert schedule(backlog(4), [full_latency_engine()]) == {f"c{i}": "e0" for i in range(3)}
    assert schedule(backlog(4), [full_latency_engine()], **CAPPED) == {}


def test_a_step_that_grows_in_proportion_to_the_load_admits_no_backlog():
    """Batching only pays where the step has a part that does not grow with the batch (the
    weights read once per step): with a step proportional to the load, five at a time take
    (5/5 + 1) x 5,000 > (5/4 + 1) x 4,000 units."""
    proportional = SpeedProfile(0.0, ((0, 0.0), (65536, 655.36)))
    assert schedule(backlog(1), [full_latency_engine(profile=proportional)]) == {}


def test_a_backlog_never_joins_throughput_work_nor_passes_the_throughput_capacity():
    mixed = make_engine("e0", tokens=4000, lat=3, thr=1)
    assert schedule(backlog(4), [mixed]) == {}
    assert schedule(backlog(4), [full_latency_engine(thr_cap=5500)]) == {"c0": "e0"}


def test_a_call_behind_running_chains_joins_rather_than_wait_for_a_chain_to_end():
    """Every running latency call here has its application's next call waiting on it, and
    those applications were submitted first: their next calls take each freed slot, so a
    later application's call held by the mean test would wait until a whole chain ended
    (measured: 25 concurrent chains, the last two ran after the other 23 and finished at
    0.99x the request-level time). It joins, within memory and isolation as before; the
    mean test still decides for a call submitted before them (it gets the next slot)."""
    chained = full_latency_engine(chained_seq=10)
    assert schedule(backlog(4), [chained]) == {f"c{i}": "e0" for i in range(3)}
    later = [make_call(f"c{i}", criterion=LAT, tokens=1000, output=50, seq=20 + i,
                       chained=True) for i in range(4)]
    assert schedule(later, [chained]) == {f"c{i}": "e0" for i in range(4)}
    assert schedule(later, [full_latency_engine()]) == {f"c{i}": "e0" for i in range(3)}
    assert schedule(later, [full_latency_engine(chained_seq=10, kv_free=2500)]) == {
        "c0": "e0", "c1": "e0"}
    assert schedule(later, [chained], **CAPPED) == {}
    proportional = SpeedProfile(0.0, ((0, 0.0), (65536, 655.36)))
    assert schedule(later[:1], [full_latency_engine(chained_seq=10, profile=proportional)]) \
        == {"c0": "e0"}


def test_a_chain_step_joins_running_chains_whatever_its_submission():
    """A chain step submitted before the running ones (its application came first) would
    get the next freed slot, so the mean test alone would hold it a turn; but its wait delays
    every later step of its application, which that one-call estimate does not count
    (measured on the paper's A100 profile, 25 chains: 0.99x -> 1.00x the request-level
    baseline). It joins an engine of chain steps like a later one; an earlier call that no
    call of its application waits on still faces the mean test."""
    chained = full_latency_engine(chained_seq=10)
    earlier_steps = [make_call(f"c{i}", criterion=LAT, tokens=1000, output=50, seq=i,
                               chained=True) for i in range(4)]
    assert schedule(earlier_steps, [chained]) == {f"c{i}": "e0" for i in range(4)}
    assert schedule(backlog(4), [chained]) == {f"c{i}": "e0" for i in range(3)}
    # not past the engine's free KV, nor onto an engine whose latency calls are not all
    # chain steps
    assert schedule(earlier_steps, [full_latency_engine(chained_seq=10, kv_free=2500)]) == {
        "c0": "e0", "c1": "e0"}
    assert schedule(earlier_steps, [full_latency_engine()]) == {f"c{i}": "e0"
                                                                 for i in range(3)}


def test_a_call_placed_this_round_without_a_waiting_consumer_frees_its_slot_in_a_turn():
    """An unchained latency call placed past the limit this round ends within a turn: the
    calls after it are held by the mean test again."""
    chained = full_latency_engine(chained_seq=10)
    calls = [make_call("a", criterion=LAT, tokens=1000, output=50, seq=20)] + [
        make_call(f"c{i}", criterion=LAT, tokens=1000, output=50, seq=21 + i, chained=True)
        for i in range(3)]
    # "a" joins (behind chains); then the engine holds a call that ends within a turn: the
    # others face the mean test with 5 running and 3 waiting
    assert schedule(calls, [chained]) == {"a": "e0", "c0": "e0", "c1": "e0"}
    # all chained: every one joins
    calls[0] = make_call("a", criterion=LAT, tokens=1000, output=50, seq=20, chained=True)
    assert schedule(calls, [chained]) == {"a": "e0", "c0": "e0", "c1": "e0", "c2": "e0"}


def test_a_backlog_takes_only_free_kv_never_evicting_cached_contexts():
    """Past the latency limit a waiting call may only use KV that neither running calls nor
    contexts filled ahead for waiting calls hold: evicting one (the chunk of a chain's next
    call) would make that call fill it again."""
    assert schedule(backlog(4), [full_latency_engine(kv_free=2500)]) == {"c0": "e0",
                                                                          "c1": "e0"}
    assert schedule(backlog(4), [full_latency_engine(kv_free=900)]) == {}


# --- starvation, health, order -----------------------------------------------------------

def test_idle_engine_accepts_one_oversized_call():
    engines = [make_engine("e0")]
    calls = [make_call("huge", tokens=50000), make_call("huge2", tokens=50000)]
    assert schedule(calls, engines) == {"huge": "e0"}
    assert schedule(calls, [make_engine("e0", tokens=10, lat=1)]) == {}


def test_unhealthy_engines_are_skipped():
    engines = [make_engine("e0", healthy=False), make_engine("e1", tokens=3000, lat=1)]
    assert schedule([make_call("x")], engines) == {"x": "e1"}
    assert schedule([make_call("x")], [make_engine("e0", healthy=False)]) == {}


def test_calls_are_placed_in_the_given_order():
    engines = [make_engine("e0", lat_cap=1000)]
    calls = [make_call("first", tokens=1000), make_call("second", tokens=1000)]
    placements = AppCentricPolicy(AppCentricParams(**CAPPED)).schedule(calls=calls,
                                                                       engines=engines)
    assert [p.call_id for p in placements] == ["first"]


def test_no_engines_no_placements():
    assert schedule([make_call("x")], []) == {}


# --- parameters --------------------------------------------------------------------------

@pytest.mark.parametrize("params, message", [
    ({"affinity_max_load_fraction": 0}, "affinity_max_load_fraction: 0.0 is out of range; "
                                        "allowed: number > 0.0 and <= 1.0"),
    ({"affinity_max_load_fraction": 1.5}, "1.5 is out of range"),
    ({"affinity_max_load_fraction": "high"}, "'high' is not a valid float"),
    ({"default_criterion": "fast"}, "'fast' is not one of ['latency', 'throughput']"),
    ({"isolate_criteria": "yes"}, "'yes' is not a valid bool"),
    ({"admit_latency_backlog": "no"}, "'no' is not a valid bool"),
    ({"isolation_slack": -0.5}, "isolation_slack: -0.5 is out of range"),
    ({"capacity": 4096}, "unknown parameter(s) ['capacity']; allowed: ['admit_latency_backlog"),
])
def test_params_errors_name_the_bad_value(params, message):
    with pytest.raises(PolicyConfigError) as info:
        default_registry().create("app_centric", params)
    assert message in str(info.value)


def test_params_from_yaml_mapping():
    policy = default_registry().create("app_centric", {
        "default_criterion": "throughput", "affinity_max_load_fraction": 1,
        "isolate_criteria": False})
    assert policy.params == AppCentricParams(default_criterion=Criterion.THROUGHPUT,
                                             affinity_max_load_fraction=1.0,
                                             isolate_criteria=False)


def test_params_validated_on_direct_construction():
    with pytest.raises(PolicyConfigError, match="allowed: number > 0.0 and <= 1.0"):
        AppCentricParams(affinity_max_load_fraction=-0.5)
    with pytest.raises(PolicyConfigError, match="'latency' is not one of"):
        AppCentricParams(default_criterion="latency")  # type: ignore[arg-type]


# --- a prompt longer than the latency capacity ----------------------------------------------

def long_prompt_fork(call_id: str, seq: int):
    """A request of an app whose 7,400-token system prompt ('sys') exceeds the latency
    capacity: 200 tokens of its own beyond it."""
    return make_call(call_id, tokens=7600, prefixes=("sys",), prefix_tokens=(7400,), seq=seq,
                     output=100)


def test_forks_of_a_prompt_longer_than_the_capacity_batch_on_its_engine():
    """The capacity (6,144) would hold a 7,600-token call to a step it cannot have even alone;
    the engine takes forks until a step is 1.1 x that call's solo step, instead of running
    the app one request at a time (each fork adds only its 200 tokens)."""
    busy = make_engine("e0", tokens=7600, lat=1, lat_cap=6144, running=("sys",),
                       latency_floor=7600)
    calls = [long_prompt_fork(f"c{i}", i) for i in range(4)]
    capped = AppCentricPolicy(AppCentricParams(**CAPPED))
    assert by_call(capped.schedule(calls=calls, engines=[busy])) == {
        f"c{i}": "e0" for i in range(4)}
    # 1.1 x the solo step of 7,600 tokens (DEFAULT_PROFILE: 45.0 ms) is reached at 8,825
    # tokens: six forks of 200 more fit, the seventh waits
    many = [long_prompt_fork(f"c{i}", i) for i in range(12)]
    placed = capped.schedule(calls=many, engines=[busy])
    assert len(placed) == 6
    # 0 turns it off: the capacity alone, so no fork joins
    off = AppCentricPolicy(AppCentricParams(latency_step_slack=0.0, **CAPPED))
    assert off.schedule(calls=calls, engines=[busy]) == []


def test_a_small_latency_call_keeps_the_capacity():
    """A 1,000-token latency call on the engine steps within the capacity: a long fork may
    not slow it past that."""
    small = make_engine("e0", tokens=8400, lat=2, lat_cap=6144, running=("sys",),
                        latency_floor=1000)
    capped = AppCentricPolicy(AppCentricParams(**CAPPED))
    assert capped.schedule(calls=[long_prompt_fork("c0", 0)], engines=[small]) == []
