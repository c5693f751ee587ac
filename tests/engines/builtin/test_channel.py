"""The chunk channel between the engine loop and a Generate's reader."""

from __future__ import annotations

import asyncio

import pytest

from parrot.engines.builtin.channel import Channel


async def test_items_come_out_in_order_and_a_waiting_reader_wakes():
    channel: Channel[int] = Channel()
    channel.put(1)
    channel.put(2)
    assert len(channel) == 2
    assert [await channel.get(), await channel.get()] == [1, 2]
    reader = asyncio.create_task(channel.get())
    await asyncio.sleep(0)
    assert not reader.done()          # nothing to read: it waits
    channel.put(3)
    assert await asyncio.wait_for(reader, 1) == 3
    assert len(channel) == 0


async def test_a_cancelled_reader_leaves_the_channel_usable():
    channel: Channel[str] = Channel()
    reader = asyncio.create_task(channel.get())
    await asyncio.sleep(0)
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    channel.put("after")              # no cancelled waiter is woken instead of the next reader
    assert await asyncio.wait_for(channel.get(), 1) == "after"


async def test_items_put_before_the_reader_waits_are_not_lost_to_a_wakeup():
    channel: Channel[int] = Channel()
    reader = asyncio.create_task(channel.get())
    await asyncio.sleep(0)
    channel.put(1)
    channel.put(2)                    # two puts before the reader runs: one wakeup, two items
    assert await reader == 1
    assert await asyncio.wait_for(channel.get(), 1) == 2
