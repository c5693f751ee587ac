"""The engine protocol: Fill / Generate / FreeContext / stats (the paper's universal engine).

Its messages are wire messages (`parrot.wire_types.codec`, `EngineMessage`): one codec for
the manager's API and the engine protocol, `to_wire()` / `from_wire()` driven by the type
hints, errors naming the field. Requests are parsed strictly (an unknown field is an error);
the manager reads replies with `strict=False`, so an engine newer than its manager may add
fields.

Every engine — the builtin PyTorch runner, the simulated engine, an engine in another process
reached over HTTP — implements `Engine`. The manager only ever talks to this interface.

Contexts: a context is a KV-cache sequence named by `context_id` (a string chosen by the caller,
unique per engine). A Fill or Generate on a context that does not exist yet creates it; when
`parent_context_id` is given the new context forks the parent's KV cache (the parent's full
blocks are shared, never recomputed; its partial last block is copied). Forking from a context
that is still being filled waits for that fill to finish. Freeing a parent does not disturb its
children (blocks are reference counted).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import MISSING, dataclass, field, fields
from typing import Any
from collections.abc import AsyncIterator

from parrot.chat import ChatTemplate
from parrot.errors import InvalidRequestError
from parrot.speed_profile import SpeedProfile
from parrot.sampling import SamplingParams
from parrot.wire_types.codec import WireMessage


class EngineMessage(WireMessage):
    """A message of the engine protocol: every field written, null included, as
    docs/ENGINE_PROTOCOL.md shows them."""

    OMIT_NULLS = False

MAX_CONTEXT_ID_LEN = 256


def check_context_id(value: Any, name: str = "context_id", *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str) or not value or len(value) > MAX_CONTEXT_ID_LEN:
        raise InvalidRequestError(
            f"{name} must be a non-empty string of at most {MAX_CONTEXT_ID_LEN} characters, "
            f"got {value!r}")


# Scheduling classes of a request (lower is served first, as vLLM's `priority`): the manager
# sends LATENCY_PRIORITY for a call placed as latency-critical, THROUGHPUT_PRIORITY for one
# placed for throughput; requests of one priority keep their arrival order.
LATENCY_PRIORITY = 0
THROUGHPUT_PRIORITY = 1
MAX_PRIORITY = 1_000_000


def check_priority(value: Any) -> None:
    if (not isinstance(value, int) or isinstance(value, bool)
            or not -MAX_PRIORITY <= value <= MAX_PRIORITY):
        raise InvalidRequestError(
            f"priority must be an integer in [-{MAX_PRIORITY}, {MAX_PRIORITY}], got {value!r}")


@dataclass(frozen=True)
class FillRequest(EngineMessage):
    """Append tokens (or text, tokenized by the engine) to a context."""

    WIRE_NAME = "fill"

    context_id: str
    parent_context_id: str | None = None
    token_ids: tuple[int, ...] | None = None
    text: str | None = None
    priority: int = 0

    def __post_init__(self) -> None:
        check_context_id(self.context_id)
        check_context_id(self.parent_context_id, "parent_context_id", optional=True)
        check_priority(self.priority)
        if (self.token_ids is None) == (self.text is None):
            raise InvalidRequestError("fill needs exactly one of token_ids and text")
        if self.token_ids is not None and not all(
                isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in self.token_ids):
            raise InvalidRequestError("token_ids must be non-negative integers")
        if self.text is not None and not isinstance(self.text, str):
            raise InvalidRequestError("text must be a string")


@dataclass(frozen=True)
class FillResult(EngineMessage):
    context_id: str
    num_filled_tokens: int  # tokens this fill appended
    context_len: int        # tokens in the context now, inherited prefix included


@dataclass(frozen=True)
class GenerateRequest(EngineMessage):
    """Decode into a context until a stop condition; the generated tokens stay in the context."""

    WIRE_NAME = "generate"

    context_id: str
    parent_context_id: str | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    priority: int = 0

    def __post_init__(self) -> None:
        check_context_id(self.context_id)
        check_context_id(self.parent_context_id, "parent_context_id", optional=True)
        check_priority(self.priority)
        if not isinstance(self.sampling, SamplingParams):
            raise InvalidRequestError("sampling must be SamplingParams")


@dataclass(frozen=True)
class GenerateChunk(EngineMessage):
    """One streamed piece of a Generate. The last chunk has `finish_reason` set."""

    text: str
    token_ids: tuple[int, ...]
    finish_reason: str | None = None  # "length" | "stop" | "eos" when finished

    @property
    def is_finished(self) -> bool:
        return self.finish_reason is not None


@dataclass(frozen=True)
class GenerateResult(EngineMessage):
    text: str
    token_ids: tuple[int, ...]
    finish_reason: str


@dataclass(frozen=True)
class EngineStats(EngineMessage):
    """What an engine reports about itself (policies see it through EngineView). The fields
    with a default are counters added after the protocol's first version: an engine without
    them may leave them out (read as 0)."""

    num_running: int          # sequences in the running batch
    num_waiting: int          # requests queued inside the engine
    num_blocks_total: int     # KV blocks (simulated engines report their token budget / block)
    num_blocks_free: int
    block_size: int
    num_tokens_in_use: int    # tokens held by live contexts
    num_contexts: int
    # Decode steps that met a CUDA-graph bucket not captured at start-up and captured it while
    # serving (each stalls the engine for the capture), and the time spent: a warm engine's
    # numbers stay at 0. Optional on the wire (engines that have no graphs omit them).
    graph_captures_at_runtime: int = 0
    graph_capture_ms_at_runtime: int = 0
    # Cumulative work counters (0 where an engine does not count): model steps, the time
    # inside them and inside whole loop iterations (scheduling, the step, postprocessing:
    # loop_ms - step_ms is the engine's host time between steps), tokens prefilled and
    # decode tokens generated.
    num_steps: int = 0
    num_graph_steps: int = 0  # of num_steps, replayed from a CUDA graph (the rest: eager)
    step_ms: int = 0
    graph_step_ms: int = 0    # of step_ms, inside the steps replayed from a CUDA graph
    loop_ms: int = 0
    prefill_tokens: int = 0
    decode_tokens: int = 0
    # Decode steps served by a step launched ahead (the builtin engine's launch-ahead), and
    # launches ahead that went unused (a new request came, or a sampled row differed): a
    # high miss rate means launch-ahead costs GPU steps instead of hiding host time.
    ahead_hits: int = 0
    ahead_misses: int = 0
    # Of the steps not replayed whole from a graph (prefill, mixed), those whose layers ran as
    # piecewise CUDA graphs between eager attention calls, and the time inside them.
    num_piecewise_steps: int = 0
    piecewise_step_ms: int = 0
    # Decode steps replayed on a stopgap graph (a larger bucket captured at start-up) while
    # their own bucket was not captured: the capture they did not stall for.
    graph_stopgap_steps: int = 0
    # Pauses of the engine's process while serving that no step shape explains: Triton
    # compilations (a kernel specialisation the warm-up did not compile; a warm engine's stay
    # at 0) and garbage collections, with the time in each.
    jit_compiles_at_runtime: int = 0
    jit_compile_ms_at_runtime: int = 0
    gc_collections: int = 0
    gc_ms: int = 0
    # Time per output token as the engine delivered it: the finished Generates of two or more
    # tokens, and the sum of their (last token - first token) / (tokens - 1) in microseconds,
    # so that a window's mean TPOT is the difference of the sums over that of the counts.
    tpot_generates: int = 0
    tpot_us_sum: int = 0


# EngineStats' counters: the fields an engine may leave out of its JSON (read as 0), added after
# the protocol's first version.
OPTIONAL_STATS: tuple[str, ...] = tuple(f.name for f in fields(EngineStats)
                                        if f.default is not MISSING)


@dataclass(frozen=True)
class ServingLimits(EngineMessage):
    """What an engine chose to serve with (the builtin engine sizes these from its device's
    free memory and its model's shape: `max_num_seqs: auto` and friends), so an operator sees
    it in `GET /v1/engines` without reading the engine's log."""

    max_num_seqs: int           # sequences per step
    max_batch_tokens: int       # tokens per step
    kv_cache_tokens: int        # KV blocks x block size
    # decode-graph batch buckets (empty: no CUDA graphs)
    graph_batch_sizes: tuple[int, ...] = ()
    # how much prefill joins a step's decodes (the builtin engine's step_budget.describe)
    step_token_budget: str = ""


@dataclass(frozen=True)
class EngineInfo(EngineMessage):
    """Static facts about an engine, fetched once when it registers."""

    name: str
    kind: str                 # "builtin" | "simulated" | ...
    model: str
    max_context_len: int
    block_size: int
    num_blocks_total: int
    chat_template: ChatTemplate | None = None  # the model's; None: the manager uses ChatML
    # How fast it prefills and decodes, as the engine measured it (speed_probe.py: the builtin
    # engine's start-up probe) or, for a simulated engine, its latency model; None: it does
    # not say (a `profile` in its params, or the manager's default, is used then). The
    # manager costs placements with it and calibrates `latency_capacity: auto` from it.
    speed_profile: SpeedProfile | None = None
    serving: ServingLimits | None = None      # what it serves with; None: it does not say


class Engine(ABC):
    """The protocol every engine implements (in-process or over HTTP)."""

    # An engine in another process can die or freeze on its own: the manager heartbeats it.
    is_remote: bool = False
    # Loop time of the last answer of any kind from the engine (None: not tracked). A busy
    # manager may read a heartbeat late; answers to other requests still prove the engine lives.
    last_answer_at: float | None = None

    def abort_requests(self, reason: str) -> None:  # noqa: B027 - a no-op by default, on purpose
        """The manager declared this engine down: fail its in-flight requests now with
        EngineUnavailableError(reason) (an in-process engine has nothing to abort)."""

    @abstractmethod
    async def start(self) -> None:
        """Start background work (the batching loop); idempotent."""

    @abstractmethod
    async def close(self) -> None:
        """Stop background work; pending requests fail with EngineUnavailableError."""

    @abstractmethod
    async def info(self) -> EngineInfo: ...

    @abstractmethod
    async def fill(self, request: FillRequest) -> FillResult:
        """Append tokens/text to a context (creating/forking it). Returns once it is in KV."""

    @abstractmethod
    def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        """Stream the generated text; the last chunk carries finish_reason."""

    async def generate_all(self, request: GenerateRequest) -> GenerateResult:
        """Run a Generate to completion and return the whole text."""
        texts: list[str] = []
        token_ids: list[int] = []
        finish_reason = "length"
        async for chunk in self.generate(request):
            texts.append(chunk.text)
            token_ids.extend(chunk.token_ids)
            if chunk.finish_reason is not None:
                finish_reason = chunk.finish_reason
        return GenerateResult("".join(texts), tuple(token_ids), finish_reason)

    @abstractmethod
    async def free_context(self, context_id: str) -> None:
        """Drop a context; its blocks return to the pool when no other context shares them."""

    @abstractmethod
    async def stats(self) -> EngineStats: ...

    async def healthz(self) -> bool:
        return True
