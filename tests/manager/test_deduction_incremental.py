"""Incremental deduction (`deduce_changed`): the same objectives as deducing every live call,
at the cost of what changed."""

from __future__ import annotations

import random

import pytest

from parrot.errors import ConflictError
from parrot.manager.deduction import deduce, deduce_changed
from parrot.manager.lifecycle import transition
from parrot.manager.nodes import Call
from parrot.types import CallState, Criterion, strongest
from tests.manager.dags import Dag

L, T = Criterion.LATENCY, Criterion.THROUGHPUT


def outcome(dag: Dag) -> dict[str, tuple[object, ...]]:
    return {name: (c.demand, c.criterion, c.task_group, c.task_group_size)
            for name, c in dag.calls.items() if not c.state.is_finished}


def finish(call: Call) -> None:
    transition(call, CallState.READY)
    transition(call, CallState.RUNNING)
    transition(call, CallState.DONE)


def seed(dag: Dag, var: str, criterion: Criterion) -> None:
    dag.vars[var].criterion = strongest((dag.vars[var].criterion, criterion))
    dag.graph.note_seed(dag.vars[var].var_id)


def random_step(dag: Dag, rng: random.Random, n: int) -> None:
    roll = rng.random()
    names = list(dag.vars)
    if roll < 0.45 or not dag.calls:
        # Inputs: a few existing variables (produced or not) or new ones; outputs: new
        # variables, or an existing one nobody produces yet (raising its consumers' ranks).
        inputs = rng.sample(names, min(len(names), rng.randint(0, 3))) + [f"in{n}"]
        free = [v for v in names if dag.graph.get_producer(v) is None and v not in inputs]
        outputs = [f"out{n}"] + ([rng.choice(free)] if free and rng.random() < 0.3 else [])
        try:   # as a submit checks it: an output must not flow into an input already
            dag.graph.check_acyclic([dag.var(v).var_id for v in inputs],
                                    [dag.var(v).var_id for v in outputs])
        except ConflictError:
            return
        dag.call(f"c{n}", inputs, outputs)
    elif roll < 0.75:
        seed(dag, rng.choice(names), rng.choice((L, T)))
    elif roll < 0.97:
        live = [c for c in dag.calls.values() if not c.state.is_finished]
        if live:
            finish(rng.choice(live))
    else:
        deduce(dag.graph, active_only=False)   # GET .../graph: finished calls counted too


@pytest.mark.parametrize("seed_value", range(40))
def test_incremental_deduction_decides_what_a_full_one_would(seed_value: int):
    rng = random.Random(seed_value)
    dag = Dag()
    for n in range(120):
        random_step(dag, rng, n)
        if rng.random() < 0.4:   # several changes may pile up between two rounds
            deduce_changed(dag.graph)
            incremental = outcome(dag)
            deduce(dag.graph)
            assert outcome(dag) == incremental, f"step {n}"


def test_a_round_deduces_the_calls_it_added_not_the_sessions_live_calls():
    dag = Dag()
    for i in range(5000):
        dag.call(f"c{i}", [f"x{i}"], [f"y{i}"])
    assert deduce_changed(dag.graph) == 5000
    for i in range(5000, 5010):
        dag.call(f"c{i}", [f"x{i}"], [f"y{i}"])
    seed(dag, "y7", L)
    assert deduce_changed(dag.graph) == 11
    assert dag.calls["c7"].criterion is L
    for i in range(100):
        finish(dag.calls[f"c{i}"])
    assert deduce_changed(dag.graph) == 0   # nothing shared a group or a consumer with them


def test_a_finished_member_shrinks_its_group_and_the_last_one_dissolves_it():
    dag = Dag()
    for i in range(3):
        dag.call(f"map{i}", [f"chunk{i}"], [f"part{i}"])
    dag.call("reduce", [f"part{i}" for i in range(3)], ["summary"])
    dag.call("other", ["z"], ["w"])
    seed(dag, "summary", L)
    deduce_changed(dag.graph)
    assert dag.calls["map2"].task_group_size == 3
    finish(dag.calls["map0"])
    assert deduce_changed(dag.graph) == 2     # the two maps left, not `other` or `reduce`
    assert dag.calls["map2"].task_group_size == 2
    finish(dag.calls["map1"])
    deduce_changed(dag.graph)
    # map2 alone gates the latency-critical reduce now
    assert (dag.calls["map2"].task_group, dag.calls["map2"].criterion) == (None, L)


def test_a_late_producer_moves_its_consumer_out_of_its_depths_group():
    dag = Dag()
    for i in range(2):
        dag.call(f"map{i}", [f"chunk{i}"], [f"part{i}"])
    dag.call("reduce", ["part0", "part1"], ["summary"])
    seed(dag, "summary", L)
    deduce_changed(dag.graph)
    assert dag.calls["map1"].task_group == "tg-reduce"
    dag.call("fetch", ["url"], ["chunk0"])   # map0 now waits on it: depth 1, apart from map1
    deduce_changed(dag.graph)
    assert [dag.calls[m].task_group for m in ("map0", "map1")] == [None, None]
    assert [dag.calls[m].criterion for m in ("fetch", "map0", "map1")] == [L, L, L]
