"""The per-round rules app_centric computes before placing: whether a criterion's ready work
exceeds the engines' free tokens (`exceeds_free`, summed until covered) and whether
throughput work can be isolated (`can_isolate`)."""

from __future__ import annotations

from parrot.policies.app_centric import can_isolate, exceeds_free
from parrot.policies.slots import Slot
from policy_factories import LAT, THR, make_call, make_engine


def slots(*views) -> list[Slot]:
    return [Slot.of(view, i) for i, view in enumerate(views)]


def test_demand_exceeds_only_what_the_engines_have_free_together():
    pool = slots(make_engine("a", tokens=3096, lat_cap=4096),     # 1,000 free for latency
                 make_engine("b", tokens=3596, lat_cap=4096))     # 500
    assert [s.free(LAT) for s in pool] == [1000, 500]
    assert not exceeds_free(0, pool, LAT)
    assert not exceeds_free(900, pool, LAT)          # the first engine covers it
    assert not exceeds_free(1500, pool, LAT)         # both together, exactly
    assert exceeds_free(1501, pool, LAT)
    assert exceeds_free(1, slots(make_engine("c", tokens=4096, lat_cap=4096)), LAT)
    assert exceeds_free(1, [], LAT)


def test_with_no_throughput_work_a_round_isolates_where_an_engine_serves_no_latency():
    busy, free = make_engine("a", lat=1), make_engine("b")
    assert can_isolate([], slots(busy, free), 0.1)
    assert not can_isolate([], slots(busy, make_engine("c", lat=2)), 0.1)
    # with throughput work, room on the latency-free engines decides
    job = make_call("j", criterion=THR, tokens=40000)
    assert not can_isolate([job], slots(busy, free), 0.1)     # 40,000 > its 32,768
    assert can_isolate([make_call("k", criterion=THR, tokens=1000)], slots(free), 0.1)
