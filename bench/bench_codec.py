"""The wire codec against msgspec: decode cost per message and the errors a client gets.

Decodes the manager API's hottest messages from their JSON bytes, three ways:

  * today: `json.loads` + `WireMessage.from_wire` (parrot/wire_types/codec.py): structure,
    types and the messages' value rules (`__post_init__`), errors naming the field path;
  * `json.loads` alone: the floor of any decoder that starts from the stdlib parser;
  * msgspec: `msgspec.json.decode(body, type=...)` into Structs mirroring the same messages
    (structure and types only: the value rules would still have to run after it).

Then prints, for a few bad bodies, the error each gives (docs/results/codec_compare.md; the
decision, beside the manager's profile: docs/results/manager_profile.md).

    python bench/bench_codec.py [--repeat 20000] [--out docs/results/codec_compare.md]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import timeit
from pathlib import Path
from typing import Any, Literal

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from parrot.errors import InvalidRequestError  # noqa: E402
from report import record  # noqa: E402
from parrot.wire_types import SubmitBatchRequest, SubmitRequest  # noqa: E402

try:
    import msgspec
except ImportError:  # the lab's own dependency, not the product's
    sys.exit("bench_codec needs msgspec: pip install msgspec")


# --- the same messages as msgspec Structs (structure and types only) ------------------------

class Ref(msgspec.Struct, forbid_unknown_fields=True):
    call: int
    output: str


class Placeholder(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    in_out: Literal["input", "output"]
    semantic_var_id: str | None = None
    value: str | None = None
    transforms: list[Any] = []
    sampling: dict[str, Any] | None = None
    ref: Ref | None = None
    criteria: Literal["latency", "throughput"] | None = None


class Submit(msgspec.Struct, forbid_unknown_fields=True):
    session_id: str
    prompt: str
    placeholders: list[Placeholder] = []
    sampling: dict[str, Any] = {}
    wait: bool = False
    stream: list[str] = []
    chat: bool | dict[str, Any] | None = None


class Call(msgspec.Struct, forbid_unknown_fields=True):
    prompt: str
    placeholders: list[Placeholder] = []
    sampling: dict[str, Any] = {}
    stream: list[str] = []
    chat: bool | dict[str, Any] | None = None


class Batch(msgspec.Struct, forbid_unknown_fields=True):
    calls: list[Call]
    session_id: str | None = None


# --- the messages ----------------------------------------------------------------------------

SUBMIT: dict[str, Any] = {
    "session_id": "s-0123456789abcdef", "prompt": "Go on: {{input:x}} {{output:y}}",
    "placeholders": [{"name": "x", "in_out": "input", "value": "start"},
                     {"name": "y", "in_out": "output", "criteria": "latency"}],
    "sampling": {"max_tokens": 4, "temperature": 0.7}}
BATCH: dict[str, Any] = {"session_id": "s-0123456789abcdef", "calls": [
    {"prompt": "Go on: {{input:x}} {{output:y}}", "sampling": {"max_tokens": 4},
     "placeholders": [{"name": "x", "in_out": "input", "value": "start"} if i == 0 else
                      {"name": "x", "in_out": "input", "ref": {"call": i - 1, "output": "y"}}]}
    for i in range(10)]}

BAD: list[tuple[str, dict[str, Any]]] = [
    ("wrong type, nested", {**SUBMIT, "placeholders": [SUBMIT["placeholders"][0],
                                                       {"name": 7, "in_out": "output"}]}),
    ("bad enum value", {**SUBMIT, "placeholders": [{"name": "x", "in_out": "inout",
                                                    "value": "v"}]}),
    ("unknown field", {**SUBMIT, "promt": "typo"}),
    ("missing field", {"session_id": "s-1"}),
    ("value rule (input bound twice)", {**SUBMIT, "placeholders": [
        {"name": "x", "in_out": "input", "value": "v", "semantic_var_id": "v-1"}]}),
]


def _ours(body: bytes, cls: type[SubmitRequest] | type[SubmitBatchRequest]) -> object:
    return cls.from_wire(json.loads(body))


def _timings(repeat: int) -> list[tuple[str, float, float, float]]:
    rows = []
    for name, message, cls, struct in (("submit", SUBMIT, SubmitRequest, Submit),
                                       ("submit_batch of 10", BATCH, SubmitBatchRequest, Batch)):
        body = json.dumps(message).encode()
        decoder = msgspec.json.Decoder(struct)
        per = []
        for fn in (lambda b=body, c=cls: _ours(b, c), lambda b=body: json.loads(b),
                   lambda b=body, d=decoder: d.decode(b)):
            best = min(timeit.repeat(fn, number=repeat, repeat=3)) / repeat
            per.append(best * 1e6)
        rows.append((name, per[0], per[1], per[2]))
    return rows


def _errors() -> list[tuple[str, str, str]]:
    rows = []
    for what, message in BAD:
        body = json.dumps(message).encode()
        try:
            _ours(body, SubmitRequest)
            ours = "(accepted)"
        except InvalidRequestError as exc:
            ours = str(exc)
        try:
            msgspec.json.decode(body, type=Submit)
            theirs = "(accepted: a value rule, not a type)"
        except msgspec.ValidationError as exc:
            theirs = str(exc)
        rows.append((what, ours, theirs))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=20000)
    parser.add_argument("--out", default=None, help="write the tables to this markdown file")
    args = parser.parse_args()
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"### bench_codec — {now} — {platform.node()} ({os.cpu_count()} cores, "
             f"Python {platform.python_version()}, msgspec {msgspec.__version__})", "",
             f"`python bench/bench_codec.py --repeat {args.repeat}` (best of 3, µs per message)",
             "", "| message | today: json.loads + from_wire | json.loads alone "
             "| msgspec decode (types only) |", "|---|---:|---:|---:|"]
    for name, ours, floor, theirs in _timings(args.repeat):
        lines.append(f"| {name} | {ours:.1f} | {floor:.1f} | {theirs:.1f} |")
    lines += ["", "| bad body | today's error | msgspec's error |", "|---|---|---|"]
    for what, ours, theirs in _errors():
        lines.append(f"| {what} | `{ours}` | `{theirs}` |")
    table = "\n".join(lines) + "\n"
    print(table)
    record(table, Path(args.out) if args.out else None)


if __name__ == "__main__":
    main()
