"""A user's own scheduling policy, loaded by path instead of by a built-in name.

Select it in the manager's YAML (with the repository root, or wherever this file lives, on
`sys.path`):

    policy:
      name: examples.custom_policy:RoundRobinPolicy
      params: {skip_unhealthy: true}

A policy only sees the read-only `CallView`/`EngineView` snapshots and returns `Placement`s;
calls it leaves out stay queued for the next round.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Sequence

from parrot.policies import CallView, EngineView, Placement, Policy, PolicyConfigError, PolicyParams


@dataclass(frozen=True)
class RoundRobinParams(PolicyParams):
    # Leave engines the manager marks unhealthy out of the rotation.
    skip_unhealthy: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.skip_unhealthy, bool):
            raise PolicyConfigError("round_robin.skip_unhealthy",
                                    f"{self.skip_unhealthy!r} is not valid", "true or false")


class RoundRobinPolicy(Policy):
    """Every ready call to the next engine in turn, ignoring load, criteria and prefixes."""

    name = "round_robin"
    Params = RoundRobinParams
    params: RoundRobinParams

    def __init__(self, params: RoundRobinParams | None = None) -> None:
        super().__init__(params)
        self._turn = 0  # survives across rounds: the rotation continues where it stopped

    def schedule(self, *, calls: Sequence[CallView],
                 engines: Sequence[EngineView]) -> list[Placement]:
        usable = [e for e in engines if e.is_healthy or not self.params.skip_unhealthy]
        if not usable:
            return []
        placements = []
        for call in calls:
            engine = usable[self._turn % len(usable)]
            self._turn += 1
            placements.append(Placement(call.call_id, engine.engine_id))
        return placements
