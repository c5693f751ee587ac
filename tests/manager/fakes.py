"""Test doubles for manager tests: an in-process engine that records the protocol traffic."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from typing import TYPE_CHECKING
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from parrot.engines.protocol import (Engine, EngineInfo, EngineStats, FillRequest, FillResult,
                                     GenerateChunk, GenerateRequest)
from parrot.errors import ContextExistsError, EngineUnavailableError, UnknownContextError

if TYPE_CHECKING:
    from parrot.manager.manager import Manager


@dataclass
class RecordingEngine(Engine):
    """Keeps each context's full text; Generate answers `gen(<hash of the context text>)`.

    `delay` seconds per operation (on the loop clock) lets tests overlap calls; `fail_next`
    makes the next operation raise EngineUnavailableError.
    """

    name: str = "fake"
    delay: float = 0.0
    outputs: dict[str, str] = field(default_factory=dict)   # context text suffix -> answer
    contexts: dict[str, str] = field(default_factory=dict)
    log: list[tuple[str, str, str | None]] = field(default_factory=list)
    priorities: dict[str, int] = field(default_factory=dict)  # context id -> last priority
    fail_next: int = 0
    capacity_blocks: int = 1 << 16
    alive: bool = True        # what healthz answers (a dead engine also fails its operations)
    window: int = 1 << 20     # max_context_len
    prompt_in_generate: bool = False   # takes a prompt in a Generate (says so in its info)

    async def start(self) -> None: ...
    async def close(self) -> None: ...

    async def info(self) -> EngineInfo:
        return EngineInfo(self.name, "fake", "fake", self.window, 16, self.capacity_blocks,
                          takes_prompt_in_generate=self.prompt_in_generate)

    async def healthz(self) -> bool:
        return self.alive

    def open_context(self, context_id: str, parent: str | None) -> str:
        if self.fail_next or not self.alive:
            self.fail_next = max(self.fail_next - 1, 0)
            raise EngineUnavailableError("injected failure")
        if context_id in self.contexts:
            if parent is not None:
                raise ContextExistsError(context_id)
            return self.contexts[context_id]
        if parent is not None and parent not in self.contexts:
            raise UnknownContextError(parent)
        self.contexts[context_id] = self.contexts[parent] if parent else ""
        return self.contexts[context_id]

    async def fill(self, request: FillRequest) -> FillResult:
        await asyncio.sleep(self.delay)
        self.open_context(request.context_id, request.parent_context_id)
        self.log.append(("fill", request.context_id, request.parent_context_id))
        self.priorities[request.context_id] = request.priority
        self.contexts[request.context_id] += request.text or ""
        n = -(-len(request.text or "") // 4)
        return FillResult(request.context_id, n, -(-len(self.contexts[request.context_id]) // 4))

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        await asyncio.sleep(self.delay)
        assert self.prompt_in_generate or not request.has_prompt, "not in its info"
        text = self.open_context(request.context_id, request.parent_context_id)
        self.log.append(("generate", request.context_id, request.parent_context_id))
        self.priorities[request.context_id] = request.priority
        prompt_len = None
        if request.has_prompt:
            text = self.contexts[request.context_id] = text + (request.text or "")
            prompt_len = -(-len(text) // 4)
        answer = next((v for k, v in self.outputs.items() if text.endswith(k)), None)
        if answer is None:
            answer = "gen(" + hashlib.sha1(text.encode()).hexdigest()[:8] + ")"
        self.contexts[request.context_id] += answer
        yield GenerateChunk(answer, (1,), "length", prompt_len)

    async def free_context(self, context_id: str) -> None:
        if context_id not in self.contexts:
            raise UnknownContextError(context_id)
        del self.contexts[context_id]
        self.log.append(("free", context_id, None))

    async def stats(self) -> EngineStats:
        return EngineStats(0, 0, 1 << 16, 1 << 16, 16, 0, len(self.contexts))


@contextlib.asynccontextmanager
async def manager_with_recording_engine() -> AsyncIterator[Manager]:
    """A started least-queue Manager with one RecordingEngine "e0", closed on exit."""
    from parrot.serve_config import EngineSpec
    from parrot.manager.manager import Manager
    from parrot.policies.least_queue import LeastQueuePolicy

    manager = Manager(LeastQueuePolicy())
    await manager.start()
    try:
        await manager.add_engine(EngineSpec(name="e0", in_process=True), RecordingEngine())
        yield manager
    finally:
        await manager.close()
