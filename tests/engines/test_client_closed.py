"""A closed HttpEngine stays closed: using it raises (healthz says False) and opens no new
aiohttp session, which nobody would close (an unraisable warning at garbage collection)."""

from __future__ import annotations

import gc

import aiohttp
import pytest

from parrot.engines.client import HttpEngine
from parrot.engines.protocol import GenerateRequest
from parrot.errors import EngineUnavailableError
from parrot.sampling import SamplingParams


def open_sessions() -> int:
    gc.collect()
    # type(), not isinstance(): some objects (torch shims) warn when asked for __class__.
    return sum(type(o) is aiohttp.ClientSession and not o.closed for o in gc.get_objects())


async def test_a_closed_client_opens_no_new_session() -> None:
    before = open_sessions()
    client = HttpEngine("http://127.0.0.1:9", connect_timeout_s=0.5)
    await client.start()
    assert open_sessions() == before + 1
    await client.close()
    assert not await client.healthz()
    with pytest.raises(EngineUnavailableError, match="closed"):
        await client.info()
    with pytest.raises(EngineUnavailableError, match="closed"):
        async for _ in client.generate(GenerateRequest("c", None, SamplingParams())):
            pass
    assert open_sessions() == before


async def test_start_reopens_a_closed_client() -> None:
    before = open_sessions()
    client = HttpEngine("http://127.0.0.1:9", connect_timeout_s=0.5)
    await client.close()
    await client.start()
    try:
        assert open_sessions() == before + 1
    finally:
        await client.close()
    assert open_sessions() == before
