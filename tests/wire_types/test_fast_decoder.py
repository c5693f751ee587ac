"""The codec's fast decoders (parrot/wire_types/fast_decoder.py): a well-formed message is
decoded by the class's generated function alone, and anything it does not take is decoded
again by the path-tracking decoder (codec.py), so every result and every error is that
decoder's: the error of a bad field deep in a message still names its path."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import parrot.wire_types as wt
from parrot.errors import InvalidRequestError
from parrot.sampling import SamplingParams
from parrot.wire_types import codec, fast_decoder

SUBMIT: dict[str, Any] = {
    "session_id": "s-0123456789abcdef", "prompt": "Go on: {{input:x}} {{output:y}}",
    "placeholders": [{"name": "x", "in_out": "input", "value": "start"},
                     {"name": "y", "in_out": "output", "criteria": "latency"}],
    "sampling": {"max_tokens": 4, "temperature": 0.7}}
BATCH: dict[str, Any] = {"session_id": "s-1", "calls": [
    {"prompt": "Go on: {{input:x}} {{output:y}}", "sampling": {"max_tokens": 4},
     "placeholders": [{"name": "x", "in_out": "input", "value": "start"} if i == 0 else
                      {"name": "x", "in_out": "input", "ref": {"call": i - 1, "output": "y"}}]}
    for i in range(3)]}
# A submit with every kind of field: optional messages, tuples, foreign types, conversions.
FULL: dict[str, Any] = {
    "session_id": "s", "prompt": "{{input:a}} {{output:b}} {{output:c}}", "wait": True,
    "stream": ["b"], "chat": {"system": "hi"},
    "sampling": {"max_tokens": 5, "temperature": 1, "top_p": 0.5, "top_k": 3, "seed": 4,
                 "stop_token_ids": [1, 2]},
    "placeholders": [
        {"name": "a", "in_out": "input", "semantic_var_id": "v-1"},
        {"name": "b", "in_out": "output", "criteria": "THROUGHPUT", "transforms": ["strip"],
         "sampling": {"max_tokens": 2, "constraint": {"type": "regex", "pattern": "a+"}}},
        {"name": "c", "in_out": "output", "semantic_var_id": "v-2"}]}


def _submit_with(**placeholder: Any) -> dict[str, Any]:
    """SUBMIT with fields of its second placeholder replaced."""
    return {**SUBMIT, "placeholders": [SUBMIT["placeholders"][0],
                                       {**SUBMIT["placeholders"][1], **placeholder}]}


def _batch_ref(ref: dict[str, Any]) -> dict[str, Any]:
    """BATCH whose second call binds its input with `ref`."""
    body = copy.deepcopy(BATCH)
    body["calls"][1]["placeholders"] = [{"name": "x", "in_out": "input", "ref": ref}]
    return body


# --- well-formed messages take the fast decoder only -------------------------------------------

@pytest.mark.parametrize("cls, body", [
    (wt.SubmitRequest, SUBMIT), (wt.SubmitRequest, FULL), (wt.BatchCall, BATCH["calls"][1]),
    (wt.GetRequest, {"session_id": "s", "semantic_var_id": "v", "criteria": "throughput",
                     "timeout": 3}),
    (wt.RegisterEngineRequest, {"name": "e", "url": "u", "latency_capacity": "auto",
                                "speed": 2}),
])
def test_the_fast_decoder_alone_decodes_a_well_formed_message(cls, body):
    # It raises for anything it does not take: here it must take the message itself.
    decoded = fast_decoder.for_class(cls)(json.loads(json.dumps(body)), True)
    assert decoded == cls.from_wire(body)
    assert vars(decoded) == vars(cls.from_wire(body))


def test_an_int_given_for_a_float_is_converted_by_the_fast_decoder():
    request = fast_decoder.for_class(wt.GetRequest)({"session_id": "s", "semantic_var_id": "v",
                                                 "timeout": 3}, True)
    assert type(request.timeout) is float and request.timeout == 3.0


def test_a_well_formed_message_never_takes_the_path_decoder():
    used: list[type] = []
    refused: list[type] = []
    real = fast_decoder.for_class

    def watched(cls: type[wt.WireMessage]) -> Callable[[object, bool], Any]:
        fast = real(cls)

        def run(data: object, strict: bool) -> Any:
            used.append(cls)
            try:
                return fast(data, strict)
            except Exception:
                refused.append(cls)
                raise
        return run
    installed = codec.use_fast_decoders(watched)
    try:
        wt.SubmitRequest.from_wire(SUBMIT)
        wt.SubmitRequest.from_wire(FULL)
        batch = wt.SubmitBatchRequest.from_wire(BATCH)
    finally:
        codec.use_fast_decoders(installed)
    assert installed is fast_decoder.for_class   # what the package installs
    assert all(isinstance(call, wt.BatchCall) for call in batch.calls)
    assert used.count(wt.SubmitRequest) == 2 and used.count(wt.BatchCall) == 3
    assert refused == []


# --- what the fast decoder does not take gets the path decoder's result or error ---------------

@pytest.mark.parametrize("body, error", [
    (_submit_with(name=7), "submit.placeholders[1].name must be a string, got 7"),
    (_submit_with(in_out="inout"),
     "submit.placeholders[1].in_out must be one of ['input', 'output'], got 'inout'"),
    (_submit_with(zz=1), "submit.placeholders[1]: unknown field(s) ['zz']; allowed: "
     "['criteria', 'in_out', 'name', 'ref', 'sampling', 'semantic_var_id', 'transforms', "
     "'value']"),
    ({"session_id": "s-1"}, "submit.prompt is required"),
    (_submit_with(value="v"), "submit.placeholders[1]: placeholder 'y': an output cannot have "
     "a 'value' or a 'ref'"),
    (_submit_with(criteria="fast"), "unknown criteria 'fast'; allowed: ['latency', "
     "'throughput']"),
    ({**SUBMIT, "sampling": {"max_tokens": True}},
     "invalid sampling.max_tokens=True: must be an integer in [1, 1000000]"),
    ({**SUBMIT, "sampling": {"temperature": 101}},
     "invalid sampling.temperature=101.0: must be a number in [0, 100]"),
    ({**SUBMIT, "stream": ["y", 3]}, "submit.stream[1] must be a string, got 3"),
    ({**SUBMIT, "wait": 1}, "submit.wait must be a boolean, got 1"),
    ({**SUBMIT, "chat": {"system": 3}}, "submit.chat.system must be a string, got 3"),
    ({**SUBMIT, "session_id": ""}, "submit: 'session_id' must be a non-empty string"),
    ([1], "submit must be a JSON object, got a list"),
])
def test_an_error_names_the_same_field_path(body, error):
    with pytest.raises(InvalidRequestError) as caught:
        wt.SubmitRequest.from_wire(json.loads(json.dumps(body)))
    assert str(caught.value) == error


@pytest.mark.parametrize("ref, error", [
    ({"call": True, "output": "y"}, "calls[1].placeholders[0].ref.call must be an integer, "
     "got True"),
    ({"call": 3, "output": "y"}, "calls[1]: 'ref' must be {call: <index of an earlier call>, "
     "output: <name>}, got call 3"),
])
def test_a_rejected_call_of_a_batch_names_its_path(ref, error):
    batch = wt.SubmitBatchRequest.from_wire(_batch_ref(ref))
    rejected = batch.calls[1]
    assert isinstance(rejected, wt.RejectedCall) and str(rejected.error) == error
    assert isinstance(batch.calls[0], wt.BatchCall) and isinstance(batch.calls[2], wt.BatchCall)


@pytest.mark.parametrize("body, error", [
    ({**BATCH, "session_id": 5}, "submit_batch.session_id must be a string, got 5"),
    ({**BATCH, "extra": 1},
     "submit_batch: unknown field(s) ['extra']; allowed: ['calls', 'session_id']"),
])
def test_a_batch_error_names_its_field(body, error):
    with pytest.raises(InvalidRequestError) as caught:
        wt.SubmitBatchRequest.from_wire(body)
    assert str(caught.value) == error


class _Mapping(dict[str, Any]):
    """A Mapping that is no dict: the fast decoder leaves it to the path decoder."""


def test_what_the_fast_decoder_leaves_decodes_as_before():
    expected = wt.SubmitRequest.from_wire(SUBMIT)
    assert wt.SubmitRequest.from_wire(_Mapping(SUBMIT)) == expected
    # an unknown field ignored when not strict
    assert wt.SubmitRequest.from_wire({**SUBMIT, "new": 1}, strict=False) == expected
    with pytest.raises(Exception):  # noqa: B017 - what it raises is the path decoder's concern
        fast_decoder.for_class(wt.SubmitRequest)({**SUBMIT, "new": 1}, False)


# --- the fast decoder and the path decoder agree on every variation ----------------------------

_VALUES: list[Any] = [None, True, False, 0, 1, -1, 1.5, "", "x", "y", "input", "output",
                      "latency", [], {}, ["y"], [1], {"a": 1}, {"call": 0, "output": "y"}]


def _variations(body: Any) -> Iterator[Any]:
    """`body` with each value in it replaced by each of _VALUES, each key dropped, an unknown
    key added to each object."""
    for path in _paths(body):
        for value in _VALUES:
            yield _replaced(body, path, lambda _old, v=value: v)
        yield _replaced(body, path, lambda old: {**old, "zz": 1} if isinstance(old, dict)
                        else old)
        if isinstance(path[-1], str):
            yield _replaced(body, path, None)


def _paths(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if path:
        yield path
    items = node.items() if isinstance(node, dict) else enumerate(node) \
        if isinstance(node, list) else ()
    for key, child in items:
        yield from _paths(child, (*path, key))


def _replaced(body: Any, path: tuple[Any, ...], change: Callable[[Any], Any] | None) -> Any:
    """A copy of body with the value at `path` changed (dropped when `change` is None)."""
    copied = copy.deepcopy(body)
    parent = copied
    for key in path[:-1]:
        parent = parent[key]
    if change is None:
        del parent[path[-1]]
    else:
        parent[path[-1]] = change(parent[path[-1]])
    return copied


def _outcome(cls: type[wt.WireMessage], body: Any) -> str:
    try:
        decoded = cls.from_wire(body)
    except Exception as exc:  # a TypeError too: both decoders must raise the same
        return f"{type(exc).__name__}: {exc}"
    return f"{decoded!r} {[(k, type(v)) for k, v in vars(decoded).items()]}"


@pytest.mark.parametrize("cls, body", [(wt.SubmitRequest, FULL),
                                       (wt.SubmitBatchRequest, BATCH)])
def test_the_fast_and_the_path_decoder_agree_on_every_variation(cls, body):
    bodies = list(_variations(body))
    fast = [_outcome(cls, b) for b in bodies]

    def refusing(cls: type[wt.WireMessage]) -> Callable[[object, bool], Any]:
        def refuse(data: object, strict: bool) -> Any:
            raise LookupError("the path decoder only")
        return refuse
    installed = codec.use_fast_decoders(refusing)
    try:
        assert [_outcome(cls, b) for b in bodies] == fast
    finally:
        codec.use_fast_decoders(installed)
    assert sum(o.startswith(cls.__name__) for o in fast) > 10   # some variations are accepted


# --- SamplingParams: the one-test check of usual values, the full rules otherwise --------------

@pytest.mark.parametrize("fields, error", [
    ({"max_tokens": True}, "invalid sampling.max_tokens=True: must be an integer in "
     "[1, 1000000]"),
    ({"max_tokens": 4.0}, "invalid sampling.max_tokens=4.0: must be an integer in "
     "[1, 1000000]"),
    ({"temperature": float("nan")}, "invalid sampling.temperature=nan: must be a number in "
     "[0, 100]"),
    ({"temperature": 100.5}, "invalid sampling.temperature=100.5: must be a number in [0, 100]"),
    ({"top_p": 0}, "invalid sampling.top_p=0: must be a number in (0, 1]"),
    ({"seed": -1}, "invalid sampling.seed=-1: must be null or an integer in [0, 2**63)"),
    ({"stop": ("",)}, "invalid sampling.stop=('',): must be a list of at most 16 non-empty "
     "strings"),
    ({"stop": ["x"]}, "invalid sampling.stop=['x']: must be a list of at most 16 non-empty "
     "strings"),
    ({"stop_token_ids": (1, -1)}, "invalid sampling.stop_token_ids=(1, -1): must be a list of "
     "at most 64 integers in [0, 2147483647]"),
    ({"ignore_eos": 1}, "invalid sampling.ignore_eos=1: must be a boolean"),
    ({"ignore_eos": True, "constraint": {"type": "json_object"}},
     "invalid sampling.ignore_eos=True: must be false when a constraint is given"),
])
def test_sampling_rules_name_the_field(fields, error):
    with pytest.raises(InvalidRequestError) as caught:
        SamplingParams(**fields)
    assert str(caught.value) == error


def test_sampling_values_keep_their_types_and_defaults():
    assert type(SamplingParams(temperature=1).temperature) is int   # built in Python: as given
    parsed = SamplingParams.from_json({"temperature": 1, "top_p": 1, "stop": "x"})
    assert type(parsed.temperature) is float and type(parsed.top_p) is float
    assert parsed == SamplingParams(temperature=1.0, top_p=1.0, stop=("x",))
    assert list(vars(parsed)) == list(vars(SamplingParams()))   # every field, in order
    constrained = SamplingParams.from_json({"constraint": {"type": "regex", "pattern": "a+"}})
    assert constrained.constraint is not None and constrained.constraint.to_json()["type"] \
        == "regex"


# --- a message nesting its own type ----------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Tree(wt.WireMessage):
    name: str
    children: tuple[Tree, ...] = ()


def test_a_message_nesting_its_own_type_compiles_and_decodes():
    body = {"name": "a", "children": [{"name": "b", "children": [{"name": "c"}]}]}
    expected = Tree("a", (Tree("b", (Tree("c"),)),))
    assert fast_decoder.for_class(Tree)(body, True) == expected
    with pytest.raises(InvalidRequestError, match=r"^Tree\.children\[0\]\.children\[0\]\.name "
                                                  "must be a string, got 1$"):
        Tree.from_wire({"name": "a", "children": [{"name": "b", "children": [{"name": 1}]}]})
