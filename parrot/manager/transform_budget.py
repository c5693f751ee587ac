"""How much of the manager's loop each tenant's transforms may take.

Transforms run on the manager's one loop (`Manager._make_ready` for inputs, the executor for
outputs). One call's transforms are bounded by its `TransformBudget` (characters read, seconds
spent). A single `set` can release thousands of waiting calls at once, though, each with its own
budget; so the budgets of one tenant's calls are drawn from a bucket of loop time per tenant,
refilled at `RATE` seconds per second up to `BURST` seconds: a tenant that keeps the loop busy
with transforms gets its calls failed with a TransformError, and other tenants' work (and the
heartbeats) keep their share of the loop.
"""

from __future__ import annotations

import time

from parrot.transforms import TRANSFORM_SECONDS_PER_CALL, TransformBudget

# A tenant's transforms may use the loop for BURST seconds at once and RATE of it on average.
BURST_S = 0.5
RATE = 0.25


class TenantTransformBuckets:
    def __init__(self, burst_s: float = BURST_S, rate: float = RATE) -> None:
        self._burst_s, self._rate = burst_s, rate
        self._level: dict[str, tuple[float, float]] = {}  # tenant -> (seconds left, as of)

    def _refilled(self, tenant: str) -> float:
        now = time.monotonic()
        level, since = self._level.get(tenant, (self._burst_s, now))
        return min(self._burst_s, level + (now - since) * self._rate)

    def budget(self, tenant: str) -> TransformBudget:
        """A budget for one call's transforms: the per-call one, or what the tenant has left
        when that is less (a budget of 0 s fails the call's first transform)."""
        return TransformBudget(seconds=max(0.0, min(TRANSFORM_SECONDS_PER_CALL,
                                                    self._refilled(tenant))))

    def spend(self, tenant: str, budget: TransformBudget) -> None:
        """Charge the tenant for the time `budget`'s transforms took."""
        level = self._refilled(tenant) - budget.elapsed_s
        self._level[tenant] = (level, time.monotonic())
        if len(self._level) > 4 * 65_536:  # tenants are few; forget the full buckets anyway
            self._level = {t: v for t, v in self._level.items() if v[0] < self._burst_s}
