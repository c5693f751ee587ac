"""Throughput-centric baseline: the paper's FastChat dispatch with a large capacity.

Every call is throughput-oriented: engines may be filled up to a large token capacity (big
batches), and among the engines with room a call goes to the one with the shortest queue
(fewest running calls, then fewest tokens), as FastChat's controller dispatches — so it spreads
over the engines, like the paper's throughput-centric baseline (see capped.py for the rest).
It is not a packer: packing onto the fullest engine leaves engines idle and is weaker.
"""

from __future__ import annotations

from dataclasses import dataclass

from parrot.policies.capped import CappedParams, CappedPolicy


@dataclass(frozen=True)
class ThroughputCentricParams(CappedParams):
    policy_name = "throughput_centric"
    token_capacity: int = 32768


class ThroughputCentricPolicy(CappedPolicy):
    name = "throughput_centric"
    Params = ThroughputCentricParams

    @staticmethod
    def rank(load: int, num_calls: int) -> tuple[int, ...]:
        return (num_calls, load)  # FastChat's shortest queue, among engines with room
