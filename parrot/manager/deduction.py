"""Objective deduction: from the criteria of the variables a client `get`s, backwards over the DAG.

Rules (the paper, section 5.1), each pinned by a test in tests/manager/test_deduction.py:

* **Demand.** A call's *demand* is what its outputs are needed for: the strongest of the `get`
  seeds on its outputs and its consumers' demands (LATENCY over THROUGHPUT). A call nobody
  asked about, directly or downstream, has no demand, no criterion and no task group: the
  policy's default applies until a `get` arrives.
* **Task group.** Producers of one consumer that have a demand, are not finished and sit at the
  same depth (topological rank) run in parallel, and the consumer starts only when all of them
  are done: they form a task group, scheduled for group completion time, i.e. THROUGHPUT, even
  when the consumer is latency-critical. Producers at different depths are not grouped (the
  deeper chain is the critical path; a lone producer at a depth gets the consumer's demand).
  Equal ranks also mean no path between the producers, so no path search is needed.
* **Latency wins.** A producer that is latency-critical on its own — its own output has a
  LATENCY `get`, or it alone (the only producer at its depth) gates a latency-critical
  consumer — stays LATENCY and leaves every task group. A group left with one member
  dissolves: that member alone gates the consumer and gets the consumer's demand, which may in
  turn take it out of another group.
* Calls upstream of a group keep the demand (they are on the critical path before it).

`deduce(graph)` visits the calls level by level (topological rank), deepest first, so every
consumer of a level is final before the level is decided. Its cost is linear in the calls and
edges it visits. Only calls that have not finished are deduced (finished calls keep the
criterion they ran with).

`deduce_changed(graph)` is what the manager runs, lazily, once per scheduling round for each
session whose graph or `get`s changed: the same result as `deduce(graph)`, computed only where
it can differ. A call's outcome depends on its outputs' seeds, its live consumers' demands and,
at its depth, the other live producers it shares a consumer with (its groups); so the calls the
graph logged as changed (added, re-ranked, finished, newly seeded) mark themselves, their
producers and their co-producers, each marked call is decided again with every producer its
groups can reach at its depth, and a call whose demand changed marks its producers in turn,
deepest level first. A round costs what changed (4,096 independent calls of one session: each
round deduces the calls it added, not all the session's live calls).
"""

from __future__ import annotations

import heapq
from itertools import groupby

from parrot.manager.dag import SessionGraph
from parrot.manager.nodes import Call
from parrot.types import Criterion, strongest

__all__ = ["deduce", "deduce_changed", "strongest"]


def deduce(graph: SessionGraph, *, active_only: bool = True) -> int:
    """Deduce every live call (`active_only`) or every call of the graph; how many it
    deduced. A whole-graph pass counts finished consumers, so the next `deduce_changed` redoes
    the live calls."""
    calls = graph.calls_in_topological_order(active_only=active_only)
    graph.take_changes()
    graph.needs_full_deduction = not active_only
    for _, level in groupby(reversed(calls), key=lambda c: c.topo_rank):
        level_calls = list(level)
        _deduce_level(level_calls, {id(p): _consumers(graph, p, finished_too=not active_only)
                                    for p in level_calls}, graph)
    return len(calls)


def deduce_changed(graph: SessionGraph) -> int:
    """What `deduce(graph)` would decide, for the calls whose outcome can have changed since
    the last deduction (see the module docstring); how many calls it deduced."""
    if graph.needs_full_deduction:
        return deduce(graph)
    marked: dict[int, dict[Call, None]] = {}   # rank -> live calls to decide again
    ranks: list[int] = []                       # a max-heap (negated) of marked ranks

    def mark(call: Call) -> None:
        if call.state.is_finished:
            return
        level = marked.get(call.topo_rank)
        if level is None:
            level = marked[call.topo_rank] = {}
            heapq.heappush(ranks, -call.topo_rank)
        level[call] = None

    for call in graph.take_changes():
        mark(call)
        for producer in graph.input_producers(call):
            mark(producer)   # a consumer joined, left, finished or moved
        for consumer in call.consumers:
            for co_producer in graph.input_producers(consumer):
                mark(co_producer)   # a group it shares with `call` changed
    deduced = 0
    while ranks:
        rank = -heapq.heappop(ranks)
        level, consumers = _level_groups_of(graph, list(marked.pop(rank)), rank)
        demands = [call.demand for call in level]
        _deduce_level(level, consumers, graph)
        deduced += len(level)
        for call, before in zip(level, demands):
            if call.demand is not before:
                for producer in graph.input_producers(call):
                    mark(producer)   # lower ranks: decided after this one
    return deduced


