"""Objective deduction on the paper's DAG shapes, with exact criteria and task groups."""

from __future__ import annotations

import time

from parrot.types import CallState, Criterion
from tests.manager.dags import Dag

L, T = Criterion.LATENCY, Criterion.THROUGHPUT


def test_chain_is_all_latency():
    dag = Dag()
    dag.call("c0", ["doc"], ["s0"])
    for i in range(1, 10):
        dag.call(f"c{i}", [f"s{i - 1}"], [f"s{i}"])
    dag.get("s9", L)
    assert set(dag.criteria().values()) == {L}
    assert set(dag.groups().values()) == {None}
    assert [dag.calls[f"c{i}"].topo_rank for i in range(10)] == list(range(10))


def test_nothing_asked_means_no_criterion():
    dag = Dag()
    dag.call("a", ["x"], ["y"])
    assert dag.criteria() == {"a": None}


def test_map_reduce_maps_form_a_throughput_group():
    dag = Dag()
    for i in range(4):
        dag.call(f"map{i}", [f"chunk{i}"], [f"part{i}"])
    dag.call("reduce", [f"part{i}" for i in range(4)], ["summary"])
    dag.get("summary", L)
    assert dag.criteria() == {**{f"map{i}": T for i in range(4)}, "reduce": L}
    groups = dag.groups()
    assert {groups[f"map{i}"] for i in range(4)} == {"tg-reduce"} and groups["reduce"] is None
    assert dag.calls["map0"].task_group_size == 4


def test_diamond_keeps_the_head_on_the_critical_path():
    dag = Dag()
    dag.call("head", ["x"], ["a"])
    dag.call("left", ["a"], ["b"])
    dag.call("right", ["a"], ["c"])
    dag.call("join", ["b", "c"], ["d"])
    dag.get("d", L)
    assert dag.criteria() == {"head": L, "left": T, "right": T, "join": L}
    assert dag.groups() == {"head": None, "left": "tg-join", "right": "tg-join", "join": None}


def test_figure9_shape_mixed_gets():
    """The paper's Figure 9 pattern: a final latency output fed by a task group, beside a
    branch whose result is only needed for throughput (e.g. a background report)."""
    dag = Dag()
    dag.call("plan", ["task"], ["p"])
    for i in range(3):
        dag.call(f"work{i}", ["p"], [f"w{i}"])
    dag.call("answer", ["w0", "w1", "w2"], ["ans"])
    dag.call("report", ["p"], ["rep"])
    dag.call("archive", ["rep"], ["archived"])
    dag.get("ans", L)
    dag.get("archived", T)
    assert dag.criteria() == {"plan": L, "work0": T, "work1": T, "work2": T, "answer": L,
                              "report": T, "archive": T}
    assert dag.groups()["work1"] == "tg-answer" and dag.groups()["report"] is None


def test_dependent_producers_are_not_a_group():
    dag = Dag()
    dag.call("a", ["x"], ["y"])
    dag.call("b", ["y"], ["z"])
    dag.call("c", ["y", "z"], ["out"])  # a -> b, both feed c: sequential, not parallel
    dag.get("out", L)
    assert dag.criteria() == {"a": L, "b": L, "c": L}
    assert dag.groups() == {"a": None, "b": None, "c": None}


def test_throughput_get_only_upstream_is_throughput_and_latency_outranks():
    dag = Dag()
    dag.call("a", ["x"], ["y"])
    dag.call("b", ["y"], ["z"])
    dag.call("c", ["y"], ["w"])
    dag.get("z", T)
    assert dag.criteria() == {"a": T, "b": T, "c": None}
    dag.get("w", L)  # a new latency get upstream-merges: a feeds a latency consumer too
    assert dag.criteria() == {"a": L, "b": T, "c": L}


def test_finished_calls_keep_their_criterion_in_incremental_deduction():
    dag = Dag()
    dag.call("a", ["x"], ["y"])
    dag.get("y", L)
    assert dag.criteria() == {"a": L}
    dag.calls["a"].state = CallState.DONE
    dag.call("b", ["y"], ["z"])
    dag.get("z", T)
    assert dag.criteria() == {"a": L, "b": T}


def test_late_producer_raises_consumer_rank():
    dag = Dag()
    dag.var("v")
    consumer = dag.call("consumer", ["v"], ["out"])
    assert consumer.topo_rank == 0
    dag.call("producer0", ["x"], ["u"])
    dag.call("producer", ["u"], ["v"])
    assert consumer.topo_rank == 2


# ---- one test per rule of the paper that the first version got wrong ---------------

def map_reduce(dag: Dag, num_maps: int) -> None:
    for i in range(num_maps):
        dag.call(f"map{i}", [f"chunk{i}"], [f"part{i}"])
    dag.call("reduce", [f"part{i}" for i in range(num_maps)], ["summary"])


def test_no_group_and_no_criterion_before_any_get():
    dag = Dag()
    map_reduce(dag, 3)
    assert dag.criteria() == {"map0": None, "map1": None, "map2": None, "reduce": None}
    assert set(dag.groups().values()) == {None}
    dag.get("summary", L)  # the group forms once its consumer has an objective
    assert dag.criteria() == {"map0": T, "map1": T, "map2": T, "reduce": L}
    assert set(dag.groups().values()) == {"tg-reduce", None}


