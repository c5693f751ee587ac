"""The batched engine route's messages (docs/ENGINE_PROTOCOL.md, `POST /v1/engine/batch`).

One request carries many operations, each tagged by an id its client chose:

    {"ops": [{"id": "a1", "fill": FillRequest},
             {"id": "a2", "generate": GenerateRequest + optional "stream"},
             {"id": "a3", "free": {"context_id"}}]}

and the reply is one NDJSON stream of lines `{"events": [...]}`, every event tagged by its op:

    {"id", "fill": FillResult}     {"id", "free": {"context_id"}}
    {"id", "chunk": GenerateChunk} (the op's last event has finish_reason set)
    {"id", "error": {"type", "message"}, "status": int}

An op's events come in order and its last one is its result, its last chunk or its error. The
body as a whole is parsed strictly (a malformed body, op list or op id is a 400 for the whole
request); each op's own request is parsed as its own route parses it, and a bad one is that
op's error event, not the request's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from parrot.engines.protocol import EngineMessage, FillRequest, GenerateRequest, check_context_id
from parrot.engines.server_io import parse, parse_generate
from parrot.errors import InvalidRequestError, ParrotError

BATCH_PATH = "/v1/engine/batch"
ABORT_PATH = "/v1/engine/abort"
# Ops in one message at most (a 400 above): one message, and one line of its events, stay
# bounded however many calls a manager runs.
MAX_OPS_PER_MESSAGE = 1024
OP_KINDS = ("fill", "generate", "free")


@dataclass(frozen=True)
class FreeRequest(EngineMessage):
    """Free a context (the body of `POST /v1/engine/free_context`)."""

    WIRE_NAME = "free"

    context_id: str

    def __post_init__(self) -> None:
        check_context_id(self.context_id)


@dataclass(frozen=True)
class GenerateOp:
    """A Generate of a batch: the request, and whether its chunks stream (else one event with
    the whole text)."""

    request: GenerateRequest
    stream: bool


OpRequest = FillRequest | GenerateOp | FreeRequest


@dataclass(frozen=True)
class BatchOp:
    """One op of a batch body: its id and its request, or the error its request got."""

    id: str
    request: OpRequest | ParrotError


def parse_batch(body: dict[str, Any]) -> list[BatchOp]:
    """The ops of a batch body, in order."""
    if set(body) != {"ops"}:
        raise InvalidRequestError(f"batch: the body is {{\"ops\": [...]}}, got fields "
                                  f"{sorted(body)}")
    ops = body["ops"]
    if not isinstance(ops, list) or not 1 <= len(ops) <= MAX_OPS_PER_MESSAGE:
        raise InvalidRequestError(f"batch.ops must be a list of 1-{MAX_OPS_PER_MESSAGE} ops, "
                                  f"got {_describe(ops)}")
    return [_parse_op(i, op) for i, op in enumerate(ops)]


def _parse_op(index: int, op: Any) -> BatchOp:
    if not isinstance(op, dict):
        raise InvalidRequestError(f"batch.ops[{index}] must be an object, got {_describe(op)}")
    check_context_id(op.get("id"), f"batch.ops[{index}].id")
    op_id: str = op["id"]
    kinds = [k for k in op if k != "id"]
    if len(kinds) != 1 or kinds[0] not in OP_KINDS:
        return BatchOp(op_id, InvalidRequestError(
            f"op {op_id!r} needs exactly one of {list(OP_KINDS)} beside its id, got {kinds}"))
    kind = kinds[0]
    try:
        if kind == "fill":
            return BatchOp(op_id, parse(FillRequest.from_wire, op[kind]))
        if kind == "free":
            return BatchOp(op_id, parse(FreeRequest.from_wire, op[kind]))
        if not isinstance(op[kind], dict):
            raise InvalidRequestError(f"generate must be a JSON object, got {_describe(op[kind])}")
        return BatchOp(op_id, GenerateOp(*parse_generate(op[kind])))
    except ParrotError as exc:
        return BatchOp(op_id, exc)


def _describe(value: Any) -> str:
    return f"{len(value)} items" if isinstance(value, list) else type(value).__name__


def error_event(op_id: str, exc: ParrotError) -> dict[str, Any]:
    return {"id": op_id, **exc.to_wire(), "status": exc.status}


def parse_abort(body: dict[str, Any]) -> list[str]:
    """The op ids of an abort body `{"ids": [...]}`."""
    ids = body.get("ids") if set(body) == {"ids"} else None
    if not isinstance(ids, list) or len(ids) > MAX_OPS_PER_MESSAGE:
        raise InvalidRequestError(f"abort: the body is {{\"ids\": [at most "
                                  f"{MAX_OPS_PER_MESSAGE} op ids]}}, got {sorted(body)}")
    for i, op_id in enumerate(ids):
        check_context_id(op_id, f"abort.ids[{i}]")
    return ids
