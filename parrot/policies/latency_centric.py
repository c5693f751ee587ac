"""Latency-centric baseline: every call is latency-sensitive.

Each engine is capped at a small token capacity (the paper's baselines use 4096–6144 tokens to
keep decode fast), and a call goes to the least-loaded engine that still has room (see
capped.py for the rest).
"""

from __future__ import annotations

from dataclasses import dataclass

from parrot.policies.base import PolicyParams
from parrot.policies.capped import CappedPolicy
from parrot.policies.params import check_number


@dataclass(frozen=True)
class LatencyCentricParams(PolicyParams):
    # Token load (sum of num_tokens of running calls) an engine may carry; same for all engines.
    token_capacity: int = 4096

    def __post_init__(self) -> None:
        check_number("latency_centric", "token_capacity", self.token_capacity,
                     minimum=1, integer=True)


class LatencyCentricPolicy(CappedPolicy):
    name = "latency_centric"
    Params = LatencyCentricParams
    params: LatencyCentricParams

    @property
    def token_capacity(self) -> int:
        return self.params.token_capacity

    @staticmethod
    def rank(load: int, num_calls: int) -> tuple[int, ...]:
        return (load, num_calls)  # spread: least tokens first, then fewest calls
