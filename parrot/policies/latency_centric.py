"""Latency-centric baseline: every call is latency-sensitive.

Each engine is capped at a small token capacity (the paper's baselines use 4096–6144 tokens to
keep decode fast), and a call goes to the least-loaded engine that still has room (see
capped.py for the rest).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from parrot.policies.capped import CappedParams, CappedPolicy


@dataclass(frozen=True)
class LatencyCentricParams(CappedParams):
    policy_name = "latency_centric"
    token_capacity: int | Literal["auto"] | None = 4096


class LatencyCentricPolicy(CappedPolicy):
    name = "latency_centric"
    Params = LatencyCentricParams

    @staticmethod
    def rank(load: int, num_calls: int) -> tuple[int, ...]:
        return (load, num_calls)  # spread: least tokens first, then fewest calls
