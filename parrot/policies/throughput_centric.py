"""Throughput-centric baseline: every call is throughput-oriented.

Engines are filled up to a large token capacity, and a call goes to the *most*-loaded engine
that still has room, so batches grow as large as the capacity allows before another engine is
used (see capped.py for the rest).
"""

from __future__ import annotations

from dataclasses import dataclass

from parrot.policies.base import PolicyParams
from parrot.policies.capped import CappedPolicy
from parrot.policies.params import check_number


@dataclass(frozen=True)
class ThroughputCentricParams(PolicyParams):
    # Token load (sum of num_tokens of running calls) an engine may be filled to.
    token_capacity: int = 32768

    def __post_init__(self) -> None:
        check_number("throughput_centric", "token_capacity", self.token_capacity,
                     minimum=1, integer=True)


class ThroughputCentricPolicy(CappedPolicy):
    name = "throughput_centric"
    Params = ThroughputCentricParams
    params: ThroughputCentricParams

    @property
    def token_capacity(self) -> int:
        return self.params.token_capacity

    @staticmethod
    def rank(load: int, num_calls: int) -> tuple[int, ...]:
        return (-load,)  # pack: the fullest engine with room
