"""app_centric's latency rules that bound what they should: latency calls are not held in the
manager while the engine has room (work conservation), and a per-token latency target bounds
every token on an engine carrying latency work."""

from __future__ import annotations

import pytest

from parrot.policies import PolicyConfigError, default_registry
from parrot.policies.app_centric import AppCentricParams, AppCentricPolicy
from parrot.policies.least_queue import LeastQueuePolicy
from parrot.speed_profile import DEFAULT_PROFILE, SpeedProfile
from policy_factories import LAT, THR, by_call, make_call, make_engine

# A step that doubles every 1,000 tokens of load: batching one more latency call never lowers
# the estimated mean completion, so the paper's backlog rule admits nothing past the limit.
STEEP = SpeedProfile(0.1, ((0, 10.0), (1000, 20.0), (2000, 40.0), (4000, 80.0),
                           (8000, 160.0), (64000, 1280.0)))


def schedule(calls, engines, **params):
    return by_call(AppCentricPolicy(AppCentricParams(**params)).schedule(calls=calls,
                                                                         engines=engines))


def chats(n, *, tokens=1000, output=200):
    return [make_call(f"c{i}", criterion=LAT, tokens=tokens, output=output, seq=i)
            for i in range(n)]


# --- work conservation ----------------------------------------------------------------------

def test_a_lone_latency_call_joins_an_engine_with_room_in_the_same_round():
    """Four latency calls at the 4,096-token latency capacity, 28k tokens of KV free: the new
    call is placed now. Under the paper's rule it waits in the manager for a running call to
    finish (the step grows too fast for the backlog rule to admit it)."""
    engine = make_engine("e0", tokens=4000, lat=4, lat_cap=4096, kv_free=28000,
                         latency_floor=1000, profile=STEEP)
    assert schedule(chats(1), [engine]) == {"c0": "e0"}
    assert schedule(chats(1), [engine], work_conserving=False) == {}


def test_latency_only_chat_traffic_is_dispatched_while_the_engine_has_room():
    """40 chats of 1,000 tokens on an idle engine with 50,000 tokens of KV: all of them go,
    as least_queue sends them; the paper's rule sends 4 (the 4,096-token latency capacity)."""
    engine = make_engine("e0", lat_cap=4096, thr_cap=32768, kv_free=50000, profile=STEEP)
    calls = chats(40)
    least_queue = by_call(LeastQueuePolicy().schedule(calls=calls, engines=[engine]))
    assert schedule(calls, [engine]) == least_queue == {c.call_id: "e0" for c in calls}
    assert schedule(calls, [engine], work_conserving=False) == {f"c{i}": "e0"
                                                                for i in range(4)}


def test_work_conservation_stops_at_the_engines_own_limit():
    # its free KV when it reports one (20 of 40 calls of 1,000 tokens in 20,500) ...
    engine = make_engine("e0", lat_cap=4096, thr_cap=32768, kv_free=20500)
    assert schedule(chats(40), [engine]) == {f"c{i}": "e0" for i in range(20)}
    # ... else its throughput capacity (32 of 40 in 32,768)
    unknown = make_engine("e0", lat_cap=4096, thr_cap=32768, kv_free=None)
    assert schedule(chats(40), [unknown]) == {f"c{i}": "e0" for i in range(32)}


def test_throughput_work_still_keeps_off_latency_engines_while_isolation_pays():
    """Work conservation is for latency calls: a throughput call joining a latency engine is
    still held to the latency capacity in a round that isolates, so it goes to the
    latency-free engine."""
    calls = [make_call("t", criterion=THR, tokens=3000, output=100)]
    engines = [make_engine("lat", tokens=3000, lat=3, lat_cap=4096, kv_free=60000),
               make_engine("thr", tokens=2000, thr=1, thr_cap=32768, kv_free=60000)]
    assert schedule(calls, engines) == {"t": "thr"}


# --- the per-token latency target -----------------------------------------------------------

