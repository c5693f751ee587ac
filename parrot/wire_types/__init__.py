"""The wire API's requests and replies: one vocabulary for the frontend and the manager.

The frontend builds these and parses the manager's replies into them; the manager
(`parrot/server/wire_routes.py`) parses each request once and answers with one of them;
`/openapi.json` is generated from the same classes. The JSON form of each is its fields
(`codec.py`); value rules are in `__post_init__`, so a bad message fails where it is built, on
either side of the wire. Field names and shapes are those of docs/HTTP_API.md.

* `calls.py`: submit (placeholders, per-output sampling, chat, stream), submit_batch with refs.
* `service.py`: errors, sessions, health, variables, get, engines, stats, the session graph.
"""

from parrot.wire_types.calls import (MAX_BATCH_CALLS, MAX_PLACEHOLDERS, BatchCall, BatchRef,
                                     BatchReply, ChatSpec, PlaceholderBinding, PlaceholderSpec,
                                     RejectedCall, SamplingOverride, SubmitBatchRequest,
                                     SubmitReply, SubmitRequest)
from parrot.wire_types.codec import MAX_VALUE_CHARS, Json, JsonObject, WireMessage
from parrot.wire_types import fast_decoder  # noqa: F401 - installs the fast decoders
from parrot.wire_types.service import (CallNode, CreateVariableRequest, EngineDescription,
                                       EngineList, EngineServing, ErrorDetail, ErrorReply,
                                       GetRequest, Graph, GraphLink, Health, Registered,
                                       RegisterEngineRequest, SessionCreated, SessionDeleted,
                                       SessionStats, SetVariableRequest, Stats, TextChunk, Value,
                                       VariableId, VariableNode)

__all__ = [
    "MAX_BATCH_CALLS", "MAX_PLACEHOLDERS", "MAX_VALUE_CHARS", "BatchCall", "BatchRef",
    "BatchReply", "CallNode", "ChatSpec", "CreateVariableRequest", "EngineDescription",
    "EngineList", "EngineServing", "ErrorDetail", "ErrorReply", "GetRequest", "Graph",
    "GraphLink", "Health", "Json", "JsonObject", "PlaceholderBinding", "PlaceholderSpec",
    "Registered", "RegisterEngineRequest", "RejectedCall", "SamplingOverride", "SessionCreated",
    "SessionDeleted", "SessionStats", "SetVariableRequest", "Stats", "SubmitBatchRequest",
    "SubmitReply", "SubmitRequest", "TextChunk", "Value", "VariableId", "VariableNode",
    "WireMessage",
]
