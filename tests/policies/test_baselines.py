"""latency_centric and throughput_centric: capped pools, no affinity."""

from __future__ import annotations

import pytest

from parrot.policies import PolicyConfigError, default_registry
from parrot.policies.latency_centric import LatencyCentricParams, LatencyCentricPolicy
from parrot.policies.throughput_centric import ThroughputCentricParams, ThroughputCentricPolicy
from policy_factories import THR, by_call, make_call, make_engine


def latency(calls, engines, **params):
    policy = LatencyCentricPolicy(LatencyCentricParams(**params))
    return by_call(policy.schedule(calls=calls, engines=engines))


def throughput(calls, engines, **params):
    policy = ThroughputCentricPolicy(ThroughputCentricParams(**params))
    return by_call(policy.schedule(calls=calls, engines=engines))


def test_latency_centric_picks_least_loaded_engine_with_room():
    engines = [make_engine("e0", tokens=2000, lat=2), make_engine("e1", tokens=1000, lat=1),
               make_engine("e2", tokens=1500, lat=1)]
    calls = [make_call(f"c{i}") for i in range(4)]
    # loads 2000/1000/1500: c0 -> e1 (2000), c1 -> e2 (2500), c2 -> e0 (3000), c3 -> e1.
    assert latency(calls, engines) == {"c0": "e1", "c1": "e2", "c2": "e0", "c3": "e1"}


def test_latency_centric_treats_throughput_calls_alike_and_respects_capacity():
    engines = [make_engine("e0", tokens=3000, thr=1, thr_cap=100000)]
    assert latency([make_call("x", criterion=THR, tokens=1096)], engines) == {"x": "e0"}
    assert latency([make_call("x", criterion=THR, tokens=1097)], engines) == {}
    assert latency([make_call("x", tokens=1097)], engines, token_capacity=6144) == {"x": "e0"}


def test_latency_centric_ignores_prefixes():
    engines = [make_engine("e0", tokens=500, lat=1),
               make_engine("e1", tokens=1000, lat=1, prefixes={"sys"})]
    assert latency([make_call("x", prefixes=["sys"])], engines) == {"x": "e0"}


def test_throughput_centric_is_fastchat_dispatch_with_room():
    # Shortest queue first (e2 is idle), then fewest tokens; e1 (30000) has no room for 4000.
    engines = [make_engine("e0", tokens=10000, thr=1), make_engine("e1", tokens=30000, thr=1),
               make_engine("e2")]
    calls = [make_call("a", tokens=4000), make_call("b", tokens=4000), make_call("c", tokens=4000)]
    assert throughput(calls, engines) == {"a": "e2", "b": "e2", "c": "e0"}


def test_throughput_centric_fills_each_engine_to_its_own_throughput_capacity():
    # By default the cap is per engine (e0 has room for one 4000-token call, e1 for three);
    # an integer cap applies to every engine alike.
    engines = [make_engine("e0", tokens=1000, thr=1, thr_cap=5000),
               make_engine("e1", tokens=1000, thr=1, thr_cap=13000)]
    calls = [make_call(f"c{i}", tokens=4000) for i in range(5)]
    assert throughput(calls, engines) == {"c0": "e0", "c1": "e1", "c2": "e1", "c3": "e1"}
    assert throughput(calls, engines, token_capacity=9000) == {
        "c0": "e0", "c1": "e1", "c2": "e0", "c3": "e1"}


@pytest.mark.parametrize("schedule", [latency, throughput])
def test_auto_capacity_is_each_engines_latency_capacity(schedule):
    # "auto" caps each engine at its own latency capacity (what app_centric's latency work
    # gets): e0 has room for one 4000-token call under 5000, e1 for two under 9000.
    engines = [make_engine("e0", tokens=1000, lat=1, lat_cap=5000, thr_cap=10**6),
               make_engine("e1", tokens=1000, lat=1, lat_cap=9000, thr_cap=10**6)]
    calls = [make_call(f"c{i}", tokens=4000) for i in range(4)]
    placed = schedule(calls, engines, token_capacity="auto")
    assert sorted(placed) == ["c0", "c1", "c2"]
    assert sorted(placed.values()) == ["e0", "e1", "e1"]
    assert default_registry().create("latency_centric", {"token_capacity": "auto"}).params == (
        LatencyCentricParams(token_capacity="auto"))


def test_throughput_centric_spreads_over_idle_engines():
    engines = [make_engine(f"e{i}") for i in range(4)]
    calls = [make_call(f"c{i}", tokens=1000) for i in range(8)]
    placed = throughput(calls, engines)
    assert sorted(placed.values()) == ["e0", "e0", "e1", "e1", "e2", "e2", "e3", "e3"]


def test_throughput_centric_respects_capacity():
    engines = [make_engine("e0", tokens=1000, thr=1)]
    calls = [make_call(f"c{i}", tokens=1000) for i in range(3)]
    assert throughput(calls, engines, token_capacity=3000) == {"c0": "e0", "c1": "e0"}


@pytest.mark.parametrize("schedule", [latency, throughput])
def test_idle_engine_accepts_one_oversized_call(schedule):
    calls = [make_call("huge", tokens=10**6), make_call("huge2", tokens=10**6)]
    assert schedule(calls, [make_engine("e0")]) == {"huge": "e0"}
    assert schedule(calls, [make_engine("e0", tokens=1, lat=1)]) == {}


@pytest.mark.parametrize("schedule", [latency, throughput])
def test_unhealthy_engines_are_skipped(schedule):
    engines = [make_engine("e0", healthy=False), make_engine("e1", tokens=100, lat=1)]
    assert schedule([make_call("x")], engines) == {"x": "e1"}


@pytest.mark.parametrize("name", ["latency_centric", "throughput_centric"])
@pytest.mark.parametrize("value, message", [
    (0, "token_capacity: 0 is out of range; allowed: integer >= 1"),
    (-5, "-5 is out of range"),
    (True, "True is not"),
    ("4096", "'4096' is not"),
    ("Auto", """token_capacity: 'Auto' is not valid; allowed: integer >= 1, "auto" or null"""),
])
def test_token_capacity_validation(name, value, message):
    with pytest.raises(PolicyConfigError) as info:
        default_registry().create(name, {"token_capacity": value})
    assert message in str(info.value)


def test_defaults_match_the_paper():
    registry = default_registry()
    assert registry.create("latency_centric").params == LatencyCentricParams(token_capacity=4096)
    # the throughput-centric cap is each engine's throughput capacity (its memory headroom)
    assert registry.create("throughput_centric").params == ThroughputCentricParams(
        token_capacity=None)
    with pytest.raises(PolicyConfigError, match='2.5 is not valid; allowed: integer >= 1, "auto"'):
        LatencyCentricParams(token_capacity=2.5)  # type: ignore[arg-type]
