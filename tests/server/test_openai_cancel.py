"""A client that goes away cancels its OpenAI request all the way down: the private session is
deleted and the engine stops generating for it (streamed or not)."""

from __future__ import annotations

import asyncio

import aiohttp

from tests.server.front_door import SLOW_ENGINE, config, running


async def _engine_idle(server, within_s: float) -> bool:
    engine = next(iter(server.manager.engines)).engine
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while loop.time() < deadline:
        stats = await engine.stats()
        if stats.num_running == 0 and stats.num_waiting == 0 and not server.manager.sessions:
            return True
        await asyncio.sleep(0.05)
    return False


async def test_a_client_leaving_a_non_streamed_completion_aborts_its_generation():
    async with running(config(engine=SLOW_ENGINE)) as (server, http):
        body = {"model": "simulated", "prompt": "hello", "max_tokens": 2000, "n": 2}
        try:
            async with http.post("/v1/completions", json=body,
                                 timeout=aiohttp.ClientTimeout(total=0.5)) as resp:
                await resp.read()
        except TimeoutError:
            pass
        else:
            raise AssertionError("a 2,000-token completion finished in 0.5 s")
        engine = next(iter(server.manager.engines)).engine
        assert await _engine_idle(server, 2.0), await engine.stats()


async def test_a_client_leaving_a_chat_completion_aborts_it_too():
    async with running(config(engine=SLOW_ENGINE)) as (server, http):
        body = {"model": "simulated", "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 2000}
        try:
            async with http.post("/v1/chat/completions", json=body,
                                 timeout=aiohttp.ClientTimeout(total=0.5)) as resp:
                await resp.read()
        except TimeoutError:
            pass
        assert await _engine_idle(server, 2.0)
