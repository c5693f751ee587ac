"""The shared loop of the two capacity-capped baselines (latency_centric, throughput_centric).

Every engine carries at most `token_capacity` tokens of running calls (None: each engine's own
throughput capacity, its share of its KV cache; "auto": each engine's latency capacity, the
cap app_centric's latency work gets, so a baseline compared with app_centric is calibrated by
the same rule on every profile); each call goes to the
engine with room that the subclass ranks best; a call that fits nowhere waits, except that an
idle engine always takes one call (so a call larger than the cap still runs). No task groups,
no prefix affinity, no criteria: that is what makes them baselines.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

from parrot.errors import PolicyConfigError
from parrot.policies.base import CallView, EngineView, Placement, Policy, PolicyParams
from parrot.validation import Checks, is_int


AUTO_CAPACITY = "auto"


@dataclass(frozen=True)
class CappedParams(PolicyParams):
    """A subclass sets `policy_name` (for errors) and the capacity's default."""

    policy_name: ClassVar[str]
    # Token load (sum of num_tokens of running calls) an engine may carry: the same for all
    # engines, None for each engine's `throughput_capacity`, or "auto" for each engine's
    # `latency_capacity` (configured, or calibrated from its measured speed profile).
    token_capacity: int | Literal["auto"] | None

    def __post_init__(self) -> None:
        cap, check = self.token_capacity, Checks(self.policy_name, PolicyConfigError)
        if is_int(cap):
            check.positive_int("token_capacity", cap)
        else:
            check.require(cap is None or cap == AUTO_CAPACITY, "token_capacity", cap,
                          'integer >= 1, "auto" or null')


class CappedPolicy(Policy):
    """A subclass sets `name`, `Params` (a CappedParams) and `rank`."""

    params: CappedParams

    def token_capacity(self, engine: EngineView) -> int:
        cap = self.params.token_capacity
        if cap is None:
            return engine.throughput_capacity
        return engine.latency_capacity if isinstance(cap, str) else cap  # str: "auto"

    @staticmethod
    @abstractmethod
    def rank(load: int, num_calls: int) -> tuple[int, ...]:
        """Sort key of an engine with room (smallest first); ties go to the engine given first."""

    def schedule(self, *, calls: Sequence[CallView],
                 engines: Sequence[EngineView]) -> list[Placement]:
        healthy = [e for e in engines if e.is_healthy]
        load = {e.engine_id: e.num_tokens_in_use for e in healthy}
        capacity = {e.engine_id: self.token_capacity(e) for e in healthy}
        num_calls = {e.engine_id: e.num_running_calls for e in healthy}
        placements = []
        for call in calls:
            fitting = [eid for eid in load
                       if load[eid] + call.num_tokens <= capacity[eid]]
            engine_id = min(fitting, key=lambda eid: self.rank(load[eid], num_calls[eid]),
                            default=None)
            if engine_id is None:
                engine_id = next((eid for eid in load if num_calls[eid] == 0), None)
            if engine_id is None:
                continue
            load[engine_id] += call.num_tokens
            num_calls[engine_id] += 1
            placements.append(Placement(call.call_id, engine_id))
        return placements