def latency_engine(**kwargs):
    """Two latency calls, 2,000 tokens: DEFAULT_PROFILE steps 27.9 ms there; 34 ms at 4,096."""
    return make_engine("e0", tokens=2000, lat=2, lat_cap=4096, thr_cap=32768,
                       latency_floor=1000, kv_free=60000, **kwargs)


def test_the_target_holds_back_throughput_work_that_would_push_a_latency_engine_past_it():
    """Target 34 ms: 4,096 tokens on DEFAULT_PROFILE. A 3,000-token throughput call would
    take the step to 37 ms: held. Without a target, on the only engine (nothing to isolate
    to), it fills to the throughput capacity."""
    big = [make_call("t", criterion=THR, tokens=3000, output=100)]
    assert DEFAULT_PROFILE.max_batch_tokens(34.0) == 4096
    assert schedule(big, [latency_engine()], tpot_target_ms=34.0,
                    latency_step_slack=0.0) == {}
    assert schedule(big, [latency_engine()], latency_step_slack=0.0) == {"t": "e0"}
    # a throughput call that keeps the step within the target joins
    small = [make_call("t", criterion=THR, tokens=2000, output=100)]
    assert schedule(small, [latency_engine()], tpot_target_ms=34.0,
                    latency_step_slack=0.0) == {"t": "e0"}


def test_the_target_bounds_latency_calls_too_and_the_backlog_never_passes_it():
    calls = chats(3)     # 2,000 + 2 x 1,000 fits 4,096; the third would pass it
    assert schedule(calls, [latency_engine()], tpot_target_ms=34.0,
                    latency_step_slack=0.0) == {"c0": "e0", "c1": "e0"}
    assert schedule(calls, [latency_engine()], latency_step_slack=0.0) == {
        "c0": "e0", "c1": "e0", "c2": "e0"}


def test_the_target_is_checked_against_each_engines_profile_and_speed():
    """The same 40 ms target allows 6,144 tokens on DEFAULT_PROFILE at speed 1 and 16,384 at
    speed 2 (82 ms at speed 1): a 5,000-token latency call goes where it meets the target."""
    calls = [make_call("c", criterion=LAT, tokens=5000, output=100)]
    slow = make_engine("slow", tokens=3000, lat=2, latency_floor=1000, kv_free=60000)
    fast = make_engine("fast", tokens=10000, lat=4, latency_floor=1000, kv_free=60000,
                       speed=2.0)
    assert schedule(calls, [slow, fast], tpot_target_ms=40.0,
                    latency_step_slack=0.0) == {"c": "fast"}


def test_a_latency_call_does_not_join_throughput_work_past_the_target():
    """An engine full of throughput work (20,000 tokens, 125 ms) is past a 40 ms target: a
    latency call waits for an engine under it (an idle one here)."""
    calls = [make_call("c", criterion=LAT, tokens=1000, output=100)]
    busy = make_engine("busy", tokens=20000, thr=5, kv_free=60000)
    idle = make_engine("idle", kv_free=60000, speed=0.5)
    assert schedule(calls, [busy, idle], tpot_target_ms=40.0) == {"c": "idle"}
    assert schedule(calls, [busy], tpot_target_ms=40.0) == {}


@pytest.mark.parametrize("value, message", [
    (0, "tpot_target_ms: 0 is out of range"),
    ("fast", "tpot_target_ms: 'fast'"),
])
def test_the_target_is_validated(value, message):
    with pytest.raises(PolicyConfigError) as info:
        default_registry().create("app_centric", {"tpot_target_ms": value})
    assert message in str(info.value)


def test_the_target_from_yaml():
    policy = default_registry().create("app_centric", {"tpot_target_ms": 40,
                                                       "work_conserving": False})
    assert policy.params.tpot_target_ms == 40.0
    assert policy.params.work_conserving is False


# --- where holding back still protects something -------------------------------------------

