"""Throughput-centric baseline: the paper's FastChat dispatch with a large capacity.

Every call is throughput-oriented: engines may be filled up to their throughput capacity (big
batches; the same headroom app_centric gives throughput work), and among the engines with room
a call goes to the one with the shortest queue (fewest running calls, then fewest tokens), as
FastChat's controller dispatches — so it spreads over the engines, like the paper's
throughput-centric baseline (see capped.py for the rest). It is not a packer: packing onto
the fullest engine leaves engines idle and is weaker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from parrot.policies.capped import CappedParams, CappedPolicy


@dataclass(frozen=True)
class ThroughputCentricParams(CappedParams):
    policy_name = "throughput_centric"
    # None: each engine's own throughput capacity (the same memory headroom app_centric's
    # throughput calls get), an integer: that cap on every engine.
    token_capacity: int | Literal["auto"] | None = None


class ThroughputCentricPolicy(CappedPolicy):
    name = "throughput_centric"
    Params = ThroughputCentricParams

    @staticmethod
    def rank(load: int, num_calls: int) -> tuple[int, ...]:
        return (num_calls, load)  # FastChat's shortest queue, among engines with room
