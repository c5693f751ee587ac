"""Objective deduction: from the criteria of the variables a client `get`s, backwards over the DAG.

Rules (the paper, section 5.1):
* A call's *demand* is the strongest criterion among its outputs (LATENCY over THROUGHPUT);
  an output's criterion is its `get` seed if any, else the strongest demand of its consumers.
  So producers of latency variables and everything on the critical path before them are
  LATENCY, and everything upstream of a THROUGHPUT `get` only is THROUGHPUT.
* Parallel calls feeding a common consumer form a **task group**: the consumer can start only
  when the whole group is done, so the group is scheduled for group completion time — each
  member's criterion is THROUGHPUT even when the consumer is latency-critical. Calls before the
  group keep the demand (they are on the critical path).

`deduce(graph)` recomputes a session's calls in reverse topological order; the manager runs it
lazily, once per scheduling round, for sessions whose graph or `get`s changed, and only over the
calls that have not finished (finished calls keep the criterion they ran with), so the cost
follows the live part of the DAG, not the session's history.
"""

from __future__ import annotations

from parrot.core.graph import SessionGraph
from parrot.core.nodes import Call
from parrot.types import Criterion


def strongest(criteria: set[Criterion | None]) -> Criterion | None:
    if Criterion.LATENCY in criteria:
        return Criterion.LATENCY
    if Criterion.THROUGHPUT in criteria:
        return Criterion.THROUGHPUT
    return None


def deduce(graph: SessionGraph, *, active_only: bool = True) -> None:
    calls = graph.calls_in_topological_order(active_only=active_only)
    for call in calls:
        call.task_group, call.task_group_size = None, 1
    for call in reversed(calls):
        call.demand = strongest({graph.get_perf_obj(v.var_id)
                                 for v in graph.output_variables(call)})
        # The call's consumer (visited earlier) may have put it in a task group: a group is
        # waited for as a whole, so its members run for throughput even before any `get`.
        call.criterion = Criterion.THROUGHPUT if call.task_group is not None else call.demand
        _group_parallel_producers(graph, call, active_only)


def _group_parallel_producers(graph: SessionGraph, consumer: Call, active_only: bool) -> None:
    """Mark the consumer's independent input producers as one THROUGHPUT task group.

    Visited in reverse topological order, so each producer's demand is computed after this
    (its consumer's) criterion is known; a producer already grouped by a later consumer keeps
    that first group.
    """
    producers = [p for p in graph.input_producers(consumer)
                 if p.task_group is None and not (active_only and p.state.is_finished)]
    if len(producers) < 2:
        return
    # Only producers that do not depend on one another run in parallel.
    # A call can only be an ancestor of a call of higher topological rank, so equal ranks (the
    # common map-reduce case) need no path search.
    parallel = [p for p in producers
                if not any(q.topo_rank > p.topo_rank and graph.is_ancestor(p, q)
                           for q in producers)]
    if len(parallel) < 2:
        return
    group_id = f"tg-{consumer.call_id}"
    for producer in parallel:
        producer.task_group = group_id
        producer.task_group_size = len(parallel)

