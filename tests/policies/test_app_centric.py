"""Algorithm 1: task groups, prefix affinity, latency/throughput isolation, capacity."""

from __future__ import annotations

import pytest

from parrot.policies import PolicyConfigError, default_registry
from parrot.policies.app_centric import AppCentricParams, AppCentricPolicy
from parrot.types import Criterion
from policy_factories import LAT, THR, by_call, make_call, make_engine


def schedule(calls, engines, **params):
    return by_call(AppCentricPolicy(AppCentricParams(**params)).schedule(calls=calls,
                                                                         engines=engines))


# --- task groups -------------------------------------------------------------------------

def test_task_group_lands_together_on_one_engine():
    calls = [make_call(f"c{i}", criterion=THR, group="g", group_size=4) for i in range(4)]
    engines = [make_engine("e0"), make_engine("e1"), make_engine("e2")]
    assert schedule(calls, engines) == {"c0": "e0", "c1": "e0", "c2": "e0", "c3": "e0"}


def test_task_group_member_goes_to_engine_already_holding_its_group():
    # e1 holds group g and is fuller; packing alone would also say e1, so make e0 fuller
    # and in throughput mode: only the group decides for e1.
    engines = [make_engine("e0", tokens=9000, thr=3),
               make_engine("e1", tokens=2000, thr=2, groups={"g"})]
    calls = [make_call("late", criterion=THR, group="g", group_size=3)]
    assert schedule(calls, engines) == {"late": "e1"}
    assert schedule([make_call("solo", criterion=THR)], engines) == {"solo": "e0"}


def test_new_task_group_needs_room_for_the_whole_group():
    # e0 (throughput, 30000/32768) has room for one 1000-token call but not for 4 of them.
    engines = [make_engine("e0", tokens=30000, thr=5), make_engine("e1")]
    group = [make_call(f"g{i}", criterion=THR, group="g", group_size=4) for i in range(4)]
    assert schedule(group, engines) == {f"g{i}": "e1" for i in range(4)}
    assert schedule([make_call("solo", criterion=THR)], engines) == {"solo": "e0"}


def test_task_group_room_is_measured_with_the_calls_criterion():
    # 3 x 1500 tokens fit e0 under throughput capacity but not under latency capacity.
    engines = [make_engine("e0", tokens=500, thr=1), make_engine("e1", tokens=500, lat=1)]
    group = [make_call(f"g{i}", criterion=THR, group="g", group_size=3, tokens=1500)
             for i in range(3)]
    assert schedule(group, engines) == {"g0": "e0", "g1": "e0", "g2": "e0"}
    # With no criterion a member counts as LATENCY (the default), like in the manager's views:
    # no engine has latency room for the whole group, so members are placed one by one: two
    # on the latency engine, the third on the throughput engine as the only one left with room.
    untyped = [make_call(f"u{i}", criterion=None, group="u", group_size=3, tokens=1500)
               for i in range(3)]
    assert schedule(untyped, engines) == {"u0": "e1", "u1": "e1", "u2": "e0"}


def test_full_group_engine_sends_member_elsewhere_instead_of_waiting():
    engines = [make_engine("e0", tokens=32000, thr=8, groups={"g"}), make_engine("e1")]
    calls = [make_call("g9", criterion=THR, group="g", group_size=9)]
    assert schedule(calls, engines) == {"g9": "e1"}


def test_group_colocation_can_be_switched_off():
    engines = [make_engine("e0", tokens=1000, thr=1, groups={"g"}),
               make_engine("e1", tokens=5000, thr=1)]
    calls = [make_call("g1", criterion=THR, group="g", group_size=2)]
    assert schedule(calls, engines) == {"g1": "e0"}
    # Without co-location the member is an ordinary throughput call: it packs onto e1.
    assert schedule(calls, engines, colocate_task_groups=False) == {"g1": "e1"}


# --- prefix affinity ---------------------------------------------------------------------

def test_prefix_affinity_to_calls_queued_in_this_round():
    engines = [make_engine("e0", tokens=100, lat=1), make_engine("e1", tokens=100, lat=1)]
    calls = [make_call("a", prefixes=["sys", "sys/a"]),
             make_call("b", prefixes=["sys", "sys/b"]),
             make_call("c", prefixes=["other"])]
    # Without affinity b would go to the less-loaded e1; it follows a's shared "sys" instead.
    assert schedule(calls, engines) == {"a": "e0", "b": "e0", "c": "e1"}
    assert schedule(calls, engines, prefix_affinity=False) == {"a": "e0", "b": "e1", "c": "e0"}


