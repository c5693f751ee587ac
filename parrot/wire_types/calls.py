"""The wire API's messages about calls: submit (its placeholders, per-output sampling, chat,
stream) and submit_batch with refs, and their replies."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NoReturn

from parrot.errors import InvalidRequestError, TemplateSyntaxError
from parrot.constraints import check_constraint
from parrot.sampling import SamplingParams
from parrot.template import parse_template
from parrot.transforms import MAX_TRANSFORMS, Transform
from parrot.types import Criterion
from parrot.wire_types.service import ErrorReply, SessionCreated
from parrot.wire_types.codec import (Json, JsonObject, WireMessage, check, check_session_id,
                                     check_value, decode)

MAX_PLACEHOLDERS = 1024
MAX_BATCH_CALLS = 4096
# Messages of the checks every submit runs, formatted once.
_TOO_MANY_PLACEHOLDERS = f"'placeholders' must be a list of at most {MAX_PLACEHOLDERS} objects"
_BATCH_SIZE = f"'calls' must be a list of 1 to {MAX_BATCH_CALLS} submit objects"


# --- submit ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SamplingOverride(WireMessage):
    """Some sampling fields for one output (wire form: a partial sampling object); the call's
    `sampling` gives the others."""

    params: SamplingParams            # the given fields, defaults elsewhere (all validated)
    names: frozenset[str]             # the fields given

    @classmethod
    def of(cls, fields: Mapping[str, Any]) -> SamplingOverride:
        return cls(SamplingParams.from_json(fields), frozenset(fields))

    def apply(self, base: SamplingParams) -> SamplingParams:
        return dataclasses.replace(base, **{n: getattr(self.params, n) for n in self.names})

    def to_wire(self) -> JsonObject:
        full = self.params.to_json()
        return {name: full[name] for name in sorted(self.names)}

    @classmethod
    def from_wire(cls, data: object, path: str = "", *, strict: bool = True) -> SamplingOverride:
        if not isinstance(data, Mapping):
            raise InvalidRequestError(f"{path or 'sampling'} must be an object")
        return cls.of(data)


@dataclass(frozen=True)
class ChatSpec(WireMessage):
    """`"chat": true` or `{"system": "..."}`: the prompt is a chat rendered by the service with
    the engines' chat template (text before an output = the user's turn)."""

    system: str | None = None

    def to_wire(self) -> Json:  # type: ignore[override]
        return {"system": self.system} if self.system else True

    @classmethod
    def from_wire(cls, data: object, path: str = "", *, strict: bool = True) -> ChatSpec:
        if data is True:
            return cls()
        spec = super().from_wire(data, path or "chat", strict=strict)
        return cls(spec.system or None)


@dataclass(frozen=True)
class BatchRef(WireMessage):
    """In a submit_batch: output `output` of the batch's earlier call number `call`."""

    call: int
    output: str

    def __post_init__(self) -> None:
        if self.call < 0:
            raise InvalidRequestError(f"'call' must be the index of an earlier call, got "
                                      f"{self.call}")


@dataclass(frozen=True)
class PlaceholderSpec(WireMessage):
    """One binding of a submit: an input bound to exactly one of a variable id, a literal value
    or (in a batch) an earlier call's output; an output optionally to an existing variable."""

    name: str
    in_out: Literal["input", "output"]
    semantic_var_id: str | None = None
    value: str | None = None                      # a literal input value
    transforms: tuple[Transform, ...] = ()
    sampling: SamplingOverride | None = None      # per-output override
    ref: BatchRef | None = None                   # submit_batch only
    # An output the client will `get`: the get's criteria, given with the submission so
    # objectives are deduced before the call is placed (a get arrives a round trip later).
    criteria: Criterion | None = None

    def __post_init__(self) -> None:
        # Each message is formatted when its rule fails only (this runs for every binding).
        if not self.name:
            raise InvalidRequestError("'name' must be a non-empty string")
        if self.value is not None:
            check_value(self.value)
        if len(self.transforms) > MAX_TRANSFORMS:
            self._reject(f"transforms must be a list of at most {MAX_TRANSFORMS} items")
        if self.in_out == "output":
            if self.value is not None or self.ref is not None:
                self._reject("an output cannot have a 'value' or a 'ref'")
        else:
            bound = ((self.semantic_var_id is not None) + (self.value is not None)
                     + (self.ref is not None))
            if bound != 1:
                self._reject("an input needs exactly one of 'semantic_var_id' and 'value'"
                             " (or 'ref' in a batch)")
            if self.sampling is not None:
                self._reject("'sampling' is an object, on outputs only")
            if self.criteria is not None:
                self._reject("'criteria' is for outputs only")

    def _reject(self, problem: str) -> NoReturn:
        raise InvalidRequestError(f"placeholder {self.name!r}: {problem}")

    @property
    def is_output(self) -> bool:
        return self.in_out == "output"


