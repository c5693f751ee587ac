"""Streams tell the truth (parrot/manager/streams.py): the pieces a reader gets concatenate to the
final value, or the stream ends with an error; a stream is a `get` (its timeout, its limit)."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from parrot.manager.nodes import Variable
from parrot.manager.streams import follow
from parrot.errors import StreamResetError
from tests.server.front_door import call, config, new_session, running


async def _read(var: Variable, into: list[str]) -> None:
    async for piece in follow(var):
        into.append(piece)


async def test_a_rerun_that_agrees_with_what_was_streamed_continues_it():
    var = Variable("v-1", "s-1", "y")
    pieces: list[str] = []
    reader = asyncio.create_task(_read(var, pieces))
    var.stream.begin_attempt()
    var.stream.push("The cap", 2, None)
    await asyncio.sleep(0)
    var.stream.begin_attempt()            # the engine died: a greedy re-run repeats itself
    var.stream.push("The capital is", 4, None)
    await asyncio.sleep(0)
    var.set_value("The capital is Paris")
    await reader
    assert "".join(pieces) == "The capital is Paris"


async def test_a_rerun_that_took_another_path_ends_the_stream_with_an_error():
    var = Variable("v-1", "s-1", "y")
    pieces: list[str] = []
    reader = asyncio.create_task(_read(var, pieces))
    var.stream.begin_attempt()
    var.stream.push("The cap", 2, None)
    await asyncio.sleep(0)
    var.stream.begin_attempt()            # a sampled re-run: other text
    var.stream.push("Paris, of course", 4, None)
    await asyncio.sleep(0)
    var.set_value("Paris, of course.")
    with pytest.raises(StreamResetError):
        await reader
    assert pieces == ["The cap"]          # nothing that is not a prefix of the value


async def _stream_events(http, sid, vid, auth, timeout_s=10.0):
    url = f"/v1/variables/{vid}/stream?session_id={sid}"
    async with http.get(url, headers=auth, timeout=aiohttp.ClientTimeout(total=timeout_s)) as r:
        if r.status != 200:
            return r.status, await r.json()
        return r.status, (await r.read()).decode()


async def test_a_stream_ends_with_the_gets_timeout():
    async with running(config({"default_get_timeout_s": 0.5})) as (_, http):
        sid, auth = await new_session(http)
        _, var, _ = await call(http, "POST", "/v1/variables", {"session_id": sid}, auth)
        status, text = await asyncio.wait_for(
            _stream_events(http, sid, var["semantic_var_id"], auth), 5)
        assert status == 200 and "GetTimeoutError" in text and text.endswith("[DONE]\n\n"), text


async def test_streams_count_against_the_sessions_waiting_limit():
    async with running(config({"max_waiting_gets_per_session": 2})) as (_, http):
        sid, auth = await new_session(http)
        _, var, _ = await call(http, "POST", "/v1/variables", {"session_id": sid}, auth)
        vid = var["semantic_var_id"]
        held = [asyncio.create_task(_stream_events(http, sid, vid, auth)) for _ in range(2)]
        await asyncio.sleep(0.3)
        status, reply = await _stream_events(http, sid, vid, auth)
        assert status == 429 and reply["error"]["type"] == "TooManyRequestsError", reply
        status, reply, _ = await call(http, "POST", "/v1/get",
                                      {"session_id": sid, "semantic_var_id": vid}, auth)
        assert status == 429
        await call(http, "POST", f"/v1/variables/{vid}", {"session_id": sid, "value": "x"}, auth)
        for status, text in await asyncio.gather(*held):
            assert status == 200 and '{"text":"x"}' in text