def test_prefix_affinity_to_context_already_on_an_engine():
    engines = [make_engine("e0", tokens=500, lat=1),
               make_engine("e1", tokens=1000, lat=1, prefixes={"sys"})]
    calls = [make_call("x", prefixes=["sys", "sys/x"])]
    assert schedule(calls, engines) == {"x": "e1"}
    assert schedule(calls, engines, prefix_affinity=False) == {"x": "e0"}


def test_deepest_shared_prefix_wins():
    engines = [make_engine("e0", tokens=100, lat=1, prefixes={"a"}),
               make_engine("e1", tokens=900, lat=1, prefixes={"a", "a/b"})]
    assert schedule([make_call("x", prefixes=["a", "a/b", "a/b/x"])], engines) == {"x": "e1"}
    assert schedule([make_call("y", prefixes=["a", "a/c"])], engines) == {"y": "e0"}


def test_affinity_is_gated_on_load():
    # e1 holds the prefix but 3000 + 500 tokens > 0.8 * 4096: the call spills to e0.
    engines = [make_engine("e0", tokens=1000, lat=1),
               make_engine("e1", tokens=3000, lat=1, prefixes={"sys"})]
    calls = [make_call("x", tokens=500, prefixes=["sys"])]
    assert schedule(calls, engines) == {"x": "e0"}
    assert schedule(calls, engines, affinity_max_load_fraction=1.0) == {"x": "e1"}


def test_hot_prefix_spreads_and_capacity_is_respected():
    engines = [make_engine("e0"), make_engine("e1")]
    calls = [make_call(f"c{i}", prefixes=["hot"]) for i in range(10)]
    placed = schedule(calls, engines)
    # e0 takes calls by affinity up to 0.8 * 4096, then one more as the best latency engine
    # (4000 <= 4096); e1 likewise; the last two fit nowhere and stay queued.
    assert placed == {"c0": "e0", "c1": "e0", "c2": "e0", "c3": "e0",
                      "c4": "e1", "c5": "e1", "c6": "e1", "c7": "e1"}


def test_affinity_does_not_cross_criteria():
    # The prefix lives on a throughput engine; the latency call goes to the idle engine.
    engines = [make_engine("e0", tokens=1000, thr=1, prefixes={"sys"}), make_engine("e1")]
    assert schedule([make_call("x", prefixes=["sys"])], engines) == {"x": "e1"}


# --- latency / throughput ----------------------------------------------------------------

def isolation_cluster(latency_load=2000):
    return [make_engine("thr", tokens=1000, thr=1), make_engine("idle"),
            make_engine("lat", tokens=latency_load, lat=1)]


def test_latency_call_prefers_engine_serving_latency_calls():
    assert schedule([make_call("x", criterion=LAT)], isolation_cluster()) == {"x": "lat"}


def test_throughput_call_prefers_engine_serving_throughput_calls():
    assert schedule([make_call("x", criterion=THR)], isolation_cluster()) == {"x": "thr"}


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
    engines = [make_engine("lat", tokens=2000, lat=1)]
    assert schedule([make_call("small", criterion=THR, tokens=2000)], engines) == {
        "small": "lat"}
    assert schedule([make_call("big", criterion=THR, tokens=3000)], engines) == {}


def test_latency_spreads_and_throughput_packs():
    lat_engines = [make_engine("e0", tokens=2000, lat=1), make_engine("e1", tokens=1000, lat=1)]
    assert schedule([make_call("x", criterion=LAT)], lat_engines) == {"x": "e1"}
    thr_engines = [make_engine("e0", tokens=10000, thr=1),
                   make_engine("e1", tokens=20000, thr=1)]
    assert schedule([make_call("x", criterion=THR)], thr_engines) == {"x": "e1"}


def test_throughput_fills_up_to_throughput_capacity():
    engines = [make_engine("e0", thr_cap=10000)]
    calls = [make_call(f"c{i}", criterion=THR, tokens=3000) for i in range(4)]
    assert schedule(calls, engines) == {"c0": "e0", "c1": "e0", "c2": "e0"}


def test_no_criterion_is_latency_by_default_and_configurable():
    engines = [make_engine("thr", tokens=1000, thr=1), make_engine("lat", tokens=1000, lat=1)]
    call = make_call("x", criterion=None)
    assert schedule([call], engines) == {"x": "lat"}
    assert schedule([call], engines, default_criterion=Criterion.THROUGHPUT) == {"x": "thr"}


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
    placements = AppCentricPolicy().schedule(calls=calls, engines=engines)
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
    ({"capacity": 4096}, "unknown parameter(s) ['capacity']; allowed: ['affinity_max_load"),
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