class _CallChecks:
    """The rules a submit and each call of a submit_batch share (both hold these fields)."""

    prompt: str
    placeholders: tuple[PlaceholderSpec, ...]
    sampling: SamplingParams
    stream: tuple[str, ...]

    def _check_call(self) -> None:
        # Runs for every call: the common case (no constraint, no override, nothing streamed)
        # costs a few tests; each check that has work to do is called only then.
        if len(self.placeholders) > MAX_PLACEHOLDERS:
            raise InvalidRequestError(_TOO_MANY_PLACEHOLDERS)
        if len(self.placeholders) > 1:  # one binding cannot repeat a name
            names = [p.name for p in self.placeholders]
            if len(set(names)) != len(names):
                dupes = sorted({n for n in names if names.count(n) > 1})
                raise InvalidRequestError(f"placeholder(s) {dupes} given more than once")
        # a constraint's schema or pattern must compile: a 400 naming the output, here
        if self.sampling.constraint is not None:
            check_constraint(self.sampling.constraint, "sampling")
        for spec in self.placeholders:
            if spec.sampling is not None and spec.is_output:
                check_constraint(self.output_sampling(spec.name).constraint,
                                 f"output {spec.name!r}")
        if self.stream:
            self._check_output_names("stream", self.stream)

    def _check_output_names(self, key: str, names: tuple[str, ...]) -> None:
        """`names` (the field `key`) are outputs of the prompt."""
        if not names:
            return
        try:
            outputs = set(parse_template(self.prompt).output_names)
        except TemplateSyntaxError:
            return  # the submit itself reports the bad prompt
        unknown = sorted(set(names) - outputs)
        check(not unknown, f"'{key}' names {unknown}, not outputs of the prompt")

    def output_sampling(self, name: str) -> SamplingParams:
        """The sampling of output `name`: the call's, with the output's own override."""
        spec = next((p for p in self.placeholders if p.name == name), None)
        return spec.sampling.apply(self.sampling) if spec and spec.sampling else self.sampling


def _without_false_chat(data: object) -> object:
    """`"chat": false` means no chat, as if absent."""
    if (type(data) is dict or isinstance(data, Mapping)) and data.get("chat") is False:
        return {k: v for k, v in data.items() if k != "chat"}
    return data


@dataclass(frozen=True)
class SubmitRequest(_CallChecks, WireMessage):
    """`POST /v1/submit`: one call, a template and its bindings. `wait: true` answers when
    the outputs exist, with them; `stream` names outputs read as generated (streamed from the
    engine from the start); `chat` renders the prompt with the engines' chat template."""

    WIRE_NAME = "submit"
    session_id: str
    prompt: str
    placeholders: tuple[PlaceholderSpec, ...] = ()
    sampling: SamplingParams = field(default_factory=SamplingParams)
    wait: bool = False
    stream: tuple[str, ...] = ()
    chat: ChatSpec | None = None

    def __post_init__(self) -> None:
        check_session_id(self.session_id)
        self._check_call()
        for spec in self.placeholders:  # a plain loop: no list built for the usual no ref
            if spec.ref is not None:
                refs = [p.name for p in self.placeholders if p.ref is not None]
                raise InvalidRequestError(f"placeholder(s) {refs}: 'ref' is for submit_batch "
                                          "only")

    @classmethod
    def from_wire(cls, data: object, path: str = "", *, strict: bool = True) -> SubmitRequest:
        return super().from_wire(_without_false_chat(data), path, strict=strict)

    from_json = from_wire   # the name the manager's tests and benchmark scripts use


