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

import asyncio
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any
from collections.abc import AsyncIterator, Mapping

from parrot.chat import ChatTemplate
from parrot.engines.counters import COUNTER_NAMES, check_counter_names
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


def check_prompt(token_ids: Any, text: Any, op: str, *, optional: bool) -> None:
    """A Fill's tokens (or text), or a Generate's optional prompt: at most one of the two (a
    Fill exactly one), token ids non-negative integers."""
    if token_ids is not None and text is not None:
        raise InvalidRequestError(f"{op} takes at most one of token_ids and text")
    if token_ids is None and text is None and not optional:
        raise InvalidRequestError(f"{op} needs exactly one of token_ids and text")
    if token_ids is not None and not all(
            isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in token_ids):
        raise InvalidRequestError("token_ids must be non-negative integers")
    if text is not None and not isinstance(text, str):
        raise InvalidRequestError("text must be a string")


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
        check_prompt(self.token_ids, self.text, "fill", optional=False)


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
    # A prompt appended first, as a Fill of it would (at most one of the two): a Fill and a
    # Generate in one request, so the step that computes the prompt's last token samples the
    # first generated one (a Fill leaves that token for the Generate's first step) and the
    # caller waits for one answer, not two. Only for an engine whose info says
    # `takes_prompt_in_generate`; the first chunk then carries `prompt_len`.
    token_ids: tuple[int, ...] | None = None
    text: str | None = None

    def __post_init__(self) -> None:
        check_context_id(self.context_id)
        check_context_id(self.parent_context_id, "parent_context_id", optional=True)
        check_priority(self.priority)
        if not isinstance(self.sampling, SamplingParams):
            raise InvalidRequestError("sampling must be SamplingParams")
        check_prompt(self.token_ids, self.text, "generate", optional=True)

    @property
    def has_prompt(self) -> bool:
        return self.token_ids is not None or self.text is not None

    def prompt_fill(self) -> FillRequest:
        """The Fill its prompt stands for: an engine whose Fill costs no model step (an
        adapter that sends the whole text with the Generate) runs it, then generates."""
        return FillRequest(self.context_id, self.parent_context_id, self.token_ids, self.text,
                           self.priority)


@dataclass(frozen=True)
class GenerateChunk(EngineMessage):
    """One streamed piece of a Generate. The last chunk has `finish_reason` set."""

    text: str
    token_ids: tuple[int, ...]
    finish_reason: str | None = None  # "length" | "stop" | "eos" when finished
    # The first chunk of a Generate that carried a prompt: the context's length after the
    # prompt, before the first generated token (a Fill's `context_len`); null otherwise.
    prompt_len: int | None = None

    @property
    def is_finished(self) -> bool:
        return self.finish_reason is not None


@dataclass(frozen=True)
class GenerateResult(EngineMessage):
    text: str
    token_ids: tuple[int, ...]
    finish_reason: str
    prompt_len: int | None = None   # as the first chunk's
    # Seconds from the engine taking the Generate to its first token, as the engine measured
    # them (null: not measured): the first token's time of a Generate answered whole.
    first_token_s: float | None = None


@dataclass(frozen=True)
class EngineStats(EngineMessage):
    """What an engine reports about itself (policies see it through EngineView): the state a
    policy needs, and the engine's cumulative counters as one mapping (parrot/engines/
    counters.py names them), so an engine kind reports the counters it keeps without the
    protocol growing a field per counter."""

    num_running: int          # sequences in the running batch
    num_waiting: int          # requests queued inside the engine
    num_blocks_total: int     # KV blocks (simulated engines report their token budget / block)
    num_blocks_free: int
    block_size: int
    num_tokens_in_use: int    # tokens held by live contexts
    num_contexts: int
    # counter name -> cumulative value since the engine started (absent: not counted); built
    # with counters.engine_counters, read with counter()
    counters: Mapping[str, int] = field(default_factory=dict)

    def counter(self, name: str) -> int:
        """The counter `name` (0 where the engine does not count it); a name that is not one
        of counters.COUNTER_NAMES is a ValueError, so a misspelt name cannot read as 0."""
        check_counter_names((name,))
        return self.counters.get(name, 0)

    @classmethod
    def from_wire(cls, data: object, path: str = "", *, strict: bool = True) -> EngineStats:
        """Also reads the form before `counters`, where each counter was a field of its own:
        an engine older than its manager keeps its counters on /metrics."""
        if isinstance(data, Mapping) and "counters" not in data:
            flat = {k: data[k] for k in COUNTER_NAMES if k in data}
            if flat:
                data = {**{k: v for k, v in data.items() if k not in flat}, "counters": flat}
        return super().from_wire(data, path, strict=strict)


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
    # It takes a prompt in a Generate (GenerateRequest.token_ids / text); an engine that does
    # not say so is sent a Fill and then a Generate, as before the field existed.
    takes_prompt_in_generate: bool = False


async def collect_generate(chunks: AsyncIterator[GenerateChunk]) -> GenerateResult:
    """A Generate's chunks, read to the end, as its whole result (`Engine.generate_all`),
    with the time its first chunk took (the loop's clock: virtual in a simulation)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    texts: list[str] = []
    token_ids: list[int] = []
    finish_reason = "length"
    prompt_len = None
    first_token_s = None
    async for chunk in chunks:
        if not texts:
            prompt_len, first_token_s = chunk.prompt_len, loop.time() - started
        texts.append(chunk.text)
        token_ids.extend(chunk.token_ids)
        if chunk.finish_reason is not None:
            finish_reason = chunk.finish_reason
    return GenerateResult("".join(texts), tuple(token_ids), finish_reason, prompt_len,
                          first_token_s)


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
        return await collect_generate(self.generate(request))

    async def fill_prompt(self, request: GenerateRequest) -> int | None:
        """The prompt a Generate carries, run as the Fill it stands for (`prompt_fill`):
        the context's length after it, for the first chunk's `prompt_len`; None when it
        carries none. For an engine whose Fill costs no model step (an adapter that sends the
        whole text with the Generate anyway): it says `takes_prompt_in_generate` and calls
        this first."""
        if not request.has_prompt:
            return None
        return (await self.fill(request.prompt_fill())).context_len

    @abstractmethod
    async def free_context(self, context_id: str) -> None:
        """Drop a context; its blocks return to the pool when no other context shares them."""

    @abstractmethod
    async def stats(self) -> EngineStats: ...

    async def reset_prefix_cache(self) -> int:
        """Forget the engine's automatic prefix cache (as vLLM's `reset_prefix_cache`): no
        later request reuses what an earlier one computed, while every live context keeps
        its KV. A benchmark calls it between runs, so that no run starts with what the one
        before it cached. How many cached blocks were forgotten (0: none, no cache, or an
        engine that does not say: vLLM's)."""
        return 0

    async def healthz(self) -> bool:
        return True
