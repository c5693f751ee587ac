"""Throughput-centric baseline: every call is throughput-oriented.

Engines are filled up to a large token capacity, and a call goes to the *most*-loaded engine
that still has room, so batches grow as large as the capacity allows before another engine is
used. No task groups, no prefix affinity. A call that fits nowhere waits, except that an idle
engine always takes one call (so a call larger than the capacity still runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from parrot.policies.base import CallView, EngineView, Placement, Policy, PolicyParams
from parrot.policies.params import check_number


@dataclass(frozen=True)
class ThroughputCentricParams(PolicyParams):
    # Token load (sum of num_tokens of running calls) an engine may be filled to.
    token_capacity: int = 32768

    def __post_init__(self) -> None:
        check_number("throughput_centric", "token_capacity", self.token_capacity,
                     minimum=1, integer=True)


class ThroughputCentricPolicy(Policy):
    name = "throughput_centric"
    Params = ThroughputCentricParams
    params: ThroughputCentricParams

    def schedule(self, *, calls: Sequence[CallView],
                 engines: Sequence[EngineView]) -> list[Placement]:
        healthy = [e for e in engines if e.is_healthy]
        load = {e.engine_id: e.num_tokens_in_use for e in healthy}
        num_calls = {e.engine_id: e.num_running_calls for e in healthy}
        placements = []
        for call in calls:
            fitting = [eid for eid in load
                       if load[eid] + call.num_tokens <= self.params.token_capacity]
            # Pack: the fullest engine with room; ties to the first engine given.
            engine_id = min(fitting, key=lambda eid: -load[eid], default=None)
            if engine_id is None:
                engine_id = next((eid for eid in load if num_calls[eid] == 0), None)
            if engine_id is None:
                continue
            load[engine_id] += call.num_tokens
            num_calls[engine_id] += 1
            placements.append(Placement(call.call_id, engine_id))
        return placements
