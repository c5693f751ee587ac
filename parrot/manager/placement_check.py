"""Checking a policy's placements before the scheduler acts on any of them.

A policy is trusted with decisions, not with the manager's state: one bad placement (an engine
that does not exist or is down, a call it was not offered, a call placed twice, a criterion that
is not one) rejects the whole round, so nothing is popped from the ready queue or dispatched
half-way. The scheduler counts the rejection as a policy failure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from parrot.manager.engine_pool import EnginePool
from parrot.manager.nodes import Call
from parrot.errors import NotFoundError
from parrot.policies.base import Placement
from parrot.types import Criterion


class InvalidPlacementError(Exception):
    """A policy returned a placement the manager cannot carry out (a policy bug)."""


def check_placements(placements: object, offered: Mapping[str, Call],
                     pool: EnginePool) -> list[Placement]:
    """`placements` as a list when every one is valid; else InvalidPlacementError naming the
    first bad one. `offered`: the ready calls the policy was shown, by id."""
    if not isinstance(placements, Sequence):
        raise InvalidPlacementError(f"schedule() returned {type(placements).__name__}, "
                                    "not a list of Placement")
    seen: set[str] = set()
    for placement in placements:
        if not isinstance(placement, Placement):
            raise InvalidPlacementError(f"{placement!r} is not a Placement")
        if placement.call_id not in offered:
            raise InvalidPlacementError(f"call {placement.call_id!r} was not offered")
        if placement.call_id in seen:
            raise InvalidPlacementError(f"call {placement.call_id!r} placed twice")
        seen.add(placement.call_id)
        try:
            engine = pool.get(placement.engine_id)
        except NotFoundError:
            raise InvalidPlacementError(f"call {placement.call_id!r} placed on unknown engine "
                                        f"{placement.engine_id!r}") from None
        if not engine.is_healthy:
            raise InvalidPlacementError(f"call {placement.call_id!r} placed on engine "
                                        f"{placement.engine_id!r}, which is down")
        if placement.criterion is not None and not isinstance(placement.criterion, Criterion):
            raise InvalidPlacementError(f"call {placement.call_id!r} placed with criterion "
                                        f"{placement.criterion!r}, not a Criterion")
    return list(placements)
