"""FastChat's `shortest_queue` dispatch: each call to the engine with the least queue / speed.

No criteria, no capacity cap, no prefix affinity: the request-level baseline the paper beats.
Unlike FastChat, queue lengths come from the manager's own accounting, which is decremented when
calls finish (FastChat's controller never decremented them).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from parrot.policies.base import CallView, EngineView, Placement, Policy


class LeastQueuePolicy(Policy):
    name = "least_queue"

    def schedule(self, *, calls: Sequence[CallView],
                 engines: Sequence[EngineView]) -> list[Placement]:
        # A heap of (queue length / speed, engine order): O(log engines) per call; ties go to
        # the engine given first.
        heap = [(e.num_running_calls / e.speed, i, e.num_running_calls, e)
                for i, e in enumerate(engines) if e.is_healthy]
        heapq.heapify(heap)
        placements = []
        for call in calls:
            if not heap:
                break
            _, order, queue, engine = heap[0]
            placements.append(Placement(call.call_id, engine.engine_id))
            heapq.heapreplace(heap, ((queue + 1) / engine.speed, order, queue + 1, engine))
        return placements
