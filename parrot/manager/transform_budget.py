"""User transforms, run off the manager's loop, within each tenant's share of transform time.

A call's transforms (`CallFlow.make_ready` for inputs, the executor's sink for outputs) run in a
small worker pool (`TRANSFORM_WORKERS` threads, one per process), never on the loop: a regex
search releases the GIL while it matches, so however long a tenant's searches take, the loop
(other tenants' work, the heartbeats, `/healthz`) keeps running. One call's transforms are
bounded by its `TransformBudget` (characters read, seconds spent, counted from when its worker
starts it). A single `set` can release thousands of waiting calls at once, though, each with its
own budget; so the budgets of one tenant's calls are drawn from a bucket per tenant, refilled at
`RATE` seconds per second up to `BURST` seconds: a tenant that keeps the workers busy gets its
calls failed with a TransformError, and other tenants keep their share of the workers.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from parrot.transforms import TRANSFORM_SECONDS_PER_CALL, TransformBudget, apply_transforms

# A tenant's transforms may use a worker for BURST seconds at once and RATE of one on average.
BURST_S = 0.5
RATE = 0.25
# Transforms of all tenants share this many threads (the process's, whatever the managers).
TRANSFORM_WORKERS = 2

_POOL = ThreadPoolExecutor(TRANSFORM_WORKERS, thread_name_prefix="parrot-transforms")

# name -> (the placeholder's transforms, its value)
TransformJobs = dict[str, tuple[tuple[Any, ...], str]]


class TenantTransformBuckets:
    def __init__(self, burst_s: float = BURST_S, rate: float = RATE) -> None:
        self._burst_s, self._rate = burst_s, rate
        self._level: dict[str, tuple[float, float]] = {}  # tenant -> (seconds left, as of)
        self._lock = threading.Lock()  # the workers draw and spend concurrently

    def _refilled(self, tenant: str) -> float:
        now = time.monotonic()
        level, since = self._level.get(tenant, (self._burst_s, now))
        return min(self._burst_s, level + (now - since) * self._rate)

    def budget(self, tenant: str) -> TransformBudget:
        """A budget for one call's transforms: the per-call one, or what the tenant has left
        when that is less (a budget of 0 s fails the call's first transform)."""
        with self._lock:
            return TransformBudget(seconds=max(0.0, min(TRANSFORM_SECONDS_PER_CALL,
                                                        self._refilled(tenant))))

    def spend(self, tenant: str, budget: TransformBudget) -> None:
        """Charge the tenant for the time `budget`'s transforms took."""
        with self._lock:
            level = self._refilled(tenant) - budget.elapsed_s
            self._level[tenant] = (level, time.monotonic())
            if len(self._level) > 4 * 65_536:  # tenants are few; forget the full buckets anyway
                self._level = {t: v for t, v in self._level.items() if v[0] < self._burst_s}

    def run(self, tenant: str, jobs: TransformJobs) -> dict[str, str]:
        """Each value through its transforms, all within one budget drawn from the tenant's
        bucket (a TransformError fails the call). Blocking: `apply` runs it in a worker."""
        budget = self.budget(tenant)
        try:
            return {name: apply_transforms(transforms, value, budget)
                    for name, (transforms, value) in jobs.items()}
        finally:
            self.spend(tenant, budget)

    async def apply(self, tenant: str, jobs: TransformJobs) -> dict[str, str]:
        """`run` in a worker thread, awaited on the loop."""
        return await asyncio.get_running_loop().run_in_executor(_POOL, self.run, tenant, jobs)
