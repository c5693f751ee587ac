"""A measuring wrapper around an in-process engine: peak KV use and time per output token.

`ProbedEngine` forwards the engine protocol unchanged and, after every Fill and every
generated chunk, reads the engine's stats (cheap for an in-process engine) to keep the peak
number of KV blocks in use; per Generate it records the time from its first chunk to its last
over the tokens in between (time per output token after the first, TPOT).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from collections.abc import AsyncIterator

from parrot.engines.protocol import (Engine, EngineInfo, EngineStats, FillRequest, FillResult,
                                     GenerateChunk, GenerateRequest)
from parrot.engines.tpot import TpotMeter


@dataclass
class ProbeReadings:
    peak_blocks_used: int = 0
    block_size: int = 0
    tpot_s: list[float] = field(default_factory=list)

    @property
    def peak_kv_tokens(self) -> int:
        return self.peak_blocks_used * self.block_size


class ProbedEngine(Engine):
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.readings = ProbeReadings()

    async def start(self) -> None:
        await self.engine.start()

    async def close(self) -> None:
        await self.engine.close()

    async def info(self) -> EngineInfo:
        return await self.engine.info()

    async def fill(self, request: FillRequest) -> FillResult:
        result = await self.engine.fill(request)
        await self._sample()
        return result

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        timer = TpotMeter().timer()     # the engines' own rule (parrot/engines/tpot.py)
        first = True
        async for chunk in self.engine.generate(request):
            # Recorded before the chunk is handed on: a consumer may stop iterating at the
            # finished chunk (the executor does), and code after the loop would not run.
            tpot = timer.observe(chunk)
            if first:
                first = False
                await self._sample()
            if tpot is not None:
                self.readings.tpot_s.append(tpot)
            yield chunk

    async def free_context(self, context_id: str) -> None:
        await self.engine.free_context(context_id)

    async def stats(self) -> EngineStats:
        return await self.engine.stats()

    async def healthz(self) -> bool:
        return await self.engine.healthz()

    async def _sample(self) -> None:
        stats = await self.engine.stats()
        used = stats.num_blocks_total - stats.num_blocks_free
        self.readings.block_size = stats.block_size
        self.readings.peak_blocks_used = max(self.readings.peak_blocks_used, used)

    def describe(self) -> dict[str, Any]:
        return {"peak_kv_blocks": self.readings.peak_blocks_used,
                "peak_kv_tokens": self.readings.peak_kv_tokens}
