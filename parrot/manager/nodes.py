"""The two kinds of node of a session's DAG: Semantic Variables and LLM calls."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from parrot.manager.prefix import PrefixPiece
from parrot.manager.streams import TextStream
from parrot.errors import ParrotError
from parrot.sampling import SamplingParams
from parrot.template import Template
from parrot.transforms import Transform
from parrot.types import CallState, Criterion
from parrot.wire_types.service import CallNode


def loop_time() -> float:
    """The running loop's clock (virtual in simulations); the monotonic clock outside a loop."""
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        return time.monotonic()


@dataclass(eq=False)
class Variable:
    """A Semantic Variable: a value some call produces (or the client sets) and others consume."""

    var_id: str
    session_id: str
    name: str
    value: str | None = None
    error: ParrotError | None = None
    producer: str | None = None               # call id, None for client-set variables
    # Tokens of the value as the engine generated them (None: set by the client, or changed
    # by an output transform): capacity estimates of the calls that read it use this count.
    num_tokens: int | None = None
    criterion: Criterion | None = None        # set by a `get` (seed of deduction)
    stream: TextStream = field(default_factory=TextStream)  # the value while it is generated
    # Set when it finishes; made only while someone waits (`wait_finished`): most variables
    # are never waited on (a chain's inner values), and one is made with every call.
    _finished: asyncio.Event | None = field(default=None, repr=False, compare=False)

    @property
    def is_ready(self) -> bool:
        return self.value is not None

    @property
    def is_finished(self) -> bool:
        return self.value is not None or self.error is not None

    async def wait_finished(self) -> None:
        """Until it has its value or its error (at once if it has)."""
        if self.is_finished:
            return
        if self._finished is None:
            self._finished = asyncio.Event()
        await self._finished.wait()

    def set_value(self, value: str, num_tokens: int | None = None) -> None:
        assert not self.is_finished, f"variable {self.var_id} set twice"
        self.value = value
        self.num_tokens = num_tokens
        self._wake()

    def fail(self, error: ParrotError) -> None:
        if self.is_finished:
            return
        self.error = error
        self._wake()

    def _wake(self) -> None:
        if self._finished is not None:
            self._finished.set()
        self.stream.notify()


@dataclass(frozen=True)
class InputBinding:
    name: str
    var_id: str
    transforms: tuple[Transform, ...] = ()


@dataclass(frozen=True)
class OutputBinding:
    name: str
    var_id: str
    sampling: SamplingParams
    transforms: tuple[Transform, ...] = ()
    # The output variable's stream (shared object): the executor pushes engine chunks into it.
    stream: TextStream = field(default_factory=TextStream, compare=False, repr=False)


class PromptChars:
    """The rendered prompt characters of a session's unfinished calls (a running total: each
    call adds its size when submitted, `lifecycle.transition` takes it off when it ends)."""

    __slots__ = ("chars",)

    def __init__(self) -> None:
        self.chars = 0


