"""Work-around: free the manager's cached prefix contexts when an engine's KV cache is full.

The manager keeps a call's prefix contexts cached after the call ends ("until the engine needs
the memory", parrot/core/contexts.py) but evicts them only when an engine *raises*
OutOfKVCacheError (executor.run_call). The simulated engine never raises for a pool that is
merely full: it queues the request until a FreeContext returns blocks. In baseline mode every
rendered prompt is leading template text and gets cached, so after ~50k tokens of calls every
request waits for blocks that only an eviction would free, and the run deadlocks.

`EvictingEngine` wraps an engine and, before a Fill or Generate that would not fit in the free
blocks, asks the manager's `EngineContexts` for that engine to evict least-recently-used
unreferenced contexts. This is the eviction the manager documents, done at the engine boundary.
"""

from __future__ import annotations

from typing import AsyncIterator

from parrot.core.contexts import EngineContexts
from parrot.engines.protocol import (Engine, EngineInfo, EngineStats, FillRequest, FillResult,
                                     GenerateChunk, GenerateRequest)
from parrot.engines.simulated import count_tokens


class EvictingEngine(Engine):
    def __init__(self, inner: Engine) -> None:
        self.inner = inner
        self.contexts: EngineContexts | None = None  # set once the manager registered it
        self.num_evicted_tokens = 0

    async def _make_room(self, num_tokens: int) -> None:
        if self.contexts is None:
            return
        stats = await self.inner.stats()
        free = stats.num_blocks_free * stats.block_size
        need = num_tokens + 2 * stats.block_size  # a forked partial block, a new last block
        if need > free:
            self.num_evicted_tokens += await self.contexts.evict(need - free)

    async def start(self) -> None:
        await self.inner.start()

    async def close(self) -> None:
        await self.inner.close()

    async def info(self) -> EngineInfo:
        return await self.inner.info()

    async def fill(self, request: FillRequest) -> FillResult:
        n = len(request.token_ids) if request.token_ids is not None \
            else count_tokens(request.text or "")
        await self._make_room(n)
        return await self.inner.fill(request)

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        await self._make_room(request.sampling.max_tokens)
        async for chunk in self.inner.generate(request):
            yield chunk

    async def free_context(self, context_id: str) -> None:
        await self.inner.free_context(context_id)

    async def stats(self) -> EngineStats:
        return await self.inner.stats()

    async def healthz(self) -> bool:
        return await self.inner.healthz()
