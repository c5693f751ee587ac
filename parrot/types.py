"""The small shared vocabulary: performance criteria, call lifecycle states, engine kinds.

Every layer may import it (the engines too: it imports nothing of the project at load time)."""

from __future__ import annotations

import enum
from collections.abc import Iterable

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
        # A wire name as it is sent ("latency"): one dict lookup (every output's criteria and
        # every get parse one; the Enum call costs several times that).
        member = _CRITERIA_BY_NAME.get(value) if type(value) is str else None
        if member is not None:
            return member
        try:
            return cls(str(value).lower())
        except ValueError:
            # imported here, on the error path only: a get parses a criterion every time
            from parrot.errors import InvalidRequestError

            raise InvalidRequestError(
                f"unknown criteria {value!r}; allowed: {[c.value for c in cls]}") from None


_CRITERIA_BY_NAME = {c.value: c for c in Criterion}


def strongest(criteria: Iterable[Criterion | None]) -> Criterion | None:
    """LATENCY over THROUGHPUT over nothing asked: how gets of one value (and the demands
    deduction propagates) combine, on the client and in the service alike."""
    found = set(criteria)
    if Criterion.LATENCY in found:
        return Criterion.LATENCY
    if Criterion.THROUGHPUT in found:
        return Criterion.THROUGHPUT
    return None


class CallState(str, enum.Enum):
    """Lifecycle of one LLM call: PENDING → READY → RUNNING → DONE | FAILED."""

    PENDING = "pending"    # some input variable has no value yet
    READY = "ready"        # all inputs known, waiting for the policy to place it
    RUNNING = "running"    # placed on an engine
    DONE = "done"
    FAILED = "failed"

    # DONE or FAILED: a plain attribute of each member (set below), not a property: deduction
    # and the scheduler ask it of every call they look at.
    is_finished: bool


for _state in CallState:
    _state.is_finished = _state in (CallState.DONE, CallState.FAILED)


class EngineKind(str, enum.Enum):
    """How an engine is built (`engines/factory.py`) and named in a serve config's `kind:`."""

    SIMULATED = "simulated"  # the simulated engine (latency model, no model weights)
    BUILTIN = "builtin"      # our PyTorch engine
    REMOTE = "remote"        # an engine process reached by URL
    OPENAI = "openai"        # any OpenAI-compatible server
    VLLM = "vllm"            # vLLM's async engine in the process

    def __str__(self) -> str:  # "builtin", not "EngineKind.BUILTIN", in messages and argv
        return self.value

    @property
    def runs_in_engine_process(self) -> bool:
        """Whether `parrot-engine --kind` can serve it (a remote engine is already a server)."""
        return self is not EngineKind.REMOTE