# Slots: a call has more fields than CPython keeps inline (30), so without them every call
# carried a dict of its own for the garbage collector to walk.
@dataclass(eq=False, slots=True, weakref_slot=True)
class Call:
    """One LLM call: a template, its bound inputs/outputs and its runtime state."""

    call_id: str
    session_id: str
    template: Template
    inputs: dict[str, InputBinding]           # by placeholder name
    outputs: dict[str, OutputBinding]         # by placeholder name, template order
    state: CallState = CallState.PENDING
    num_missing_inputs: int = 0
    criterion: Criterion | None = None        # what the scheduler honours
    demand: Criterion | None = None           # what downstream needs (before task grouping)
    task_group: str | None = None
    task_group_size: int = 1
    topo_rank: int = 0
    engine_id: str | None = None
    prefix_pieces: tuple[PrefixPiece, ...] = ()  # the prompt before the first output
    prefix_hashes: tuple[str, ...] = ()
    rendered_inputs: dict[str, str] = field(default_factory=dict)  # after input transforms
    num_tokens: int = 0                       # estimate for capacity accounting
    # Estimated output tokens, all outputs (core/output_lengths.py; set when it is ready):
    # what it is costed and counted with. None: not estimated, its max_tokens.
    num_output_estimate: int | None = None
    num_prompt_tokens: int | None = None      # the engine's count before the first output
    attempts: int = 0
    prefill_ahead_decided: bool = False  # at its first producer's dispatch (filled or not)
    arrival_seq: int = 0
    # The calls of its session that take one of its outputs as input (kept by SessionGraph).
    consumers: list[Call] = field(default_factory=list, repr=False, compare=False)
    error: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    # Kept by parrot.manager.lifecycle.transition (the only writer of `state`): when the call last
    # entered each state, and the seconds it has spent in each state it has left.
    state_entered: dict[CallState, float] = field(
        default_factory=lambda: {CallState.PENDING: loop_time()})
    state_seconds: dict[CallState, float] = field(default_factory=dict)
    # Its rendered prompt's characters (a lower bound until its inputs are known), counted in
    # its session's `PromptChars` while it is unfinished.
    prompt_chars: int = 0
    prompt_account: PromptChars | None = field(default=None, repr=False, compare=False)
    # Its session graph's log of calls to deduce again (dag.SessionGraph): the call enters it
    # when it finishes, since its groups and its producers' demand change without it.
    graph_changes: dict[str, None] | None = field(default=None, repr=False, compare=False)

    def account_prompt(self, chars: int) -> None:
        """Set its prompt's size, keeping its session's total in step."""
        if self.prompt_account is not None and not self.state.is_finished:
            self.prompt_account.chars += chars - self.prompt_chars
        self.prompt_chars = chars

    def mark(self, event: str, now: float) -> None:
        self.timings[event] = now

    @property
    def has_waiting_consumer(self) -> bool:
        """A consumer waits on this call's outputs alone: it becomes ready when this call
        finishes and takes its place (an application's next step). A consumer that also
        waits on other calls (a reduce on its maps) does not."""
        if self.state not in (CallState.PENDING, CallState.READY, CallState.RUNNING):
            return False   # its outputs are out (or failed): nobody waits on it any more
        outputs = {b.var_id for b in self.outputs.values()}
        return any(c.state is CallState.PENDING and 0 < c.num_missing_inputs
                   <= sum(b.var_id in outputs for b in c.inputs.values())
                   for c in self.consumers)

    @property
    def output_tokens_estimate(self) -> int:
        """The output tokens it is costed and counted with: the online estimate, or the
        outputs' max_tokens when it has none."""
        if self.num_output_estimate is not None:
            return self.num_output_estimate
        return sum(b.sampling.max_tokens for b in self.outputs.values())

    def output_length_key(self, name: str) -> tuple[str, str]:
        """Which function output's lengths estimate its output `name`: the template's."""
        return (self.template.source, name)

    def input_token_counts(self, variables: Mapping[str, Variable]) -> dict[str, int]:
        """The real token counts of the inputs a generation produced and that reach the
        prompt unchanged (no transforms): the engine counted them. One rule for the call's
        own prompt estimate and for its prefill ahead, so both cut the same contexts."""
        return {name: var.num_tokens for name, b in self.inputs.items()
                if not b.transforms and (var := variables[b.var_id]).num_tokens is not None}

    def to_node(self) -> CallNode:
        """This call as a node of the session graph's reply (`GET .../graph`)."""
        return CallNode(id=self.call_id, kind="call", prompt=self.template.source,
                        state=self.state.value,
                        criterion=self.criterion.value if self.criterion else None,
                        task_group=self.task_group, engine=self.engine_id,
                        prefix_hashes=tuple(self.prefix_hashes), timings=dict(self.timings),
                        state_seconds={s.value: t for s, t in self.state_seconds.items()},
                        error=self.error,
                        inputs={n: b.var_id for n, b in self.inputs.items()},
                        outputs={n: b.var_id for n, b in self.outputs.items()})