def test_latency_calls_keep_to_the_latency_capacity_beside_throughput_work():
    """An engine running a throughput call: latency calls keep to the latency capacity among
    themselves (the paper's rule: 4,096 tokens beside what the throughput call holds), as
    they would with work_conserving off."""
    engine = make_engine("e0", tokens=3000, lat=0, thr=1, lat_cap=4096, kv_free=50000,
                         profile=STEEP)
    assert schedule(chats(10), [engine]) == {f"c{i}": "e0" for i in range(4)}


def test_latency_calls_keep_to_the_latency_capacity_while_throughput_work_waits_for_them():
    """One idle engine, a throughput call ready in the same round: the engine may take that
    work, so the latency calls keep to the latency capacity as under the paper's rule (the
    round isolates, so the throughput call is then held to it too)."""
    engine = make_engine("e0", lat_cap=4096, thr_cap=32768, kv_free=50000, profile=STEEP)
    calls = chats(10) + [make_call("t", criterion=THR, tokens=3000, output=100, seq=10)]
    paper = schedule(calls, [engine], work_conserving=False)
    assert schedule(calls, [engine]) == paper == {f"c{i}": "e0" for i in range(4)}
    # without the throughput call, all ten go
    assert schedule(calls[:10], [engine]) == {f"c{i}": "e0" for i in range(10)}


def test_a_work_conserving_slot_limits_latency_calls_by_the_engines_own_limit_alone():
    """What the policy sets per round (Slot.work_conserving): on an engine serving only
    latency calls, a latency call may reach the engine's free KV; on one that also serves
    throughput work, the latency capacity plus what that work holds."""
    from parrot.policies.slots import Slot

    latency_only = Slot.of(make_engine("a", tokens=3000, lat=3, lat_cap=4096,
                                       kv_free=50000, latency_floor=1000), 0)
    latency_only.work_conserving = True
    assert latency_only.capacity(LAT) == 53000
    mixed = Slot.of(make_engine("b", tokens=5000, lat=2, thr=1, thr_tokens=2000,
                                lat_cap=4096, kv_free=50000, latency_floor=1000), 1)
    mixed.work_conserving = True
    assert mixed.capacity(LAT) == 4096 + 2000


# --- where throughput work fills the engine anyway -----------------------------------------

def mixed_engine(**kwargs):
    """One engine serving 2 latency calls (2,000 tokens) and a throughput call (3,000): no
    engine is free of latency calls, so throughput work may fill it to its throughput
    capacity (the round cannot isolate)."""
    return make_engine("e0", tokens=5000, lat=2, thr=1, thr_tokens=3000, lat_cap=4096,
                       thr_cap=32768, kv_free=60000, latency_floor=1000, profile=STEEP,
                       **kwargs)


def test_latency_calls_are_not_held_below_what_throughput_work_may_fill():
    """Throughput calls ready beside chats, on an engine they may fill to 32,768 tokens: a
    chat held to the latency capacity there protects nobody, so chats may fill it as far
    (27 of 30 chats of 1,000 tokens, after the 5,000 running; then the throughput call
    still fits nowhere). Under the paper's rule 2 chats join (4,096 + the 3,000 of
    throughput work) and the engine is kept for the third (first come, first served)."""
    calls = chats(30) + [make_call("t", criterion=THR, tokens=3000, output=100, seq=30)]
    placed = schedule(calls, [mixed_engine()])
    assert placed == {f"c{i}": "e0" for i in range(27)}
    paper = schedule(calls, [mixed_engine()], work_conserving=False)
    assert paper == {"c0": "e0", "c1": "e0"}


def test_room_goes_to_latency_calls_before_throughput_calls_of_the_same_round():
    """An engine with room for one more 4,000-token call; a throughput call arrived first,
    a chat after it: the chat takes the room (someone waits on it), the throughput call
    waits. Under the paper's rule, first come first served."""
    engine = make_engine("e0", tokens=28000, lat=1, thr=1, thr_tokens=27000, lat_cap=4096,
                         thr_cap=32768, kv_free=60000, latency_floor=1000, profile=STEEP)
    calls = [make_call("t", criterion=THR, tokens=4000, output=100, seq=0),
             make_call("c", criterion=LAT, tokens=4000, output=100, seq=1)]
    assert schedule(calls, [engine]) == {"c": "e0"}
    assert schedule(calls, [engine], work_conserving=False) == {"t": "e0"}


