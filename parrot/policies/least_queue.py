"""FastChat's `shortest_queue` dispatch: each call to the engine with the least queue / speed.

No criteria, no capacity cap, no prefix affinity: the request-level baseline the paper beats.
Unlike FastChat, queue lengths come from the manager's own accounting, which is decremented when
calls finish (FastChat's controller never decremented them).
"""

from __future__ import annotations

from typing import Sequence

from parrot.policies.base import CallView, EngineView, Placement, Policy


class LeastQueuePolicy(Policy):
    name = "least_queue"

    def schedule(self, *, calls: Sequence[CallView],
                 engines: Sequence[EngineView]) -> list[Placement]:
        healthy = [e for e in engines if e.is_healthy]
        if not healthy:
            return []
        queue = {e.engine_id: e.num_running_calls for e in healthy}
        speed = {e.engine_id: e.speed for e in healthy}
        placements = []
        for call in calls:
            # Ties go to the first engine in the given order (engine ids are sorted).
            engine_id = min(queue, key=lambda eid: queue[eid] / speed[eid])
            queue[engine_id] += 1
            placements.append(Placement(call.call_id, engine_id))
        return placements
