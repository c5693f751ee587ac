"""The wire API's other messages: errors, sessions, health, variables and get, engines, stats,
the session graph."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from parrot.errors import InvalidRequestError, ParrotError, error_from_wire
from parrot.types import Criterion
from parrot.wire_types.codec import WireMessage, check, check_session_id, check_value


# --- errors ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ErrorDetail(WireMessage):
    type: str             # the exception class: InvalidRequestError, NotFoundError, ...
    message: str


@dataclass(frozen=True)
class ErrorReply(WireMessage):
    """Every Parrot error: `{"error": {"type", "message"}}` with a 4xx/5xx status."""

    error: ErrorDetail

    @classmethod
    def of(cls, exc: ParrotError) -> ErrorReply:
        return cls(ErrorDetail(type(exc).__name__, str(exc)))

    def to_exception(self, status: int) -> ParrotError:
        """The typed error again, on the client's side of the wire."""
        return error_from_wire(self.to_wire(), status)


# --- sessions and health -----------------------------------------------------------------------

@dataclass(frozen=True)
class Health(WireMessage):
    status: Literal["ok", "degraded"]
    engines: int
    healthy_engines: int


@dataclass(frozen=True)
class SessionCreated(WireMessage):
    session_id: str
    token: str            # send as `Authorization: Bearer <token>` on the session's routes


@dataclass(frozen=True)
class SessionDeleted(WireMessage):
    deleted: str


@dataclass(frozen=True)
class SessionStats(WireMessage):
    """A session's own counters (shown only to its token)."""

    session_id: str
    tenant: str
    calls: Mapping[str, int]       # call state -> number of calls
    variables: int
    waiting_gets: int


# --- engines and stats -------------------------------------------------------------------------

@dataclass(frozen=True)
class EngineServing(WireMessage):
    """What an engine serves with, as it reports it (`EngineInfo.serving`): for the builtin
    engine, sized from its device's free memory and model shape unless configured."""

    max_num_seqs: int
    max_batch_tokens: int
    kv_cache_tokens: int
    graph_batch_sizes: tuple[int, ...] = ()
    step_token_budget: str = ""


@dataclass(frozen=True)
class EngineDescription(WireMessage):
    """An engine as the manager sees it. Load and prefix-cache counters are the admin's only
    (a tenant watching another's cache hits could confirm a guess of its prompt): `public()`
    leaves them out."""

    name: str
    kind: str
    model: str
    healthy: bool
    latency_capacity: int
    throughput_capacity: int
    running_calls: int | None = None
    tokens_in_use: int | None = None
    calls_done: int | None = None
    cached_prefixes: int | None = None
    prefix_hits: int | None = None
    prefix_misses: int | None = None
    # Where the speed profile the manager costs it with came from: "configured" (its params),
    # "measured" (reported by the engine), "default" (the paper's A100 figures).
    profile_source: str | None = None
    serving: EngineServing | None = None    # None: the engine does not say

    def public(self) -> EngineDescription:
        return EngineDescription(self.name, self.kind, self.model, self.healthy,
                                 self.latency_capacity, self.throughput_capacity,
                                 profile_source=self.profile_source, serving=self.serving)


@dataclass(frozen=True)
class EngineList(WireMessage):
    engines: tuple[EngineDescription, ...]


@dataclass(frozen=True)
class RegisterEngineRequest(WireMessage):
    """`POST /v1/engines`: an engine process joining by URL (the admin token when one is
    configured). A capacity or speed left out takes the manager's default; `latency_capacity`
    "auto" (the default) is calibrated from the speed profile the engine reports
    (docs/POLICIES.md); `secret` is the engine's own, sent on the manager's requests to it."""

    WIRE_NAME = "register"
    name: str
    url: str
    latency_capacity: int | Literal["auto"] | None = None
    throughput_capacity: int | None = None
    speed: float | None = None
    secret: str | None = None

    def __post_init__(self) -> None:
        check(self.secret is None or bool(self.secret), "'secret' must be a non-empty string")

    def spec_fields(self) -> dict[str, Any]:
        """The fields given, by EngineSpec's names."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name != "secret" and getattr(self, f.name) is not None}


@dataclass(frozen=True)
class Registered(WireMessage):
    registered: str


@dataclass(frozen=True)
class Stats(WireMessage):
    sessions: int
    allocated_blocks: int           # Python objects alive after a full collection
    ready_calls: int
    scheduling_rounds: int
    calls_placed: int
    engines: tuple[EngineDescription, ...]


# --- the session graph -------------------------------------------------------------------------

@dataclass(frozen=True)
class CallNode(WireMessage):
    id: str
    kind: Literal["call"]
    prompt: str
    state: str
    criterion: str | None
    task_group: str | None
    engine: str | None
    prefix_hashes: tuple[str, ...]
    timings: Mapping[str, float]          # event -> loop time
    state_seconds: Mapping[str, float]    # state -> seconds spent in it
    error: str | None
    inputs: Mapping[str, str]             # placeholder -> semantic_var_id
    outputs: Mapping[str, str]


@dataclass(frozen=True)
class VariableNode(WireMessage):
    id: str
    kind: Literal["variable"]
    name: str
    ready: bool
    criterion: str | None
    error: str | None


@dataclass(frozen=True)
class GraphLink(WireMessage):
    source: str
    target: str


@dataclass(frozen=True)
class Graph(WireMessage):
    """`GET /v1/sessions/{id}/graph`: the session DAG as networkx node-link JSON."""

    directed: bool
    multigraph: bool
    nodes: tuple[CallNode | VariableNode, ...]
    links: tuple[GraphLink, ...]


# --- variables ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class CreateVariableRequest(WireMessage):
    """`POST /v1/variables`: a client-created variable, set now or later."""

    WIRE_NAME = "variables"
    session_id: str
    name: str = "var"
    value: str | None = None

    def __post_init__(self) -> None:
        check_session_id(self.session_id)
        check_value(self.value)


@dataclass(frozen=True)
class SetVariableRequest(WireMessage):
    """`POST /v1/variables/{id}`: set a client-created variable; releases its consumers."""

    WIRE_NAME = "set_variable"
    session_id: str
    value: str

    def __post_init__(self) -> None:
        check_session_id(self.session_id)
        check_value(self.value)


@dataclass(frozen=True)
class VariableId(WireMessage):
    semantic_var_id: str


@dataclass(frozen=True)
class GetRequest(WireMessage):
    """`POST /v1/get`: wait for a value; `criteria` seeds objective deduction."""

    WIRE_NAME = "get"
    session_id: str
    semantic_var_id: str
    criteria: Criterion = Criterion.LATENCY
    timeout: float | None = None

    def __post_init__(self) -> None:
        check_session_id(self.session_id)
        if self.timeout is not None and not self.timeout > 0:  # formatted on failure only
            raise InvalidRequestError(f"'timeout' must be a positive number, got "
                                      f"{self.timeout!r}")


@dataclass(frozen=True)
class Value(WireMessage):
    value: str


@dataclass(frozen=True)
class TextChunk(WireMessage):
    """One event of `GET /v1/variables/{id}/stream`: the next piece of the value."""

    text: str


