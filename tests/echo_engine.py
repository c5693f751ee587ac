"""An engine for tests that answers its own context: what the manager sent becomes visible."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from parrot.chat import ChatTemplate
from parrot.serve_config import EngineSpec, ServeConfig
from parrot.server.service import ParrotServer
from parrot.engines.protocol import (Engine, EngineInfo, EngineStats, FillRequest, FillResult,
                                     GenerateChunk, GenerateRequest)
from parrot.sampling import SamplingParams


class EchoEngine(Engine):
    """Generate answers the whole context text (the prompt), in 8-character chunks."""

    def __init__(self, template: ChatTemplate | None, delay: float = 0.0) -> None:
        self.template = template
        self.delay = delay
        self.contexts: dict[str, str] = {}
        self.cancelled = 0
        self.samplings: list[SamplingParams] = []   # every Generate's, in arrival order

    async def start(self) -> None: ...
    async def close(self) -> None: ...

    async def info(self) -> EngineInfo:
        return EngineInfo("echo", "echo", "echo-model", 4096, 16, 1024, self.template)

    async def fill(self, request: FillRequest) -> FillResult:
        text = self.contexts.get(request.parent_context_id or "", "") + (request.text or "")
        self.contexts[request.context_id] = self.contexts.get(request.context_id, text) \
            if request.context_id in self.contexts else text
        return FillResult(request.context_id, len(request.text or ""),
                          len(self.contexts[request.context_id]))

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        self.samplings.append(request.sampling)
        text = self.contexts.get(request.context_id) or self.contexts[request.parent_context_id]
        pieces = [text[i:i + 8] for i in range(0, len(text), 8)]
        try:
            for i, piece in enumerate(pieces):
                await asyncio.sleep(self.delay)
                yield GenerateChunk(piece, (0,), "stop" if i == len(pieces) - 1 else None)
        except (asyncio.CancelledError, GeneratorExit):
            self.cancelled += 1
            raise

    async def free_context(self, context_id: str) -> None:
        self.contexts.pop(context_id, None)

    async def stats(self) -> EngineStats:
        return EngineStats(0, 0, 1024, 1024, 16, 0, len(self.contexts))


async def echo_server(template: ChatTemplate | None, delay: float = 0.0) -> ParrotServer:
    server = ParrotServer(ServeConfig.from_mapping({"policy": {"name": "least_queue"}}))
    await server.start(port=0)
    await server.manager.add_engine(EngineSpec(name="echo", in_process=True),
                                    EchoEngine(template, delay))
    return server
