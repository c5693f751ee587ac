"""The batched engine route over raw HTTP (parrot/engines/batch_server.py): many ops in one
request give what their own routes give, a bad op gets its own error, events are coalesced into
few lines, and a client that goes away (or aborts one op) aborts the engine's work."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
from aiohttp import ClientResponse
from aiohttp.test_utils import TestServer

from parrot.engines.batch_server import Outbox
from parrot.engines.protocol import Engine, GenerateChunk
from parrot.engines.server import create_app
from parrot.engines.simulated import SimulatedEngine
from tests.engines.sim_helpers import sim, until_idle

SMALL = {"zero_latency": True, "max_context_len": 256, "block_size": 16, "num_blocks": 64}
SLOW = {"decode_base_ms": 5.0, "decode_per_token_ms": 0.0}


async def started(engine: Engine) -> TestServer:
    server = TestServer(create_app(engine))
    await server.start_server()
    return server


async def post(server: TestServer, path: str, body: Any) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session:
        async with session.post(server.make_url(path), json=body) as resp:
            text = await resp.text()
            if resp.content_type == "application/x-ndjson":
                return resp.status, [json.loads(line) for line in text.splitlines()]
            return resp.status, json.loads(text)


def by_op(lines: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each op's events in order (the `id` left out)."""
    events: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        for event in line["events"]:
            events.setdefault(event["id"], []).append(
                {k: v for k, v in event.items() if k != "id"})
    return events