def test_a_members_own_latency_get_takes_it_out_of_the_group():
    dag = Dag()
    map_reduce(dag, 4)
    dag.get("summary", L)
    dag.get("part0", L)  # the client also wants map0's own result quickly
    assert dag.criteria() == {"map0": L, "map1": T, "map2": T, "map3": T, "reduce": L}
    assert dag.groups() == {"map0": None, "map1": "tg-reduce", "map2": "tg-reduce",
                            "map3": "tg-reduce", "reduce": None}
    assert dag.calls["map1"].task_group_size == 3


def test_a_group_left_with_one_member_dissolves_into_the_consumers_demand():
    dag = Dag()
    map_reduce(dag, 2)
    dag.get("summary", L)
    dag.get("part0", L)
    assert dag.criteria() == {"map0": L, "map1": L, "reduce": L}
    assert set(dag.groups().values()) == {None}


def test_a_producer_alone_gating_a_latency_consumer_stays_latency():
    dag = Dag()
    map_reduce(dag, 3)                       # map0..2 -> reduce (a group)
    dag.call("alert", ["part0"], ["flag"])   # map0 alone gates this latency-critical call
    dag.get("summary", T)
    dag.get("flag", L)
    assert dag.criteria() == {"map0": L, "map1": T, "map2": T, "reduce": T, "alert": L}
    assert dag.groups() == {"map0": None, "map1": "tg-reduce", "map2": "tg-reduce",
                            "reduce": None, "alert": None}
    # Order of submission does not matter: the same DAG built the other way round.
    dag2 = Dag()
    dag2.call("map0", ["chunk0"], ["part0"])
    dag2.call("alert", ["part0"], ["flag"])
    for i in (1, 2):
        dag2.call(f"map{i}", [f"chunk{i}"], [f"part{i}"])
    dag2.call("reduce", ["part0", "part1", "part2"], ["summary"])
    dag2.get("summary", T)
    dag2.get("flag", L)
    assert dag2.criteria() == dag.criteria()


def test_a_producer_alone_gating_a_throughput_consumer_stays_in_its_group():
    dag = Dag()
    map_reduce(dag, 3)
    dag.call("archive", ["part0"], ["stored"])
    dag.get("summary", L)
    dag.get("stored", T)
    assert dag.criteria() == {"map0": T, "map1": T, "map2": T, "reduce": L, "archive": T}
    assert dag.groups()["map0"] == "tg-reduce"


def test_producers_at_different_depths_are_not_grouped():
    dag = Dag()
    dag.call("a", ["x"], ["va"])             # depth 0
    dag.call("b1", ["y"], ["vb1"])
    dag.call("b2", ["vb1"], ["vb"])          # depth 1: the longer chain is the critical path
    dag.call("join", ["va", "vb"], ["out"])
    dag.get("out", L)
    assert dag.criteria() == {"a": L, "b1": L, "b2": L, "join": L}
    assert set(dag.groups().values()) == {None}


def test_producers_at_one_depth_group_apart_from_another_depth():
    dag = Dag()
    dag.call("a0", ["x0"], ["va0"])
    dag.call("a1", ["x1"], ["va1"])          # a0, a1: depth 0
    dag.call("b1", ["y"], ["vb1"])
    dag.call("b2", ["vb1"], ["vb2"])
    dag.call("b3", ["vb1"], ["vb3"])         # b2, b3: depth 1
    dag.call("join", ["va0", "va1", "vb2", "vb3"], ["out"])
    dag.get("out", L)
    assert dag.criteria() == {"a0": T, "a1": T, "b1": L, "b2": T, "b3": T, "join": L}
    assert dag.groups() == {"a0": "tg-join-r0", "a1": "tg-join-r0", "b1": None,
                            "b2": "tg-join", "b3": "tg-join", "join": None}


def test_dissolving_one_group_cascades_into_another():
    dag = Dag()
    # p and q feed c1 (a group); q and r feed c2 (a group); p also has its own latency get.
    for name in "pqr":
        dag.call(name, [f"in_{name}"], [f"v{name}"])
    dag.call("c1", ["vp", "vq"], ["o1"])
    dag.call("c2", ["vq", "vr"], ["o2"])
    dag.get("vp", L)
    dag.get("o1", L)
    dag.get("o2", L)
    # p leaves c1's group, which dissolves: q alone gates c1 (LATENCY), so q leaves c2's group,
    # which dissolves too: r alone gates c2.
    assert dag.criteria() == {"p": L, "q": L, "r": L, "c1": L, "c2": L}
    assert set(dag.groups().values()) == {None}


# ---- cost: deduction must not stall the loop -------------------------------------

def test_two_long_chains_feeding_one_call_deduce_in_linear_time():
    """Two 400-call chains whose every output feeds one call: the first version searched paths
    between every pair of the 800 producers (about cubic: tens of seconds here)."""
    dag = Dag()
    n = 400
    for chain in "ab":
        dag.call(f"{chain}0", [f"{chain}_doc"], [f"{chain}_0"])
        for i in range(1, n):
            dag.call(f"{chain}{i}", [f"{chain}_{i - 1}"], [f"{chain}_{i}"])
    dag.call("final", [f"{c}_{i}" for c in "ab" for i in range(n)], ["out"])
    dag.get("out", L)
    start = time.perf_counter()
    criteria = dag.criteria()
    elapsed = time.perf_counter() - start
    assert elapsed < 1.0, f"deduction took {elapsed:.2f} s"
    # Each chain call alone gates its successor (latency-critical), so only the two chain ends,
    # which feed nothing but `final`, form a group.
    groups = dag.groups()
    assert {name for name, g in groups.items() if g is not None} == {f"a{n - 1}", f"b{n - 1}"}
    assert criteria[f"a{n - 1}"] is T and criteria["a0"] is L and criteria["final"] is L
