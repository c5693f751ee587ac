"""The small shared vocabulary: performance criteria and call lifecycle states."""

from __future__ import annotations

import enum


class Criterion(str, enum.Enum):
    """The performance objective of a variable, and by deduction of the calls producing it."""

    LATENCY = "latency"
    THROUGHPUT = "throughput"

    @classmethod
    def parse(cls, value: object) -> "Criterion":
        from parrot.errors import InvalidRequestError

        try:
            return cls(str(value).lower())
        except ValueError:
            raise InvalidRequestError(
                f"unknown criteria {value!r}; allowed: {[c.value for c in cls]}") from None


class CallState(str, enum.Enum):
    """Lifecycle of one LLM call: PENDING → READY → RUNNING → DONE | FAILED."""

    PENDING = "pending"    # some input variable has no value yet
    READY = "ready"        # all inputs known, waiting for the policy to place it
    RUNNING = "running"    # placed on an engine
    DONE = "done"
    FAILED = "failed"

    @property
    def is_finished(self) -> bool:
        return self in (CallState.DONE, CallState.FAILED)
