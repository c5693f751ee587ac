"""Simulated engines for the engine-protocol tests, and a wait until one has nothing to do."""

from __future__ import annotations

import asyncio
from typing import Any

from parrot.engines.simulated import SimulatedEngine, SimulatedEngineConfig


def sim(params: dict[str, Any]) -> SimulatedEngine:
    return SimulatedEngine("sim", SimulatedEngineConfig.from_mapping(params))


async def until_idle(engine: SimulatedEngine, seconds: float = 3.0) -> None:
    """Wait until nothing runs or waits in `engine`; fail after `seconds`."""
    for _ in range(int(seconds / 0.01)):
        stats = await engine.stats()
        if stats.num_running == 0 and stats.num_waiting == 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"engine still busy: {await engine.stats()}")
