"""A session's dataflow DAG: variable → consuming call → produced variable.

Node ids are the variables' and calls' ids (`v-…`, `r-…`). The paper's primitives are
`get_producer`, `get_consumers` and `get_perf_obj`. The graph is kept as adjacency dicts (a
submit adds a few nodes and edges, and every per-call operation touches only those);
`to_networkx()` gives it as a networkx DiGraph for analysis, and the reply of `GET .../graph`
is networkx's node-link form.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from parrot.manager.nodes import Call, Variable
from parrot.errors import ConflictError
from parrot.types import Criterion, strongest
from parrot.wire_types.service import CallNode, Graph, GraphLink, VariableNode

if TYPE_CHECKING:
    import networkx as nx



class SessionGraph:
    def __init__(self) -> None:
        # Nodes in insertion order (the node-link JSON lists them so), each node's successors
        # in the order their edges were added.
        self._nodes: dict[str, Variable | Call] = {}
        self._variables: dict[str, Variable] = {}
        self._successors: dict[str, dict[str, None]] = {}
        # The executor asks for producers and consumers on every value, deduction every round.
        self._producer: dict[str, Call] = {}
        self._consumers: dict[str, list[Call]] = {}
        self._calls: list[Call] = []
        # Each call's input producers (`input_producers`; deduction asks every round), here
        # rather than on the call: a consumer referring to its producers would close a
        # reference cycle with Call.consumers.
        self._input_producers: dict[str, list[Call]] = {}
        self._active: list[Call] = []  # calls not finished yet (compacted lazily)
        # What deduction must look at again (deduction.deduce_changed takes it): calls added,
        # re-ranked, finished (lifecycle.transition logs those through Call.graph_changes),
        # or whose output got a new `get` seed. An insertion-ordered set of call ids: ids, not
        # calls, so that a call and the log hold no reference cycle (a deleted session's calls
        # are freed by reference counting, without waiting for a full garbage collection).
        self._changed: dict[str, None] = {}
        # A deduction over the whole graph (finished calls included) set the live calls'
        # objectives from finished consumers: the next incremental one redoes every live call.
        self.needs_full_deduction = False

    # --- building -----------------------------------------------------------------------------

    def add_variable(self, var: Variable) -> None:
        self._add_node(var.var_id, var)
        self._variables[var.var_id] = var

    def _add_node(self, node_id: str, obj: Variable | Call) -> None:
        self._nodes[node_id] = obj
        self._successors.setdefault(node_id, {})

    def check_acyclic(self, input_ids: list[str], output_ids: list[str]) -> None:
        """Raise ConflictError if a call reading `input_ids` and writing `output_ids` (existing
        variables) would close a cycle, i.e. if an output already flows into an input.

        One search from all the outputs at once, pruned by the topological ranks kept on every
        insert: a call that can reach an input's producer has a rank at most that producer's,
        so nothing ranked above the highest input producer is visited. The cost is one pass over
        the part of the DAG between the outputs and the inputs, never outputs × inputs paths.
        """
        inputs = set(input_ids)
        for out_id in output_ids:
            if out_id in inputs:
                raise ConflictError(f"variable {out_id} is both an input and an output of "
                                    "the call (a cycle)")
        limit = max((p.topo_rank for i in inputs if (p := self._producer.get(i)) is not None),
                    default=None)
        if limit is None:
            return  # no input is produced by a call: nothing can flow into them
        origin = {out_id: out_id for out_id in output_ids}  # reached variable -> its output
        stack = list(output_ids)
        visited: set[str] = set()
        while stack:
            var_id = stack.pop()
            for consumer in self._consumers.get(var_id, ()):
                if consumer.topo_rank > limit or consumer.call_id in visited:
                    continue
                visited.add(consumer.call_id)
                for binding in consumer.outputs.values():
                    if binding.var_id in inputs:
                        raise ConflictError(
                            f"output {origin[var_id]} already flows into input "
                            f"{binding.var_id}: the call would close a cycle")
                    if binding.var_id not in origin:
                        origin[binding.var_id] = origin[var_id]
                        stack.append(binding.var_id)

    def add_call(self, call: Call) -> None:
        """Insert a checked call (see `check_acyclic`) with its edges."""
        input_ids = {b.var_id for b in call.inputs.values()}
        output_ids = [b.var_id for b in call.outputs.values()]
        self._add_node(call.call_id, call)
        for in_id in input_ids:
            self._successors.setdefault(in_id, {})[call.call_id] = None
            self._consumers.setdefault(in_id, []).append(call)
        for out_id in output_ids:
            self._successors[call.call_id][out_id] = None
            self._producer[out_id] = call
        self._calls.append(call)
        self._active.append(call)
        self._changed[call.call_id] = None
        call.graph_changes = self._changed
        producers = self._input_producers[call.call_id] = self._producers_of(call)
        call.topo_rank = 1 + max((p.topo_rank for p in producers), default=-1)
        self._raise_downstream_ranks(call)
        # Call.consumers and the input producers, whichever of producer and consumer was
        # submitted first.
        for producer in producers:
            if call not in producer.consumers:
                producer.consumers.append(call)
        for out_id in output_ids:
            for consumer in self._consumers.get(out_id, ()):
                if consumer not in call.consumers:
                    call.consumers.append(consumer)
                # (a client-made variable it consumed gets a producer now: in input order)
                self._input_producers[consumer.call_id] = self._producers_of(consumer)

    def _raise_downstream_ranks(self, call: Call) -> None:
        """Keep rank(consumer) > rank(producer): an output bound to a variable that already has
        consumers (created by the client, consumed, and only then given a producer) pushes
        those consumers' ranks up."""
        stack = [call]
        while stack:
            producer = stack.pop()
            for var_id in (b.var_id for b in producer.outputs.values()):
                for consumer in self._consumers.get(var_id, ()):
                    if consumer.topo_rank <= producer.topo_rank:
                        consumer.topo_rank = producer.topo_rank + 1
                        self._changed[consumer.call_id] = None
                        stack.append(consumer)

    # --- what changed since the last deduction --------------------------------------------------

    def note_seed(self, var_id: str) -> None:
        """A `get` changed the seed objective of `var_id`: its producer is deduced again."""
        producer = self._producer.get(var_id)
        if producer is not None:
            self._changed[producer.call_id] = None

    def take_changes(self) -> list[Call]:
        """The calls logged as changed since the last call of this (the log is emptied; the
        dict object stays, as each call holds it)."""
        changed = [node for call_id in self._changed
                   if isinstance(node := self._nodes[call_id], Call)]
        self._changed.clear()
        return changed

    # --- the paper's primitives ----------------------------------------------------------------

    def get_producer(self, var_id: str) -> Call | None:
        return self._producer.get(var_id)

    def get_consumers(self, var_id: str) -> list[Call]:
        return self._consumers.get(var_id, [])

    def get_perf_obj(self, var_id: str) -> Criterion | None:
        """The deduced criterion of a variable: the strongest of a `get`'s seed and what its
        consumers demand (a LATENCY consumer outranks a THROUGHPUT `get`)."""
        var = self._variables[var_id]
        return strongest({var.criterion, *(c.demand for c in self.get_consumers(var_id))})

    # --- traversal ---------------------------------------------------------------------------

    def input_producers(self, call: Call) -> list[Call]:
        """The calls producing `call`'s inputs, each once, in the order of its inputs (kept
        here as calls are added: read, never changed, by the caller)."""
        return self._input_producers[call.call_id]

    def _producers_of(self, call: Call) -> list[Call]:
        producers = (self._producer.get(b.var_id) for b in call.inputs.values())
        seen: dict[str, Call] = {}
        for p in producers:
            if p is not None:
                seen.setdefault(p.call_id, p)
        return list(seen.values())

    def output_variables(self, call: Call) -> list[Variable]:
        variables = self._variables
        return [variables[b.var_id] for b in call.outputs.values()]

    def calls_in_topological_order(self, *, active_only: bool = False) -> list[Call]:
        """Calls sorted by topological rank (a producer's rank is below its consumers').

        With `active_only`, only calls that have not finished: the ones whose criteria can
        still matter to the scheduler. Everything upstream of an active call is either active
        or done, so the active calls form a closed suffix for deduction.
        """
        if active_only:
            self._active = [c for c in self._active if not c.state.is_finished]
            return sorted(self._active, key=lambda c: c.topo_rank)
        return sorted(self._calls, key=lambda c: c.topo_rank)

    def __contains__(self, node_id: str) -> bool:
        return node_id in self._nodes

    # --- introspection -----------------------------------------------------------------------

    def to_node_link(self) -> Graph:
        """The graph's reply (networkx's node-link form): nodes as added, then each node's
        edges in the order they were added."""
        nodes: list[CallNode | VariableNode] = []
        for node_id, obj in self._nodes.items():
            if isinstance(obj, Call):
                nodes.append(obj.to_node())
            else:
                criterion = self.get_perf_obj(node_id)
                nodes.append(VariableNode(
                    id=node_id, kind="variable", name=obj.name, ready=obj.is_ready,
                    criterion=None if criterion is None else criterion.value,
                    error=None if obj.error is None else str(obj.error)))
        links = tuple(GraphLink(source=u, target=v)
                      for u, successors in self._successors.items() for v in successors)
        return Graph(directed=True, multigraph=False, nodes=tuple(nodes), links=links)

    def to_networkx(self) -> nx.DiGraph:
        """The DAG as a networkx DiGraph (each node's object under "obj"), for analysis and
        tools; the manager's own per-call work reads the adjacency dicts above. networkx is
        imported here, on the first use: importing it costs ~0.2 s, which every `import
        parrot` (a client program) and every parrot-serve start would otherwise pay."""
        import networkx as nx

        graph = nx.DiGraph()
        for node_id, obj in self._nodes.items():
            graph.add_node(node_id, obj=obj)
        graph.add_edges_from((u, v) for u, successors in self._successors.items()
                             for v in successors)
        return graph