@dataclass(frozen=True)
class BatchCall(_CallChecks, WireMessage):
    """One call of a submit_batch: a submit body without session_id. `wait` names outputs the
    client awaits at once: the batch's reply comes when they exist and carries them (this
    call's `values`), so a program that submits and reads costs one round trip."""

    prompt: str
    placeholders: tuple[PlaceholderSpec, ...] = ()
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stream: tuple[str, ...] = ()
    chat: ChatSpec | None = None
    wait: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self._check_call()
        if self.wait:
            self._check_output_names("wait", self.wait)

    @classmethod
    def from_wire(cls, data: object, path: str = "", *, strict: bool = True) -> BatchCall:
        return super().from_wire(_without_false_chat(data), path, strict=strict)


@dataclass(frozen=True)
class RejectedCall:
    """A call of a submit_batch that did not parse: rejected on its own, the others go on."""

    error: InvalidRequestError


@dataclass(frozen=True)
class SubmitBatchRequest(WireMessage):
    """`POST /v1/submit_batch`: several calls in one message, in order; a call may bind an
    output of an earlier one with `ref` (it has no id on the client yet). Without
    `session_id` the batch opens its session (the reply's `session`): a client's first batch
    need not wait a round trip for `POST /v1/sessions`."""

    WIRE_NAME = "submit_batch"
    session_id: str | None = None
    calls: tuple[BatchCall | RejectedCall, ...] = field(
        default=(), metadata={"schema": tuple[BatchCall, ...], "required": True})

    def __post_init__(self) -> None:
        if self.session_id is not None:
            check_session_id(self.session_id)
        check(1 <= len(self.calls) <= MAX_BATCH_CALLS, _BATCH_SIZE)
        for index, call in enumerate(self.calls):
            if isinstance(call, BatchCall):
                _check_refs(call, index)

    @classmethod
    def from_wire(cls, data: object, path: str = "", *,
                  strict: bool = True) -> SubmitBatchRequest:
        """Each call parses on its own: a bad one becomes a `RejectedCall`."""
        path = path or cls.WIRE_NAME
        calls = data.get("calls") if isinstance(data, Mapping) else None
        if not isinstance(calls, list):  # the usual errors, from the usual parser
            return super().from_wire(data, path, strict=strict)
        parsed: list[BatchCall | RejectedCall] = []
        for index, item in enumerate(calls):
            try:
                call = BatchCall.from_wire(item, f"calls[{index}]")
                _check_refs(call, index)
                parsed.append(call)
            except InvalidRequestError as exc:
                parsed.append(RejectedCall(exc))
        assert isinstance(data, Mapping)
        if strict and not _BATCH_FIELDS.issuperset(data):
            unknown = sorted(str(k) for k in set(data) - _BATCH_FIELDS)
            raise InvalidRequestError(f"{path}: unknown field(s) {unknown}; allowed: "
                                      "['calls', 'session_id']")
        session_id = data.get("session_id")
        if session_id is not None and type(session_id) is not str:  # else: taken as it is
            session_id = decode(str | None, session_id, f"{path}.session_id")
        try:
            return cls(session_id, tuple(parsed))
        except InvalidRequestError as exc:
            exc.args = (f"{path}: {exc}",)
            raise

    def to_wire(self) -> JsonObject:
        if any(isinstance(c, RejectedCall) for c in self.calls):
            raise TypeError("a batch with rejected calls has no wire form")
        return super().to_wire()


_BATCH_FIELDS = frozenset({"session_id", "calls"})


def _check_refs(call: BatchCall, index: int) -> None:
    for spec in call.placeholders:
        if spec.ref is not None and not spec.ref.call < index:  # formatted on failure only
            raise InvalidRequestError(
                f"calls[{index}]: 'ref' must be {{call: <index of an earlier call>, "
                f"output: <name>}}, got call {spec.ref.call}")


@dataclass(frozen=True)
class PlaceholderBinding(WireMessage):
    name: str
    semantic_var_id: str


@dataclass(frozen=True)
class SubmitReply(WireMessage):
    request_id: str
    placeholders: tuple[PlaceholderBinding, ...]   # inputs, then outputs
    values: Mapping[str, str] | None = None        # the waited outputs by name ("wait")

    def var_ids(self) -> dict[str, str]:
        return {p.name: p.semantic_var_id for p in self.placeholders}


@dataclass(frozen=True)
class BatchReply(WireMessage):
    results: tuple[SubmitReply | ErrorReply, ...]   # in order; each call accepted or rejected
    session: SessionCreated | None = None           # the session the batch opened, if it did
