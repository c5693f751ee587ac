"""Properties every built-in policy keeps, on random clusters and call lists."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from parrot.policies import builtin_policies
from parrot.policies.app_centric import AppCentricParams, AppCentricPolicy, can_isolate
from parrot.policies.slots import Slot
from parrot.types import Criterion
from policy_factories import make_call, make_engine

CRITERIA = st.sampled_from([Criterion.LATENCY, Criterion.THROUGHPUT, None])


@st.composite
def clusters(draw):
    engines = []
    for i in range(draw(st.integers(0, 4))):
        lat_cap = draw(st.sampled_from([2048, 4096]))
        thr_cap = draw(st.sampled_from([8192, 16384]))
        lat, thr = draw(st.integers(0, 2)), draw(st.integers(0, 2))
        cap = lat_cap if lat else thr_cap
        tokens = draw(st.integers(0, cap)) if lat + thr else 0
        # what its throughput calls hold: all of it without latency calls, else a part
        thr_tokens = (tokens if not lat else draw(st.integers(0, tokens))) if thr else 0
        engines.append(make_engine(
            f"e{i}", tokens=tokens, lat=lat, thr=thr, lat_cap=lat_cap, thr_cap=thr_cap,
            thr_tokens=thr_tokens, queued_prefill=draw(st.sampled_from([0, 0, 3000])),
            groups=draw(st.sets(st.sampled_from(["g0", "g1"]))) if lat + thr else (),
            prefixes=draw(st.sets(st.sampled_from(["a", "a/b", "c"]))),
            healthy=draw(st.booleans()) or i == 0))
    calls = []
    for i in range(draw(st.integers(0, 12))):
        group = draw(st.sampled_from([None, "g0", "g1"]))
        calls.append(make_call(
            f"c{i}", criterion=draw(CRITERIA), tokens=draw(st.integers(1, 20000)),
            group=group, group_size=draw(st.integers(1, 6)),
            prefixes=draw(st.sampled_from([(), ("a",), ("a", "a/b"), ("c",)])), seq=i))
    return engines, calls


@settings(max_examples=100, deadline=None)
@given(clusters(), st.sampled_from(builtin_policies()))
def test_placements_are_valid_and_nothing_starves(cluster, policy_cls):
    engines, calls = cluster
    placements = policy_cls().schedule(calls=calls, engines=engines)
    call_ids = [p.call_id for p in placements]
    assert len(call_ids) == len(set(call_ids))
    assert set(call_ids) <= {c.call_id for c in calls}
    healthy = {e.engine_id for e in engines if e.is_healthy}
    assert {p.engine_id for p in placements} <= healthy
    # Calls are placed in the order given.
    order = {c.call_id: i for i, c in enumerate(calls)}
    assert call_ids == sorted(call_ids, key=order.__getitem__)
    if calls and any(e.is_healthy and e.num_running_calls == 0 for e in engines):
        assert placements


def latency_limit(engine, latency_calls) -> int:
    """The latency capacity, raised where the smallest latency call there (running or placed)
    would alone step more than latency_step_slack (0.1) slower than the capacity allows: to
    the load whose step is 1.1 x that call's solo step, at most the throughput capacity."""
    sizes = [c.num_tokens for c in latency_calls] + [engine.latency_floor_tokens] * (
        engine.latency_floor_tokens > 0)
    if not sizes or (engine.num_latency_calls > 0 and engine.latency_floor_tokens <= 0):
        return engine.latency_capacity   # latency calls of unknown size run there
    profile = engine.profile
    step = profile.max_batch_tokens(1.1 * profile.decode_ms(min(sizes)))
    return max(engine.latency_capacity, min(step, engine.throughput_capacity))


def loaded_engines(engines, calls, placements):
    """(engine, the calls placed on it, its load after them) for every engine given calls,
    but an idle engine given one call (it may take one of any size)."""
    by_id = {c.call_id: c for c in calls}
    for engine in engines:
        mine = [by_id[p.call_id] for p in placements if p.engine_id == engine.engine_id]
        if not mine or (engine.num_running_calls == 0 and len(mine) == 1):
            continue
        yield engine, mine, engine.num_tokens_in_use + sum(c.num_tokens for c in mine)