def _level_groups_of(graph: SessionGraph, calls: list[Call], rank: int
                     ) -> tuple[list[Call], dict[int, list[Call]]]:
    """`calls` and every live producer at `rank` that shares a live consumer with one of them,
    transitively: the part of the level whose groups they can be in; and the live consumers of
    each (by id), which the level's decision reads again."""
    level = list(calls)
    consumers: dict[int, list[Call]] = {}
    seen = {id(c) for c in calls}
    stack = list(calls)
    while stack:
        call = stack.pop()
        consumers[id(call)] = mine = _consumers(graph, call, finished_too=False)
        for consumer in mine:
            for producer in graph.input_producers(consumer):
                if (id(producer) not in seen and producer.topo_rank == rank
                        and not producer.state.is_finished):
                    seen.add(id(producer))
                    level.append(producer)
                    stack.append(producer)
    return level, consumers


def _consumers(graph: SessionGraph, call: Call, *, finished_too: bool) -> list[Call]:
    """The call's consumers that are being deduced now, each once, in a stable order."""
    seen: dict[int, Call] = {}
    for binding in call.outputs.values():
        for consumer in graph.get_consumers(binding.var_id):
            if finished_too or not consumer.state.is_finished:
                seen.setdefault(id(consumer), consumer)
    return list(seen.values())


def _deduce_level(level: list[Call], consumers: dict[int, list[Call]],
                  graph: SessionGraph) -> None:
    """Decide demand, task group and criterion for calls of one rank (consumers are final);
    `level` may be part of a rank, closed under sharing a consumer; `consumers`: each call's
    consumers being deduced now, by id."""
    if len(level) == 1:   # a chain's step: no group has two members, all it gates it gates alone
        _deduce_alone(level[0], consumers[id(level[0])], graph)
        return
    by_id = {id(c): c for p in level for c in consumers[id(p)]}
    # Candidate groups: per consumer with a demand, its producers on this level (by id).
    candidates: dict[int, dict[int, Call]] = {}
    for producer in level:
        for consumer in consumers[id(producer)]:
            if consumer.demand is not None:
                candidates.setdefault(id(consumer), {})[id(producer)] = producer
    groups = {cid: members for cid, members in candidates.items() if len(members) >= 2}
    # `alone`: what the call needs without any group: its own gets and the consumers it gates
    # alone at this depth.
    alone: dict[int, Criterion | None] = {}
    for producer in level:
        seeds = [v.criterion for v in graph.output_variables(producer)]
        demands = [c.demand for c in consumers[id(producer)]]
        gated = [c.demand for c in consumers[id(producer)] if id(c) not in groups]
        producer.demand = strongest([*seeds, *demands])
        alone[id(producer)] = strongest([*seeds, *gated])
    _leave_groups_when_latency_critical(groups, by_id, alone)
    for producer in level:
        group_of = next((id(c) for c in consumers[id(producer)]
                         if id(producer) in groups.get(id(c), ())), None)
        if group_of is None:
            producer.task_group, producer.task_group_size = None, 1
            producer.criterion = alone[id(producer)]
            continue
        producer.task_group = _group_id(by_id[group_of], producer.topo_rank)
        producer.task_group_size = len(groups[group_of])
        producer.criterion = Criterion.THROUGHPUT


def _deduce_alone(producer: Call, consumers: list[Call], graph: SessionGraph) -> None:
    """`_deduce_level` of a level of one call: what it needs is its demand."""
    producer.demand = producer.criterion = strongest(
        [*(v.criterion for v in graph.output_variables(producer)),
         *(c.demand for c in consumers)])
    producer.task_group, producer.task_group_size = None, 1


def _leave_groups_when_latency_critical(groups: dict[int, dict[int, Call]],
                                        by_id: dict[int, Call],
                                        alone: dict[int, Criterion | None]) -> None:
    """Take LATENCY-critical members out of their groups, dissolving groups left with one
    member (whose consumer's demand then applies to it alone), until nothing changes. A call
    turns LATENCY at most once and leaves each group at most once: linear in the memberships."""
    groups_of: dict[int, list[int]] = {}
    for cid, members in groups.items():
        for member_id in members:
            groups_of.setdefault(member_id, []).append(cid)
    worklist = [mid for mid in groups_of if alone[mid] is Criterion.LATENCY]
    while worklist:
        leaving = worklist.pop()
        for cid in groups_of.get(leaving, ()):
            group = groups.get(cid)
            if group is None or group.pop(leaving, None) is None or len(group) >= 2:
                continue
            del groups[cid]
            for last in group:  # it alone gates the consumer now
                before = alone[last]
                alone[last] = strongest([before, by_id[cid].demand])
                if alone[last] is Criterion.LATENCY and before is not Criterion.LATENCY:
                    worklist.append(last)


def _group_id(consumer: Call, rank: int) -> str:
    """`tg-<consumer>` for the producers right before it (the usual case); the rank is added
    for a group deeper upstream, so two depths feeding one consumer never share an id."""
    if rank == consumer.topo_rank - 1:
        return f"tg-{consumer.call_id}"
    return f"tg-{consumer.call_id}-r{rank}"
