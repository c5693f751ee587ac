"""app_centric's lone-call path (`_place_plain`): a call without prefixes in a unit of its own
goes where the general path (`_assign`: `_split`, `with_room`, `_pick`) would put it, with
the same demand, whatever the engines' loads, criteria, task groups and the round's rules."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from parrot.policies.app_centric import AppCentricParams, AppCentricPolicy
from parrot.policies.slots import Slot
from policy_factories import LAT, THR, make_call, make_engine

GROUPS = ("g1", "g2")

engines = st.builds(
    lambda tokens, lat, thr, groups, speed, lat_cap: make_engine(
        "e", tokens=tokens, lat=lat, thr=thr, groups=GROUPS[:groups], speed=speed,
        lat_cap=lat_cap, thr_cap=32768),
    # coarse loads, so that engines often price alike (ties) or land just past the bound
    st.sampled_from((0, 1000, 2000, 3000, 4000, 6000, 20000)), st.integers(0, 2),
    st.integers(0, 2), st.integers(0, 2), st.sampled_from((1.0, 1.5)),
    st.sampled_from((4096, 8192)))

lone_calls = st.builds(
    lambda tokens, output, group: make_call("c", tokens=tokens, output=min(output, tokens - 1),
                                            group=group),
    st.sampled_from((50, 500, 2000, 5000)), st.sampled_from((0, 20, 300)),
    st.sampled_from((None, *GROUPS)))


@settings(max_examples=600, deadline=None)
@given(st.lists(engines, min_size=1, max_size=6), lone_calls, st.sampled_from((LAT, THR)),
       st.booleans(), st.booleans(), st.booleans(), st.booleans(),
       st.sampled_from((0.0, 0.1, 0.5)))
def test_a_lone_plain_call_goes_where_the_general_path_puts_it(
        views, call, criterion, isolates, isolate_criteria, colocate, work_conserving, slack):
    policy = AppCentricPolicy(AppCentricParams(isolate_criteria=isolate_criteria,
                                               colocate_task_groups=colocate,
                                               colocation_slack=slack))

    def slots() -> list[Slot]:
        made = [Slot.of(view, i) for i, view in enumerate(views)]
        for slot in made:
            slot.isolates, slot.work_conserving = isolates, work_conserving
        return made

    general = policy._assign([call], criterion, slots(), False)
    lone = policy._place_plain(call, criterion, slots())
    if not general:
        assert lone is None
        return
    assert lone is not None
    (_, slot, demand), = general
    assert (lone[0].index, lone[1]) == (slot.index, demand)


def test_ties_go_to_an_engine_serving_the_criterion_then_the_first():
    policy = AppCentricPolicy()
    call = make_call("c", tokens=500)
    # three idle-alike engines: equal finish times; the second already serves latency work
    # but has no load, so it prices the same
    views = [make_engine("a"), make_engine("b", lat=1, latency_floor=10), make_engine("c")]
    lone = policy._place_plain(call, LAT, [Slot.of(v, i) for i, v in enumerate(views)])
    assert lone is not None and lone[0].view.engine_id == "b"
    views = [make_engine("a"), make_engine("b"), make_engine("c")]
    lone = policy._place_plain(call, LAT, [Slot.of(v, i) for i, v in enumerate(views)])
    assert lone is not None and lone[0].view.engine_id == "a"
