"""Objective deduction on the paper's DAG shapes, with exact criteria and task groups."""

from __future__ import annotations

from parrot.core.deduction import deduce
from parrot.core.graph import SessionGraph
from parrot.core.nodes import Call, InputBinding, OutputBinding, Variable
from parrot.sampling import SamplingParams
from parrot.template import parse_template
from parrot.types import CallState, Criterion

L, T = Criterion.LATENCY, Criterion.THROUGHPUT


class Dag:
    """Tiny factory: `dag.call("B", ["a"], ["b"])` adds call B reading var a, writing var b."""

    def __init__(self) -> None:
        self.graph = SessionGraph()
        self.vars: dict[str, Variable] = {}
        self.calls: dict[str, Call] = {}

    def var(self, name: str) -> Variable:
        if name not in self.vars:
            self.vars[name] = Variable(name, "s", name)
            self.graph.add_variable(self.vars[name])
        return self.vars[name]

    def call(self, name: str, inputs: list[str], outputs: list[str]) -> Call:
        prompt = " ".join([f"{{{{input:{i}}}}}" for i in inputs] +
                          [f"{{{{output:{o}}}}}" for o in outputs])
        call = Call(name, "s", parse_template(prompt),
                    {i: InputBinding(i, self.var(i).var_id) for i in inputs},
                    {o: OutputBinding(o, self.var(o).var_id, SamplingParams()) for o in outputs})
        self.graph.add_call(call)
        self.calls[name] = call
        return call

    def get(self, var: str, criterion: Criterion) -> None:
        self.vars[var].criterion = criterion

    def criteria(self) -> dict[str, Criterion | None]:
        deduce(self.graph)
        return {name: c.criterion for name, c in self.calls.items()}

    def groups(self) -> dict[str, str | None]:
        return {name: c.task_group for name, c in self.calls.items()}


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