def test_a_slot_that_does_not_isolate_lets_latency_calls_to_the_throughput_capacity():
    from parrot.policies.slots import Slot

    slot = Slot.of(mixed_engine(), 0)
    slot.isolates = False
    assert slot.capacity(LAT) == 4096 + 3000           # the paper's rule
    slot.work_conserving_mixed = True
    assert slot.capacity(LAT) == 32768
    slot.isolates = True                               # isolation protects: the rule holds
    assert slot.capacity(LAT) == 4096 + 3000


# --- background work held beside latency calls (hold_background_work) ----------------------

def background(call_id, *, tokens=3000, seq=0):
    """A throughput call whose output nobody waits on latency-critically (a batch job)."""
    return make_call(call_id, criterion=THR, tokens=tokens, output=100, seq=seq, demand=THR)


def test_background_work_is_held_to_the_latency_limit_beside_latency_calls():
    """The one engine serves a chat (2,000 tokens), so no round can isolate: a 3,000-token
    batch call fills it past the 4,096-token latency capacity by default, and waits with
    `hold_background_work`, which keeps the chat's steps short."""
    engine = make_engine("e0", tokens=2000, lat=1, kv_free=30000, latency_floor=2000)
    assert schedule([background("b")], [engine]) == {"b": "e0"}
    assert schedule([background("b")], [engine], hold_background_work=True) == {}
    # Under the limit it joins: holding is a bound, not a ban.
    small = background("b", tokens=2000)
    assert schedule([small], [engine], hold_background_work=True) == {"b": "e0"}
    # An engine free of latency calls takes it to the throughput capacity, as before.
    idle = make_engine("e1", tokens=20000, thr=2, kv_free=12000)
    assert schedule([background("b")], [engine, idle], hold_background_work=True) == {
        "b": "e1"}


def test_throughput_work_a_latency_critical_call_waits_on_is_not_background():
    """A task group's maps feeding a latency-critical reduce are THROUGHPUT with a LATENCY
    demand: someone waits on them, so they fill the engine as any throughput work; so does a
    throughput call nothing has asked about downstream yet (no demand)."""
    engine = make_engine("e0", tokens=2000, lat=1, kv_free=30000, latency_floor=2000)
    maps = [make_call(f"m{i}", criterion=THR, group="g", group_size=2, tokens=1500,
                      output=100, seq=i, demand=LAT) for i in range(2)]
    assert schedule(maps, [engine], hold_background_work=True) == {"m0": "e0", "m1": "e0"}
    unknown = make_call("u", criterion=THR, tokens=3000, output=100)
    assert schedule([unknown], [engine], hold_background_work=True) == {"u": "e0"}


def test_background_work_comes_after_the_work_someone_waits_on():
    """Room for one 3,000-token call on a latency-free engine: a batch call that arrived
    first yields it to a map a latency-critical reduce waits on (by default, first come)."""
    engine = make_engine("e0", tokens=26000, thr=2, kv_free=6000, thr_cap=29000)
    calls = [background("b", seq=0),
             make_call("m", criterion=THR, group="g", group_size=1, tokens=3000, output=100,
                       seq=1, demand=LAT)]
    assert schedule(calls, [engine]) == {"b": "e0"}
    assert schedule(calls, [engine], hold_background_work=True) == {"m": "e0"}
    # The paper's first come, first served (work_conserving: false) keeps no tiers.
    assert schedule(calls, [engine], hold_background_work=True,
                    work_conserving=False) == {"b": "e0"}


def test_hold_background_work_from_yaml_and_validated():
    policy = default_registry().create("app_centric", {"hold_background_work": True})
    assert policy.params.hold_background_work is True
    with pytest.raises(PolicyConfigError, match="hold_background_work"):
        default_registry().create("app_centric", {"hold_background_work": "yes"})
