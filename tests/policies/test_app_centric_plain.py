"""app_centric's lone-call path: a call without prefixes in a unit of its own goes to its
fastest engine, found in one pass (`slots.fastest_with_room`), where that engine is calm and
the call seeks no task group (else the general path decides). It must place every round as
the general path does, which a call takes once it has a prefix: the same call with a
prefix no engine holds demands exactly what it demands without one."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from parrot.policies.app_centric import AppCentricParams, AppCentricPolicy
from policy_factories import LAT, THR, by_call, make_call, make_engine

GROUPS = ("g1", "g2")

engines = st.builds(
    lambda tokens, lat, thr, groups, speed, lat_cap: make_engine(
        "e", tokens=tokens, lat=lat, thr=thr, groups=GROUPS[:groups], speed=speed,
        lat_cap=lat_cap, thr_cap=32768),
    # coarse loads, so that engines often price alike (ties) or land just past the slack
    st.sampled_from((0, 1000, 2000, 3000, 4000, 6000, 20000)), st.integers(0, 2),
    st.integers(0, 2), st.integers(0, 2), st.sampled_from((1.0, 1.5)),
    st.sampled_from((4096, 8192)))

lone_calls = st.builds(
    lambda tokens, output, group, criterion: (tokens, min(output, tokens - 1), group, criterion),
    st.sampled_from((50, 500, 2000, 5000)), st.sampled_from((0, 20, 300)),
    st.sampled_from((None, *GROUPS)), st.sampled_from((LAT, THR, None)))


def with_unheld_prefix(call):
    """The same call with a prefix of its own that no engine holds and no other call brings
    (the general path, where it saves nothing)."""
    return dataclasses.replace(call, prefix_hashes=(f"only-{call.call_id}",),
                               prefix_num_tokens=(1,))


@settings(max_examples=500, deadline=None)
@given(st.lists(engines, min_size=1, max_size=6), st.lists(lone_calls, min_size=1, max_size=4),
       st.booleans(), st.booleans(), st.booleans(), st.sampled_from((0.0, 0.1, 0.5)))
def test_lone_calls_go_where_the_general_path_puts_them(
        views, shapes, isolate_criteria, colocate, work_conserving, slack):
    views = [dataclasses.replace(v, engine_id=f"e{i}") for i, v in enumerate(views)]
    calls = [make_call(f"c{i}", tokens=tokens, output=output, group=group, criterion=criterion,
                       seq=i)
             for i, (tokens, output, group, criterion) in enumerate(shapes)]
    policy = AppCentricPolicy(AppCentricParams(isolate_criteria=isolate_criteria,
                                               colocate_task_groups=colocate,
                                               work_conserving=work_conserving,
                                               colocation_slack=slack))
    lone = policy.schedule(calls=calls, engines=views)
    general = policy.schedule(calls=[with_unheld_prefix(c) for c in calls], engines=views)
    assert by_call(lone) == by_call(general)
    assert [p.criterion for p in lone] == [p.criterion for p in general]


def test_ties_go_to_an_engine_serving_the_criterion_then_the_first():
    policy = AppCentricPolicy()
    call = make_call("c", tokens=500)
    # alike engines: equal finish times; "b" already serves latency work (no load)
    views = [make_engine("a"), make_engine("b", lat=1, latency_floor=10), make_engine("c")]
    assert by_call(policy.schedule(calls=[call], engines=views)) == {"c": "b"}
    views = [make_engine("a"), make_engine("b"), make_engine("c")]
    assert by_call(policy.schedule(calls=[call], engines=views)) == {"c": "a"}