def joined(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """A Generate's chunks as one: text and token ids concatenated, the last finish_reason,
    the first prompt_len."""
    return {"text": "".join(c["chunk"]["text"] for c in chunks),
            "token_ids": [t for c in chunks for t in c["chunk"]["token_ids"]],
            "finish_reason": chunks[-1]["chunk"]["finish_reason"],
            "prompt_len": chunks[0]["chunk"]["prompt_len"]}


GEN = {"sampling": {"max_tokens": 12, "seed": 3}}
STREAM = {**GEN, "stream": True}


async def test_a_batch_gives_what_the_per_op_routes_give() -> None:
    alone, batched = await started(sim(SMALL)), await started(sim(SMALL))
    try:
        expected = {}
        for i in range(3):
            _, expected[f"f{i}"] = await post(alone, "/v1/engine/fill",
                                              {"context_id": f"p{i}", "text": "x" * (8 * i + 8)})
        for i in range(3):
            _, lines = await post(alone, "/v1/engine/generate",
                                  {"context_id": f"g{i}", "parent_context_id": f"p{i}", **GEN,
                                   "stream": True})
            expected[f"s{i}"] = {"text": "".join(c["text"] for c in lines),
                                 "token_ids": [t for c in lines for t in c["token_ids"]],
                                 "finish_reason": lines[-1]["finish_reason"],
                                 "prompt_len": lines[0]["prompt_len"]}
        _, expected["whole"] = await post(alone, "/v1/engine/generate",
                                          {"context_id": "w", "parent_context_id": "p0", **GEN})
        # both time the first token (not the same run: compared apart from the answer)
        assert expected["whole"].pop("first_token_s") > 0
        _, expected["free"] = await post(alone, "/v1/engine/free_context", {"context_id": "g0"})

        status, lines = await post(batched, "/v1/engine/batch", {"ops": [
            {"id": f"f{i}", "fill": {"context_id": f"p{i}", "text": "x" * (8 * i + 8)}}
            for i in range(3)]})
        assert status == 200
        got = {op: events[0]["fill"] for op, events in by_op(lines).items()}
        status, lines = await post(batched, "/v1/engine/batch", {"ops": [
            *({"id": f"s{i}", "generate": {"context_id": f"g{i}", "parent_context_id": f"p{i}",
                                           **STREAM}} for i in range(3)),
            {"id": "whole", "generate": {"context_id": "w", "parent_context_id": "p0", **GEN,
                                         "stream": False}}]})
        events = by_op(lines)
        got.update({op: joined(events[op]) for op in ("s0", "s1", "s2", "whole")})
        assert len(events["whole"]) == 1  # not streamed: one event with the whole text
        assert events["whole"][0]["chunk"]["first_token_s"] > 0   # ...and its first token's time
        assert len(events["s0"]) > 1
        _, lines = await post(batched, "/v1/engine/batch",
                              {"ops": [{"id": "free", "free": {"context_id": "g0"}}]})
        got["free"] = by_op(lines)["free"][0]["free"]
        assert got == expected
        assert len(expected["s0"]["token_ids"]) == 12
    finally:
        await alone.close()
        await batched.close()


async def test_a_bad_op_gets_its_own_error_and_the_others_succeed() -> None:
    server = await started(sim(SMALL))
    try:
        status, lines = await post(server, "/v1/engine/batch", {"ops": [
            {"id": "ok", "fill": {"context_id": "a", "text": "hello"}},
            {"id": "field", "fill": {"context_id": "b", "text": "x", "temperature": 1}},
            {"id": "parent", "generate": {"context_id": "c", "parent_context_id": "nope"}},
            {"id": "window", "generate": {"context_id": "d", "sampling": {"max_tokens": 257}}},
            {"id": "two", "fill": {"context_id": "e", "text": "x"}, "free": {"context_id": "e"}},
            {"id": "stream", "generate": {"context_id": "f", "stream": "yes"}},
            {"id": "free", "free": {"context_id": "never"}},
            {"id": "gen", "generate": {"context_id": "g", **GEN}},
        ]})
        assert status == 200
        events = by_op(lines)
        errors = {op: (e[-1]["status"], e[-1]["error"]["type"]) for op, e in events.items()
                  if "error" in e[-1]}
        assert errors == {"field": (400, "InvalidRequestError"),
                          "parent": (404, "UnknownContextError"),
                          "window": (400, "InvalidRequestError"),
                          "two": (400, "InvalidRequestError"),
                          "stream": (400, "InvalidRequestError"),
                          "free": (404, "UnknownContextError")}
        assert "temperature" in events["field"][0]["error"]["message"]
        assert "context window of 256" in events["window"][0]["error"]["message"]
        assert events["ok"] == [{"fill": {"context_id": "a", "num_filled_tokens": 2,
                                          "context_len": 2}}]
        assert joined(events["gen"])["finish_reason"] == "length"
        assert len(joined(events["gen"])["token_ids"]) == 12
    finally:
        await server.close()


@pytest.mark.parametrize("body, message", [
    ({"ops": []}, "1-1024 ops"),
    ({"ops": {"id": "a"}}, "list"),
    ({"ops": [{"fill": {"context_id": "a", "text": "x"}}]}, r"batch.ops\[0\].id"),
    ({"ops": [{"id": "", "free": {"context_id": "a"}}]}, r"batch.ops\[0\].id"),
    ({"ops": ["fill"]}, r"batch.ops\[0\] must be an object"),
    ({"ops": [{"id": "a", "free": {"context_id": "a"}}], "stream": True}, "fields"),
    ({"ops": [{"id": str(i), "free": {"context_id": "a"}} for i in range(1025)]}, "1025 items"),
])
async def test_a_malformed_body_is_a_400_for_the_whole_request(body: Any, message: str) -> None:
    engine = sim(SMALL)
    server = await started(engine)
    try:
        status, payload = await post(server, "/v1/engine/batch", body)
        assert (status, payload["error"]["type"]) == (400, "InvalidRequestError")
        assert (await engine.stats()).num_contexts == 0
        assert re.search(message, payload["error"]["message"]), payload
    finally:
        await server.close()


async def test_events_of_one_step_share_a_line() -> None:
    server = await started(sim(SMALL))
    try:
        ops = [{"id": f"g{i}", "generate": {"context_id": f"g{i}", **STREAM}} for i in range(32)]
        _, lines = await post(server, "/v1/engine/batch", {"ops": ops})
        events = by_op(lines)
        assert {op: len(joined(e)["token_ids"]) for op, e in events.items()} == \
            {f"g{i}": 12 for i in range(32)}
        # alone, each Generate streams a line per step: 12 each, 384 in all
        _, alone = await post(server, "/v1/engine/generate",
                              {"context_id": "solo", **GEN, "stream": True})
        assert len(alone) == 12
        assert len(lines) <= 13 < sum(len(e) for e in events.values())
        for line in lines:  # an op has at most one event in a line
            ids = [e["id"] for e in line["events"]]
            assert len(ids) == len(set(ids))
    finally:
        await server.close()


class _Lines:
    """A response that keeps what is written to it."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    async def write(self, data: bytes) -> None:
        self.lines.append(json.loads(data))


async def test_an_ops_chunks_that_wait_for_the_writer_merge_into_one_event() -> None:
    outbox = Outbox(2)
    outbox.chunk("a", GenerateChunk("he", (1, 2), prompt_len=7))   # the first chunk's, kept
    outbox.put({"id": "b", "fill": {"context_id": "b", "num_filled_tokens": 1,
                                    "context_len": 1}})
    outbox.finished()
    outbox.chunk("a", GenerateChunk("llo", (3,)))
    outbox.chunk("a", GenerateChunk("!", (4,), "length"))
    outbox.finished()
    response = _Lines()
    await asyncio.wait_for(outbox.write_all(response), 1)  # type: ignore[arg-type]
    assert response.lines == [{"events": [
        {"id": "a", "chunk": {"text": "hello!", "token_ids": [1, 2, 3, 4],
                              "finish_reason": "length", "prompt_len": 7}},
        {"id": "b", "fill": {"context_id": "b", "num_filled_tokens": 1, "context_len": 1}}]}]


def streamed(op_id: str, context_id: str, max_tokens: int) -> dict[str, Any]:
    return {"id": op_id, "generate": {"context_id": context_id, "stream": True, "sampling": {
        "max_tokens": max_tokens, "ignore_eos": True}}}


@asynccontextmanager
async def slow_stream(ops: list[dict[str, Any]]
                      ) -> AsyncIterator[tuple[SimulatedEngine, TestServer, ClientResponse]]:
    """A slow engine's server, and a batch stream of `ops` on it with its first line read."""
    engine = sim(SLOW)
    server = await started(engine)
    try:
        async with aiohttp.ClientSession() as session:
            resp = await session.post(server.make_url("/v1/engine/batch"), json={"ops": ops})
            try:
                assert json.loads(await resp.content.readline())["events"]
                yield engine, server, resp
            finally:
                resp.close()
    finally:
        await server.close()


async def test_a_client_that_goes_away_aborts_its_ops() -> None:
    async with slow_stream([streamed(f"g{i}", f"g{i}", 5000) for i in range(3)]) as (
            engine, _, resp):
        assert (await engine.stats()).num_running == 3
        resp.close()  # drop the connection mid-stream
        await until_idle(engine)
        # each aborted, with every token decoded for it (what its context kept)
        stats = await engine.stats()
        assert stats.counter("aborted_generates") == 3
        assert stats.counter("aborted_decode_tokens") == stats.num_tokens_in_use > 0


async def test_the_abort_route_aborts_one_op_and_the_others_run_on() -> None:
    async with slow_stream([streamed("long", "a", 5000), streamed("short", "b", 40)]) as (
            engine, server, resp):
        status, reply = await post(server, "/v1/engine/abort", {"ids": ["long", "other"]})
        assert (status, reply) == (200, {"aborted": ["long"]})
        events = by_op([json.loads(line) for line in (await resp.read()).splitlines()])
        assert events["long"][-1]["error"]["message"] == "op 'long' was aborted"
        assert joined(events["short"])["finish_reason"] == "length"
        await until_idle(engine)
        stats = await engine.stats()
        assert stats.num_contexts == 2
        assert stats.counter("aborted_generates") == 1    # the short one finished: not counted
        assert stats.counter("aborted_decode_tokens") == stats.num_tokens_in_use - 40 > 0
        status, reply = await post(server, "/v1/engine/abort", {"ids": ["long"]})
        assert (status, reply) == (200, {"aborted": []})  # finished ops are gone
        status, reply = await post(server, "/v1/engine/abort", {"ids": "long"})
        assert (status, reply["error"]["type"]) == (400, "InvalidRequestError")


async def test_an_op_id_already_running_is_a_conflict_for_that_op() -> None:
    async with slow_stream([streamed("x", "a", 30)]) as (_, server, _):
        status, lines = await post(server, "/v1/engine/batch", {"ops": [
            {"id": "x", "fill": {"context_id": "b", "text": "hi"}},
            {"id": "y", "fill": {"context_id": "c", "text": "hi"}}]})
        events = by_op(lines)
        assert (events["x"][0]["status"], events["x"][0]["error"]["type"]) == \
            (409, "ConflictError")
        assert events["y"][0]["fill"]["context_id"] == "c"
