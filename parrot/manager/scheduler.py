"""The ready queue and one scheduling decision: ready calls → views → policy.schedule() →
placements checked. `Manager.step()` carries the decision out; the scheduler calls nothing back.

Event-driven: anything that can change a decision (a call becomes ready, a call finishes, an
engine joins or recovers, a `get` changes criteria) calls `wake()`; the manager's loop then
runs one step for everything that happened meanwhile (`wait()`). No polling.

A policy is code the manager does not trust: its placements are checked (placement_check.py)
before anything changes, so a bad round leaves every call queued. A round whose policy raises
or returns an invalid placement is a *policy failure*; the round is retried after
`POLICY_RETRY_DELAY_S`, and after `MAX_POLICY_FAILURES` failures in a row the calls offered in
the last one are handed back as failed with a `SchedulingFailedError` (their `get`s answer at
once, not at their timeout). Any good round resets the count.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from collections.abc import Callable, Iterable

from parrot.manager.engine_pool import EnginePool, EngineState, prefix_num_tokens
from parrot.manager.nodes import Call
from parrot.manager.placement_check import InvalidPlacementError, check_placements
from parrot.errors import SchedulingFailedError
from parrot.policies.base import CallView, Policy
from parrot.types import CallState, Criterion

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class Dispatch:
    """A checked placement: `call` goes to `engine` under `criterion` (None: its own)."""

    call: Call
    engine: EngineState
    criterion: Criterion | None


@dataclass(frozen=True)
class Decision:
    """One round's outcome: the calls to dispatch now, and the calls a policy that kept
    failing was offered (they leave the queue and fail with `error`)."""

    dispatches: list[Dispatch] = field(default_factory=list)
    failed: list[Call] = field(default_factory=list)
    error: SchedulingFailedError | None = None

# Policy failures in a row (rounds that raised or placed invalidly) after which the calls the
# policy was offered fail. A few, so a transient fault (an engine view changing under a buggy
# policy) is retried, yet a broken policy fails its callers in about a second, not at their
# `get` timeout.
MAX_POLICY_FAILURES = 3
# A failed round is retried this long after it, even if nothing wakes the scheduler.
POLICY_RETRY_DELAY_S = 0.2
# Coalescing: a round's cost is mostly per round (a view and a slot of every engine, the
# policy's pass over them), not per call, and under load calls become ready in every turn of
# the loop (a request parsed, a chain's output published, a call finishing), each waking the
# scheduler. A round run at the first wake places one or two calls and the next turn's calls
# need a round of their own. So after a wake the scheduler lets the loop take more turns while
# each brings another wake, up to COALESCE_TURNS turns and `coalesce_s` of the loop's clock
# (manager.round_coalesce_ms, 5 ms by default: a call's placement waits at most that, against
# the 10-50 ms of an engine step it then waits for anyway); a wake followed by a quiet turn
# runs the round one turn later. Measured with bench_manager's HTTP workloads on the 2-core
# VM (docs/BENCH_MANAGER.md): with 16 engines submit + get 1,751-1,807 -> 2,379-2,380 calls/s
# and chains in one submit_batch 4,030-4,151 -> 4,289-4,305 (4 turns did less, 16 no more;
# a 2-ms bound less than 5). On a simulation's virtual clock the turns take no time: a round
# there takes what became ready at the same instant.
COALESCE_TURNS = 8


class Scheduler:
    def __init__(self, policy: Policy, pool: EnginePool, *, coalesce_s: float = 0.0) -> None:
        """coalesce_s: how long a round may wait for more work (`wait`, from
        manager.round_coalesce_ms)."""
        self.policy = policy
        self.coalesce_s = coalesce_s
        self._pool = pool
        self.num_policy_failures = 0  # consecutive; reset by any good round
        self._ready: dict[str, Call] = {}
        self._sizes: dict[str, _Sizes] = {}  # per ready call, computed once when it is queued
        self._wakeup = asyncio.Event()
        # (seconds spent deciding, calls placed) per round, for benchmarks and /v1/stats.
        self.round_stats: deque[tuple[float, int]] = deque(maxlen=100_000)
        self.round_observers: list[Callable[[float, int], None]] = []  # e.g. /metrics

    @property
    def num_ready(self) -> int:
        return len(self._ready)

    def ready_calls(self) -> list[Call]:
        """The calls waiting for a placement (a copy; for metrics)."""
        return list(self._ready.values())

    def enqueue(self, call: Call) -> None:
        assert call.state is CallState.READY
        self._ready[call.call_id] = call
        self._sizes[call.call_id] = _Sizes.of(call)
        self.wake()

    def discard(self, call: Call) -> None:
        self._ready.pop(call.call_id, None)
        self._sizes.pop(call.call_id, None)

    def wake(self) -> None:
        self._wakeup.set()

    async def wait(self) -> None:
        """Until something woke the scheduler since the last wait; then, while each turn of
        the loop brings another wake, up to COALESCE_TURNS more turns within `coalesce_s`,
        so that one round takes what was already under way (see COALESCE_TURNS)."""
        await self._wakeup.wait()
        if self.coalesce_s > 0:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.coalesce_s
            for _ in range(COALESCE_TURNS):
                self._wakeup.clear()
                await asyncio.sleep(0)
                if not self._wakeup.is_set() or loop.time() >= deadline:
                    break
        self._wakeup.clear()

    @property
    def has_work(self) -> bool:
        return bool(self._ready) and len(self._pool) > 0

    def decide(self) -> Decision:
        """Ask the policy where the ready calls go and check its answer; the placed calls
        leave the queue. Nothing is dispatched here."""
        started = time.perf_counter()
        calls = ready_order(self._ready.values())
        views = self._call_views(calls)
        try:
            placements = self.policy.schedule(calls=views, engines=self._pool.views())
            checked = check_placements(placements, self._ready, self._pool)
        except Exception as exc:  # noqa: BLE001 - a policy bug fails its calls, not the manager
            return self._policy_failed(calls, exc)
        self.num_policy_failures = 0
        dispatches = []
        for placement in checked:
            call = self._ready.pop(placement.call_id)
            self._sizes.pop(placement.call_id)
            dispatches.append(Dispatch(call, self._pool.get(placement.engine_id),
                                       placement.criterion))
        seconds = time.perf_counter() - started
        self.round_stats.append((seconds, len(checked)))
        for observe in self.round_observers:
            observe(seconds, len(checked))
        return Decision(dispatches)

    def _policy_failed(self, calls: list[Call], exc: Exception) -> Decision:
        self.num_policy_failures += 1
        what = str(exc) if isinstance(exc, InvalidPlacementError) else f"raised {exc!r}"
        log.error("policy %s failed (%d in a row): %s; its %d ready calls stay queued",
                  self.policy.name, self.num_policy_failures, what, len(calls),
                  exc_info=not isinstance(exc, InvalidPlacementError))
        if self.num_policy_failures < MAX_POLICY_FAILURES:
            asyncio.get_running_loop().call_later(POLICY_RETRY_DELAY_S, self.wake)
            return Decision()
        self.num_policy_failures = 0
        for call in calls:
            self.discard(call)
        return Decision(failed=calls, error=SchedulingFailedError(
            f"policy {self.policy.name!r} failed {MAX_POLICY_FAILURES} scheduling rounds in a "
            f"row (last: {what})"))

    def _call_views(self, calls: list[Call]) -> list[CallView]:
        # SharedReqsInQueue: how many queued calls have each prefix (a round-local hash → count
        # over the queue; running calls are placed already). A call's shared prefix is its
        # deepest one another queued call also has.
        counts = Counter(h for call in calls for h in call.prefix_hashes)
        views = []
        for call in calls:
            sizes = self._sizes[call.call_id]
            shared = next((h for h in reversed(call.prefix_hashes) if counts[h] > 1), None)
            views.append(CallView(
                call_id=call.call_id, session_id=call.session_id, criterion=call.criterion,
                task_group=call.task_group, task_group_size=call.task_group_size,
                prefix_hashes=call.prefix_hashes, num_tokens=call.num_tokens,
                topo_rank=call.topo_rank, arrival_seq=call.arrival_seq,
                num_output_tokens=sizes.num_output_tokens,
                prefix_num_tokens=sizes.prefix_num_tokens, shared_prefix=shared,
                has_waiting_consumer=call.has_waiting_consumer, demand=call.demand))
        return views


def ready_order(calls: Iterable[Call]) -> list[Call]:
    """The order ready calls are offered to the policy: submission order.

    An application submits its DAG up front, so this is first-come first-served per
    application — a long chain keeps its place ahead of traffic that arrived after it. (Ready
    calls never depend on each other, so any order among them is topological. Measured
    alternatives lost: ordering by readiness queued every chain step behind the chat backlog
    (0.15x on chain + chat), and ordering by DAG depth starved late chain steps.)
    """
    return sorted(calls, key=lambda c: c.arrival_seq)


@dataclass(frozen=True)
class _Sizes:
    """A ready call's token estimates that do not change while it waits."""

    num_output_tokens: int
    prefix_num_tokens: tuple[int, ...]   # estimated prompt tokens up to each prefix hash

    @classmethod
    def of(cls, call: Call) -> _Sizes:
        return cls(min(call.output_tokens_estimate, call.num_tokens), prefix_num_tokens(call))
