"""Slot.may_have_room: the cheap bound app_centric checks before costing a call on an engine;
Slot.finish_if_room: an engine priced in one call.
It must never say "no room" where the full demand has room (placements would change), and it
must say it where nothing the call could reuse makes it fit (that is what it spares)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from parrot.policies.slots import Demand, Slot
from policy_factories import LAT, THR, make_call, make_engine

PREFIXES = ("p1", "p2", "p3")


def test_a_full_engine_has_no_room_whatever_the_call_could_reuse():
    slot = Slot.of(make_engine("e", tokens=3500, lat=1, lat_cap=4096), 0)
    call = make_call("c", tokens=1200, prefixes=("p1",), prefix_tokens=(500,))
    # even if the engine held p1, 3500 + 1200 - 500 > 4096
    assert not slot.may_have_room([call], LAT, Demand())
    assert not slot.has_room(slot.demand([call], LAT, affinity=True, gate=1.0), LAT)


def test_a_prefix_the_engine_holds_can_make_a_call_fit():
    slot = Slot.of(make_engine("e", tokens=3500, lat=1, lat_cap=4096, running=("p1",)), 0)
    call = make_call("c", tokens=1200, prefixes=("p1",), prefix_tokens=(800,))
    assert slot.may_have_room([call], LAT, Demand())      # 3500 + 1200 - 800 fits
    assert slot.has_room(slot.demand([call], LAT, affinity=True, gate=1.0), LAT)
    # the bound counts the deepest prefix, capped by the prompt (no negative load)
    short = make_call("d", tokens=900, output=400, prefixes=("p1",), prefix_tokens=(800,))
    assert short.max_reusable_tokens == 500


calls = st.builds(
    lambda i, tokens, output, depth, sizes: make_call(
        f"c{i}", tokens=tokens, output=min(output, tokens - 1), prefixes=PREFIXES[:depth],
        prefix_tokens=tuple(sorted(sizes[:depth]))),
    st.integers(0, 99), st.integers(2, 6000), st.integers(0, 500), st.integers(0, 3),
    st.lists(st.integers(0, 6000), min_size=3, max_size=3))

engines = st.builds(
    lambda tokens, lat, thr, running, cached, floor: make_engine(
        "e", tokens=tokens, lat=lat, thr=thr, lat_cap=4096, thr_cap=32768,
        running=PREFIXES[:running], prefixes=PREFIXES[:cached],
        latency_floor=floor if lat else 0),
    st.integers(0, 40000), st.integers(0, 3), st.integers(0, 3), st.integers(0, 3),
    st.integers(0, 3), st.integers(0, 9000))


@settings(max_examples=400, deadline=None)
@given(engines, st.lists(calls, min_size=1, max_size=4), st.lists(calls, max_size=3),
       st.sampled_from((LAT, THR)), st.booleans(), st.sampled_from((0.5, 1.0)),
       st.sampled_from((0.0, 0.1)), st.sets(st.sampled_from(PREFIXES)))
def test_the_bound_never_refuses_room_the_demand_has(view, members, earlier, criterion,
                                                      affinity, gate, slack, brought):
    slot = Slot.of(view, 0, latency_step_slack=slack)
    base = slot.demand(earlier, criterion, affinity=affinity, gate=gate) if earlier \
        else Demand()
    demand = slot.demand(members, criterion, affinity=affinity, gate=gate, base=base,
                         brought=brought)
    if slot.has_room(demand, criterion):
        assert slot.may_have_room(members, criterion, base)


@settings(max_examples=300, deadline=None)
@given(engines, calls, st.sampled_from((LAT, THR)), st.sampled_from((0.0, 0.1)))
def test_finish_if_room_is_finish_ms_where_there_is_room_else_none(view, call, criterion,
                                                                    slack):
    slot = Slot.of(view, 0, latency_step_slack=slack)
    demand = slot.demand([call], criterion, affinity=True, gate=1.0)
    expected = slot.finish_ms(demand) if slot.has_room(demand, criterion) else None
    assert slot.finish_if_room(demand, criterion) == expected


def test_a_plain_calls_bound_is_its_own_demand():
    """What lets app_centric skip `may_have_room` for a call without prefixes: the bound and
    the exact demand coincide, so `has_room` alone decides."""
    slot = Slot.of(make_engine("e", tokens=3000, lat=1, lat_cap=4096), 0)
    fits, too_big = make_call("a", tokens=1096), make_call("b", tokens=1097)
    for call, room in ((fits, True), (too_big, False)):
        demand = slot.demand([call], LAT, affinity=True, gate=1.0)
        assert call.max_reusable_tokens == 0 and demand.load == call.num_tokens
        assert slot.may_have_room([call], LAT, Demand()) is room
        assert (slot.finish_if_room(demand, LAT) is not None) is room
