"""What happens to the engines outside the scheduling step and changes what the manager must
do: an engine joined or answers again (placements may now succeed), or the last healthy engine
has been gone past its grace period (what waits for one fails). Engine health reports them as
typed events through one entry, `Manager.handle`, so the manager's reactions sit in one place
instead of in callbacks handed around."""

from __future__ import annotations

from dataclasses import dataclass

from parrot.errors import EngineUnavailableError


@dataclass(frozen=True)
class EngineUp:
    """An engine joined, re-registered or answers its heartbeat again."""

    engine_id: str


@dataclass(frozen=True)
class NoEngine:
    """No engine came back within the grace period after the last one went down."""

    error: EngineUnavailableError


HealthEvent = EngineUp | NoEngine
