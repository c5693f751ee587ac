"""The manager's side of the wire requests (the types themselves are `parrot.wire_types`,
shared with the frontend): the session a body names, read before the body is parsed (a
request is authenticated before its content is judged), and a submit_batch call's refs
resolved against the replies of the batch's earlier calls."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from parrot.errors import InvalidRequestError
from parrot.wire_types import (BatchCall, ErrorReply, GetRequest, PlaceholderSpec,
                               SubmitReply, SubmitRequest)

__all__ = ["GetRequest", "PlaceholderSpec", "SubmitRequest", "opens_session", "resolve_refs",
           "session_id_of"]


def session_id_of(body: object) -> str:
    if not isinstance(body, Mapping):
        raise InvalidRequestError("request body must be a JSON object")
    session_id = body.get("session_id")
    if not isinstance(session_id, str) or not session_id:
        raise InvalidRequestError("'session_id' must be a non-empty string")
    return session_id


def opens_session(body: object) -> bool:
    """A submit_batch body that names no session: the batch opens one."""
    return isinstance(body, Mapping) and body.get("session_id") is None


def resolve_refs(call: BatchCall, index: int, earlier: Sequence[SubmitReply | ErrorReply],
                 session_id: str) -> SubmitRequest:
    """Call `index` of a batch as a submit: each `ref` to an output of an earlier call (which
    has no id on the client yet) becomes that output's semantic_var_id."""
    specs = []
    for spec in call.placeholders:
        if spec.ref is not None:
            target = earlier[spec.ref.call]  # refs point back: checked when the batch parsed
            if isinstance(target, ErrorReply):
                raise InvalidRequestError(f"calls[{index}] uses an output of "
                                          f"calls[{spec.ref.call}], which was rejected")
            ids = target.var_ids()
            if spec.ref.output not in ids:
                raise InvalidRequestError(f"calls[{index}]: calls[{spec.ref.call}] has no "
                                          f"placeholder {spec.ref.output!r}")
            # (built directly: `dataclasses.replace` walks the fields, for every binding)
            spec = PlaceholderSpec(name=spec.name, in_out=spec.in_out,
                                   semantic_var_id=ids[spec.ref.output], value=spec.value,
                                   transforms=spec.transforms, sampling=spec.sampling,
                                   criteria=spec.criteria)
        specs.append(spec)
    return SubmitRequest(session_id, call.prompt, tuple(specs), call.sampling,
                         stream=call.stream, chat=call.chat)