@settings(max_examples=100, deadline=None)
@given(clusters())
def test_app_centric_respects_capacities(cluster):
    engines, calls = cluster
    # the limits as they are (a latency backlog may pass them: the next test)
    policy = AppCentricPolicy(AppCentricParams(admit_latency_backlog=False,
                                               work_conserving=False))
    placements = policy.schedule(calls=calls, engines=engines)
    # Whether the round isolates is can_isolate's (its rule has tests of its own); given it:
    slots = [Slot.of(e, i) for i, e in enumerate(engines) if e.is_healthy]
    isolates = can_isolate([c for c in calls if c.criterion is Criterion.THROUGHPUT], slots,
                           policy.params.isolation_slack)
    for engine, mine, _load in loaded_engines(engines, calls, placements):
        if engine.num_running_calls == 0:
            # An idle engine takes one call whatever its size; others may join it after.
            mine = sorted(mine, key=lambda c: c.num_tokens)[:-1]
        latency_calls = [c for c in mine if c.criterion is not Criterion.THROUGHPUT]
        throughput = sum(c.num_tokens for c in mine if c.criterion is Criterion.THROUGHPUT)
        limit = latency_limit(engine, latency_calls)
        # Throughput calls fill an engine up to its throughput capacity at most, and only
        # up to the latency limit where it serves latency calls in a round that isolates.
        if throughput:
            assert engine.num_tokens_in_use + throughput <= engine.throughput_capacity, \
                (engine, mine)
            if isolates and engine.num_latency_calls > 0:
                assert engine.num_tokens_in_use + throughput <= limit, (engine, mine)
        # A latency call (no criterion: the default, LATENCY) is placed only where the latency
        # calls' load (the engine's, less what its throughput calls hold) stays under the
        # latency limit.
        latency_load = (engine.num_tokens_in_use - engine.throughput_tokens_in_use
                        + sum(c.num_tokens for c in latency_calls))
        if latency_calls:
            assert latency_load <= limit, (engine, mine)


@settings(max_examples=100, deadline=None)
@given(clusters())
def test_a_latency_backlog_passes_latency_limits_only_within_memory_and_isolation(cluster):
    """Latency calls past the limits the capped test above checks are a backlog admission:
    never on an engine that served throughput calls, never past the throughput capacity."""
    engines, calls = cluster
    placements = AppCentricPolicy(AppCentricParams(work_conserving=False)).schedule(
        calls=calls, engines=engines)
    for engine, mine, _load in loaded_engines(engines, calls, placements):
        latency_calls = [c for c in mine if c.criterion is not Criterion.THROUGHPUT]
        limit = latency_limit(engine, latency_calls)
        latency_load = (engine.num_tokens_in_use - engine.throughput_tokens_in_use
                        + sum(c.num_tokens for c in latency_calls))
        if latency_calls and latency_load > limit:
            assert engine.num_throughput_calls == 0, (engine, mine)
            assert latency_load <= engine.throughput_capacity, (engine, mine)


@settings(max_examples=100, deadline=None)
@given(clusters(), st.sampled_from([30.0, 40.0, 60.0]))
def test_a_per_token_target_bounds_every_token_of_an_engine_carrying_latency_work(cluster,
                                                                                 target):
    """With `tpot_target_ms` (and no long-prompt raise), an engine that carries latency work
    after the round (running or placed) ends it at most at the load whose step meets the
    target, unless it was already past it (then nothing joins) or idle (one call of any
    size)."""
    engines, calls = cluster
    policy = AppCentricPolicy(AppCentricParams(tpot_target_ms=target, latency_step_slack=0.0))
    placements = policy.schedule(calls=calls, engines=engines)
    for engine, mine, load in loaded_engines(engines, calls, placements):
        carries_latency = engine.num_latency_calls > 0 or any(
            c.criterion is not Criterion.THROUGHPUT for c in mine)
        if not carries_latency:
            continue
        limit = engine.profile.max_batch_tokens(target * engine.speed)
        if engine.num_running_calls == 0:
            # the idle engine's one call of any size: the rest keep to the target with it
            load -= max(c.num_tokens for c in mine)
            assert load <= max(limit, 0) or len(mine) == 1, (engine, mine)
        else:
            assert load <= limit, (engine, mine)
