"""Admission control: bounded work per session, per tenant (where its quota is configured) and
in all, answered with 429 + Retry-After.

The manager keeps a session's finished calls (its graph), so "how many calls are unfinished" is
tracked here: weak sets of the calls admitted and not yet seen finished. A set is pruned of
finished calls only when it looks full, and at most once per `retry_after_s` when pruning freed
nothing — so a flood of rejected requests costs O(1) each, not a scan of every call.
Weak references: a deleted session's calls vanish from these sets with it.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Mapping

from parrot.manager.nodes import Call
from parrot.manager.sessions import Session
from parrot.errors import TooManyRequestsError


class _ActiveCalls:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._calls: weakref.WeakSet[Call] = weakref.WeakSet()
        self._next_prune = 0.0

    def has_room(self, num_new: int, prune_interval_s: float) -> bool:
        if len(self._calls) + num_new <= self.limit:
            return True
        now = time.monotonic()
        if now >= self._next_prune:
            for call in list(self._calls):
                if call.state.is_finished:
                    self._calls.discard(call)
            if len(self._calls) + num_new > self.limit:
                self._next_prune = now + prune_interval_s
        return len(self._calls) + num_new <= self.limit

    def add(self, call: Call) -> None:
        if not call.state.is_finished:
            self._calls.add(call)


class Admission:
    def __init__(self, max_total: int, max_per_session: int, retry_after_s: float,
                 tenant_quotas: Mapping[str, int] | None = None) -> None:
        self._total = _ActiveCalls(max_total)
        self._per_session: weakref.WeakKeyDictionary[Session, _ActiveCalls] = \
            weakref.WeakKeyDictionary()
        self._max_per_session = max_per_session
        # Tenant name -> its unfinished calls; only tenants with a quota (TenantSpec).
        self._per_tenant = {name: _ActiveCalls(limit)
                            for name, limit in (tenant_quotas or {}).items()}
        self.retry_after_s = retry_after_s

    def check(self, session: Session | None, num_calls: int, tenant: str | None = None) -> None:
        """Raise TooManyRequestsError unless `num_calls` more calls of `session` fit (None: the
        first calls of a session not opened yet, which they would open for `tenant`)."""
        mine = (_ActiveCalls(self._max_per_session) if session is None
                else self._calls_of(session))
        if not mine.has_room(num_calls, self.retry_after_s):
            raise TooManyRequestsError(
                f"this session has {mine.limit} unfinished calls (the limit); wait for some "
                "to finish", self.retry_after_s)
        tenant = session.tenant if session is not None else tenant
        quota = self._per_tenant.get(tenant) if tenant is not None else None
        if quota is not None and not quota.has_room(num_calls, self.retry_after_s):
            raise TooManyRequestsError(
                f"tenant {tenant!r} has {quota.limit} unfinished calls (its max_active_calls); "
                "wait for some to finish", self.retry_after_s)
        if not self._total.has_room(num_calls, self.retry_after_s):
            raise TooManyRequestsError(
                f"the service has {self._total.limit} unfinished calls (the limit); retry later",
                self.retry_after_s)

    def admitted(self, session: Session, call: Call) -> None:
        self._total.add(call)
        self._calls_of(session).add(call)
        if (quota := self._per_tenant.get(session.tenant)) is not None:
            quota.add(call)

    def _calls_of(self, session: Session) -> _ActiveCalls:
        mine = self._per_session.get(session)
        if mine is None:
            mine = self._per_session[session] = _ActiveCalls(self._max_per_session)
        return mine


# A request that submits many calls (a 4,096-call batch, 256 prompts x n=16) does so in slices
# of at most this many calls and SLICE_S seconds, yielding the loop between them: one request
# must not hold every other session (and the engines' heartbeats) for the seconds all its calls
# take to submit. The time bound keeps a slice short on a busy host too, where a count alone
# would not.
CALLS_PER_SLICE = 64
SLICE_S = 0.01


class Slices:
    """Paces a loop over many calls: `await slices.next()` before each call yields the loop
    once the current slice holds CALLS_PER_SLICE calls or has run SLICE_S seconds, and says
    whether it did (what the caller checked may have changed meanwhile). Seconds of the loop's
    clock: on a simulation's virtual clock they stand still, and the slices stay by count,
    the same in every run."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._count = 0
        self._started = self._loop.time()

    async def next(self) -> bool:
        self._count += 1
        if self._count <= CALLS_PER_SLICE and self._loop.time() - self._started < SLICE_S:
            return False
        await asyncio.sleep(0)
        self._count, self._started = 1, self._loop.time()
        return True
