"""Typed forms of the manager's wire requests, parsed and validated once at the edge."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from collections.abc import Mapping

from parrot.errors import InvalidRequestError
from parrot.sampling import SamplingParams
from parrot.transforms import Transform, parse_transforms
from parrot.types import Criterion

MAX_PLACEHOLDERS = 1024
MAX_BATCH_CALLS = 4096
MAX_VALUE_CHARS = 4_000_000


@dataclass(frozen=True)
class PlaceholderSpec:
    name: str
    in_out: str                         # "input" | "output"
    semantic_var_id: str | None = None
    value: str | None = None            # a literal input value
    transforms: tuple[Transform, ...] = ()
    sampling: Mapping[str, Any] | None = None  # per-output override (wire form)

    @property
    def is_output(self) -> bool:
        return self.in_out == "output"


@dataclass(frozen=True)
class SubmitRequest:
    session_id: str
    prompt: str
    # defaults as on the wire (they document the API: /openapi.json is generated from these)
    placeholders: tuple[PlaceholderSpec, ...] = ()
    sampling: SamplingParams = field(default_factory=SamplingParams)

    @classmethod
    def from_json(cls, data: Any) -> SubmitRequest:
        body = _object(data, "request body")
        _only(body, {"session_id", "prompt", "placeholders", "sampling"}, "submit")
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            raise InvalidRequestError("submit: 'prompt' must be a string")
        raw = body.get("placeholders", [])
        if not isinstance(raw, list) or len(raw) > MAX_PLACEHOLDERS:
            raise InvalidRequestError(f"submit: 'placeholders' must be a list of at most "
                                      f"{MAX_PLACEHOLDERS} objects")
        specs = tuple(_placeholder(item, i) for i, item in enumerate(raw))
        names = [p.name for p in specs]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise InvalidRequestError(f"submit: placeholder(s) {dupes} given more than once")
        sampling = SamplingParams.from_json(body.get("sampling"))
        for spec in specs:  # validate per-output overrides now, not when the call runs
            sampling.merged(spec.sampling)
        return cls(session_id=session_id_of(body), prompt=prompt, placeholders=specs,
                   sampling=sampling)


def _placeholder(item: Any, index: int) -> PlaceholderSpec:
    where = f"placeholders[{index}]"
    obj = _object(item, where)
    _only(obj, {"name", "in_out", "semantic_var_id", "value", "transforms", "sampling"}, where)
    name, in_out = obj.get("name"), obj.get("in_out")
    if not isinstance(name, str) or not name:
        raise InvalidRequestError(f"{where}: 'name' must be a non-empty string")
    if in_out not in ("input", "output"):
        raise InvalidRequestError(f"{where} ({name}): 'in_out' must be 'input' or 'output', "
                                  f"got {in_out!r}")
    var_id, value = obj.get("semantic_var_id"), obj.get("value")
    if var_id is not None and not isinstance(var_id, str):
        raise InvalidRequestError(f"{where} ({name}): 'semantic_var_id' must be a string")
    if value is not None and (not isinstance(value, str) or len(value) > MAX_VALUE_CHARS):
        raise InvalidRequestError(f"{where} ({name}): 'value' must be a string of at most "
                                  f"{MAX_VALUE_CHARS} characters")
    if in_out == "input" and (var_id is None) == (value is None):
        raise InvalidRequestError(f"{where} ({name}): an input needs exactly one of "
                                  "'semantic_var_id' and 'value'")
    if in_out == "output" and value is not None:
        raise InvalidRequestError(f"{where} ({name}): an output cannot have a 'value'")
    sampling = obj.get("sampling")
    if sampling is not None and (in_out != "output" or not isinstance(sampling, Mapping)):
        raise InvalidRequestError(f"{where} ({name}): 'sampling' is an object, on outputs only")
    return PlaceholderSpec(name, in_out, var_id, value,
                           parse_transforms(obj.get("transforms"), f"{where} ({name})"),
                           sampling)


@dataclass(frozen=True)
class GetRequest:
    session_id: str
    semantic_var_id: str
    criteria: Criterion = Criterion.LATENCY
    timeout: float | None = None

    @classmethod
    def from_json(cls, data: Any) -> GetRequest:
        body = _object(data, "request body")
        _only(body, {"session_id", "semantic_var_id", "criteria", "timeout"}, "get")
        var_id = body.get("semantic_var_id")
        if not isinstance(var_id, str):
            raise InvalidRequestError("get: 'semantic_var_id' must be a string")
        timeout = body.get("timeout")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(
                timeout, (int, float)) or not timeout > 0):
            raise InvalidRequestError(f"get: 'timeout' must be a positive number, got {timeout!r}")
        return cls(session_id_of(body), var_id,
                   Criterion.parse(body.get("criteria", "latency")), timeout)


def batch_items(body: Any) -> list[Any]:
    """The `calls` list of a submit_batch body."""
    calls = _object(body, "request body").get("calls")
    if not isinstance(calls, list) or not 1 <= len(calls) <= MAX_BATCH_CALLS:
        raise InvalidRequestError(f"submit_batch: 'calls' must be a list of 1 to "
                                  f"{MAX_BATCH_CALLS} submit objects")
    return calls


def resolve_batch_refs(item: Any, index: int, earlier: list[dict[str, Any]]) -> dict[str, Any]:
    """Replace `{"ref": {"call": j, "output": name}}` bindings (an output of an earlier call of
    the same batch, which has no id on the client yet) by that output's semantic_var_id."""
    call = dict(_object(item, f"calls[{index}]"))
    placeholders = call.get("placeholders", [])
    if not isinstance(placeholders, list):
        return call
    resolved = []
    for spec in placeholders:
        if isinstance(spec, Mapping) and "ref" in spec:
            ref = spec["ref"]
            call_index = ref.get("call") if isinstance(ref, Mapping) else None
            # bool is an int in Python: `true` must not pass for call 1.
            if not (isinstance(call_index, int) and not isinstance(call_index, bool)
                    and isinstance(ref.get("output"), str) and 0 <= call_index < index):
                raise InvalidRequestError(f"calls[{index}]: 'ref' must be {{call: <index of an "
                                          f"earlier call>, output: <name>}}, got {ref!r}")
            target = earlier[ref["call"]]
            if "error" in target:
                raise InvalidRequestError(f"calls[{index}] uses an output of calls[{ref['call']}]"
                                          ", which was rejected")
            ids = {p["name"]: p["semantic_var_id"] for p in target["placeholders"]}
            if ref["output"] not in ids:
                raise InvalidRequestError(f"calls[{index}]: calls[{ref['call']}] has no "
                                          f"placeholder {ref['output']!r}")
            spec = {k: v for k, v in spec.items() if k != "ref"}
            spec["semantic_var_id"] = ids[ref["output"]]
        resolved.append(spec)
    call["placeholders"] = resolved
    return call


def session_id_of(body: Mapping[str, Any]) -> str:
    session_id = body.get("session_id")
    if not isinstance(session_id, str) or not session_id:
        raise InvalidRequestError("'session_id' must be a non-empty string")
    return session_id


def optional_value(body: Mapping[str, Any], *, required: bool = False) -> str | None:
    value = body.get("value")
    if value is None and not required:
        return None
    if not isinstance(value, str) or len(value) > MAX_VALUE_CHARS:
        raise InvalidRequestError(f"'value' must be a string of at most {MAX_VALUE_CHARS} "
                                  "characters")
    return value


def _object(data: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise InvalidRequestError(f"{where} must be a JSON object")
    return data


def _only(data: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise InvalidRequestError(f"{where}: unknown field(s) {unknown}; allowed: {sorted(allowed)}")
