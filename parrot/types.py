"""The small shared vocabulary: performance criteria and call lifecycle states."""

from __future__ import annotations

import enum

# The one token estimate used where no tokenizer is at hand: the manager's capacity accounting,
# the simulated engine's tokenizer and the workloads' chunking all count this way, so their
# numbers agree (real engines report exact counts themselves).
CHARS_PER_TOKEN = 4


def estimate_num_tokens(text: str) -> int:
    """Tokens in `text` estimated at CHARS_PER_TOKEN characters each, rounded up."""
    return -(-len(text) // CHARS_PER_TOKEN)


class Criterion(str, enum.Enum):
    """The performance objective of a variable, and by deduction of the calls producing it."""

    LATENCY = "latency"
    THROUGHPUT = "throughput"

    @classmethod
    def parse(cls, value: object) -> Criterion:
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
