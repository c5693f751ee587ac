"""SessionGraph: cycle checks (exact verdicts, bounded cost), ranks and variable criteria."""

from __future__ import annotations

import time

import pytest

from parrot.errors import ConflictError
from parrot.types import Criterion
from tests.manager.dags import Dag

L, T = Criterion.LATENCY, Criterion.THROUGHPUT


def chain(dag: Dag, name: str, length: int, head_inputs: list[str]) -> None:
    """`name`0 reads `head_inputs`; `name`i reads `name`_{i-1}; each writes `name`_i."""
    dag.call(f"{name}0", head_inputs, [f"{name}_0"])
    for i in range(1, length):
        dag.call(f"{name}{i}", [f"{name}_{i - 1}"], [f"{name}_{i}"])


def check(dag: Dag, inputs: list[str], outputs: list[str]) -> None:
    dag.graph.check_acyclic([dag.var(v).var_id for v in inputs],
                            [dag.var(v).var_id for v in outputs])


def is_acyclic(dag: Dag, inputs: list[str], outputs: list[str]) -> bool:
    """The cycle check's verdict: True when the call may be added, False on a cycle."""
    try:
        check(dag, inputs, outputs)
    except ConflictError:
        return False
    return True


def test_an_output_that_is_also_an_input_is_a_cycle():
    dag = Dag()
    with pytest.raises(ConflictError, match="both an input and an output"):
        check(dag, ["x"], ["x"])


def test_an_output_flowing_into_an_input_is_a_cycle():
    dag = Dag()
    chain(dag, "a", 5, ["seed"])  # seed -> a0 -> ... -> a_4
    with pytest.raises(ConflictError, match="output seed already flows into input a_4"):
        check(dag, ["a_4"], ["seed"])  # a call reading a_4 and writing seed closes a loop
    with pytest.raises(ConflictError, match="output seed already flows into input a_2"):
        check(dag, ["other", "a_2"], ["fresh", "seed"])


def test_no_cycle_when_the_output_feeds_a_separate_branch():
    dag = Dag()
    chain(dag, "a", 5, ["seed"])
    chain(dag, "b", 5, ["free"])
    assert is_acyclic(dag, ["a_4"], ["free"])     # free feeds b, which never reaches a_4
    assert is_acyclic(dag, ["seed"], ["free"])    # an input nobody produces cannot be reached
    assert is_acyclic(dag, ["a_0"], ["unused"])
    assert not is_acyclic(dag, ["b_4"], ["free"])  # the control: free does reach b_4


def test_cycle_check_is_one_bounded_search_not_outputs_times_inputs_paths():
    """A reproduction: 100 inputs × 100 outputs over a 200-call chain stalled the loop for seconds
    (a path search per pair). Here 200 × 200 over 400-call chains, the worst case for pair
    searches: every output reaches a long branch that never meets the inputs."""
    dag = Dag()
    n, k = 400, 200
    chain(dag, "a", n, ["doc"])
    outs = [f"o{j}" for j in range(k)]
    chain(dag, "b", n, outs)           # the would-be outputs feed chain b's head
    start = time.perf_counter()
    check(dag, [f"a_{i}" for i in range(n - k, n)], outs)
    elapsed = time.perf_counter() - start
    assert elapsed < 0.5, f"cycle check took {elapsed:.2f} s"
    with pytest.raises(ConflictError):  # and the same search still finds a real cycle
        check(dag, [f"b_{n - 1}"], outs[-1:])


def test_ranks_follow_the_longest_path_even_when_a_producer_arrives_late():
    dag = Dag()
    consumer = dag.call("consumer", ["v"], ["out"])
    dag.call("p0", ["x"], ["u"])
    dag.call("p1", ["u"], ["v"])
    assert (dag.calls["p0"].topo_rank, dag.calls["p1"].topo_rank, consumer.topo_rank) == (0, 1, 2)


def test_a_variables_criterion_is_the_strongest_of_its_get_and_its_consumers():
    dag = Dag()
    dag.call("a", ["x"], ["y"])
    dag.call("b", ["y"], ["z"])
    dag.get("y", T)
    dag.get("z", L)
    dag.criteria()
    assert dag.graph.get_perf_obj(dag.vars["y"].var_id) is L  # b needs y for a latency get
    assert dag.graph.get_perf_obj(dag.vars["x"].var_id) is L


def test_node_link_lists_nodes_as_added_and_each_nodes_edges_in_order():
    dag = Dag()
    dag.call("A", ["x"], ["a"])
    dag.call("B", ["a", "x"], ["b"])
    graph = dag.graph.to_node_link()
    assert [n.id for n in graph.nodes] == ["x", "a", "A", "b", "B"]
    assert [(link.source, link.target) for link in graph.links] == [
        ("x", "A"), ("x", "B"), ("a", "B"), ("A", "a"), ("B", "b")]
    assert "B" in dag.graph and "nope" not in dag.graph


def test_the_dag_as_networkx_has_the_same_nodes_and_edges():
    import networkx as nx

    dag = Dag()
    dag.call("A", ["x"], ["a"])
    dag.call("B", ["a", "x"], ["b"])
    g = dag.graph.to_networkx()
    assert list(g.nodes) == ["x", "a", "A", "b", "B"]
    assert list(g.edges) == [("x", "A"), ("x", "B"), ("a", "B"), ("A", "a"), ("B", "b")]
    assert nx.is_directed_acyclic_graph(g) and g.nodes["B"]["obj"].call_id == "B"


def test_neither_a_client_nor_parrot_serve_imports_networkx_until_asked():
    import subprocess
    import sys

    code = ("import sys, parrot, parrot.cli.serve; print('networkx' in sys.modules); "
            "from tests.manager.dags import Dag; Dag().graph.to_networkx(); "
            "print('networkx' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.split() == ["False", "True"]
