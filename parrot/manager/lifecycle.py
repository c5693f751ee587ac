"""The call lifecycle: the legal moves between `CallState`s and the one function that makes them.

```
            last input published        placed by the policy        every output published
  PENDING ─────────────────────> READY ─────────────────────> RUNNING ─────────────────────> DONE
     │                            │  ^                           │
     │                            │  └── engine lost, retried ───┤
     │ input failed,              │ upstream failed,             │ engine/transform error,
     │ session deleted            │ session deleted              │ cancelled, retries spent
     └────────────────────────────┴──────────────────────────────┴─────────────────────> FAILED
```

Every change of `Call.state` goes through `transition`, so an impossible move (a DONE call
re-dispatched, a FAILED call made ready) is a loud `IllegalTransitionError` at the line that
tried it rather than a call stuck in a state no queue serves. The function also stamps the
time the call entered each state and accumulates the time it spent in each one (a retried call
enters READY and RUNNING more than once).
"""

from __future__ import annotations

from collections.abc import Mapping

from parrot.manager.nodes import Call, loop_time
from parrot.types import CallState

_P, _R, _X, _D, _F = (CallState.PENDING, CallState.READY, CallState.RUNNING, CallState.DONE,
                      CallState.FAILED)

LEGAL_MOVES: Mapping[CallState, frozenset[CallState]] = {
    _P: frozenset({_R, _F}),        # last input published / an input failed or session deleted
    _R: frozenset({_X, _F}),        # dispatched / failed upstream or session deleted
    _X: frozenset({_D, _F, _R}),    # finished / failed or cancelled / engine lost: re-dispatch
    _D: frozenset(),
    _F: frozenset(),
}


class IllegalTransitionError(RuntimeError):
    """A call was asked to move between two states the lifecycle does not connect (a bug)."""

    def __init__(self, call_id: str, current: CallState, target: CallState) -> None:
        allowed = sorted(s.value for s in LEGAL_MOVES[current])
        super().__init__(f"call {call_id}: illegal move {current.value} -> {target.value} "
                         f"(allowed from {current.value}: {allowed or 'none, it is final'})")
        self.call_id, self.current, self.target = call_id, current, target


def is_legal(current: CallState, target: CallState) -> bool:
    return target in LEGAL_MOVES[current]


# The call timings (`Call.timings`, shown in the graph and the benchmarks) that entering a
# state sets.
_TIMING_OF_STATE = {CallState.READY: "ready", CallState.RUNNING: "dispatched"}


def transition(call: Call, target: CallState, now: float | None = None) -> None:
    """Move `call` to `target`, or raise IllegalTransitionError leaving the call unchanged.

    Records `call.state_entered[target] = now`, adds the time spent in the state it leaves
    to `call.state_seconds`, and marks the call's `ready` / `dispatched` timings on entering
    READY / RUNNING (every entry: a call re-queued after its engine failed is ready again
    from then on). A call that finishes enters its session graph's log of changes, which
    deduction reads.
    """
    current = call.state
    if target not in LEGAL_MOVES[current]:   # is_legal, inlined: three moves per call
        raise IllegalTransitionError(call.call_id, current, target)
    if now is None:
        now = loop_time()
    entered = call.state_entered.get(current)
    if entered is not None:
        call.state_seconds[current] = call.state_seconds.get(current, 0.0) + (now - entered)
    call.state = target
    call.state_entered[target] = now
    if target.is_finished:
        if call.prompt_account is not None:
            call.prompt_account.chars -= call.prompt_chars  # its session's total, as it ends
            call.prompt_account = None
        if call.graph_changes is not None:  # deduction looks at its neighbours again
            call.graph_changes[call.call_id] = None
    event = _TIMING_OF_STATE.get(target)
    if event is not None:
        call.mark(event, now)
