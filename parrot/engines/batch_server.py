"""The engine server's batched routes (shapes: batch_wire.py; docs/ENGINE_PROTOCOL.md).

`POST /v1/engine/batch` runs every op of its body at once, each as its own route would (an op
starts in its body's order), and answers one NDJSON stream. Its writer sends, per wake-up, one
line with every event that became ready since its last line: while a line is being written
the next one fills, so a busy stream sends fewer, larger lines, and the chunks of one Generate
in one line merge into one. The stream ends when every op has had its last event. A client
that goes away aborts its stream's unfinished ops, as closing a streamed Generate does.

`POST /v1/engine/abort` `{"ids": [...]}` aborts single ops of any stream (their last event is
an error); it answers `{"aborted": [the ids that were still running]}`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any, cast

from aiohttp import web

from parrot.engines.batch_wire import (BatchOp, FreeRequest, GenerateOp, OpRequest, error_event,
                                       parse_abort, parse_batch)
from parrot.engines.protocol import Engine, FillRequest, GenerateChunk
from parrot.engines.server_io import NDJSON, ContextWindow, is_disconnect, json_body, ndjson_line
from parrot.errors import ConflictError, EngineError, ParrotError

log = logging.getLogger(__name__)


class Outbox:
    """The events of one batch stream not written yet, and how many of its ops are unfinished."""

    def __init__(self, num_ops: int) -> None:
        self._events: list[dict[str, Any]] = []
        # op id -> its unfinished chunk event among _events: a later chunk merges into it
        self._open_chunks: dict[str, dict[str, Any]] = {}
        self._unfinished = num_ops
        self._ready = asyncio.Event()

    def put(self, event: dict[str, Any]) -> None:
        self._events.append(event)
        self._ready.set()

    def chunk(self, op_id: str, chunk: GenerateChunk) -> None:
        event = self._open_chunks.get(op_id)
        if event is None:
            event = {"id": op_id, "chunk": chunk.to_wire()}
            self.put(event)
        else:
            merged = event["chunk"]
            merged["text"] += chunk.text
            merged["token_ids"].extend(chunk.token_ids)
            merged["finish_reason"] = chunk.finish_reason
        if chunk.is_finished:
            self._open_chunks.pop(op_id, None)
        else:
            self._open_chunks[op_id] = event

    def finished(self) -> None:
        """One op had its last event."""
        self._unfinished -= 1
        self._ready.set()

    async def write_all(self, response: web.StreamResponse) -> None:
        """Write lines until every op is finished and its events are out."""
        while self._unfinished or self._events:
            await self._ready.wait()
            self._ready.clear()
            if not self._events:
                continue
            events, self._events = self._events, []
            self._open_chunks.clear()
            await response.write(ndjson_line({"events": events}))


class BatchRoutes:
    def __init__(self, engine: Engine, window: ContextWindow) -> None:
        self.engine = engine
        self.window = window
        self._running: dict[str, asyncio.Task[None]] = {}  # op id -> its task, of every stream

    async def batch(self, request: web.Request) -> web.StreamResponse:
        ops = parse_batch(await json_body(request))
        outbox = Outbox(len(ops))
        # Every op is known (abortable) before the reply's headers leave: a client may abort
        # any of them once it has them.
        tasks = [task for op in ops if (task := self._start(op, outbox)) is not None]
        response = web.StreamResponse(headers={"Content-Type": NDJSON})
        try:
            await response.prepare(request)
            await outbox.write_all(response)
            await response.write_eof()
        except Exception as exc:
            if not is_disconnect(exc):
                raise
            log.info("batch stream closed by the client: %r", exc)
        finally:
            # The client went away (or the handler failed): abort what is left in the engine.
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return response

    async def abort(self, request: web.Request) -> web.Response:
        ids = parse_abort(await json_body(request))
        aborted = [op_id for op_id in ids
                   if (task := self._running.get(op_id)) is not None and task.cancel()]
        return web.json_response({"aborted": aborted})

    def _start(self, op: BatchOp, outbox: Outbox) -> asyncio.Task[None] | None:
        request = op.request
        if not isinstance(request, ParrotError) and op.id in self._running:
            request = ConflictError(f"op id {op.id!r} is already running on this engine")
        if isinstance(request, ParrotError):
            outbox.put(error_event(op.id, request))
            outbox.finished()
            return None
        task = asyncio.create_task(self._run(op.id, request, outbox))
        self._running[op.id] = task
        return task

    async def _run(self, op_id: str, request: OpRequest, outbox: Outbox) -> None:
        try:
            if isinstance(request, FillRequest):
                result = await self.engine.fill(request)
                outbox.put({"id": op_id, "fill": result.to_wire()})
            elif isinstance(request, FreeRequest):
                await self.engine.free_context(request.context_id)
                outbox.put({"id": op_id, "free": request.to_wire()})
            else:
                await self._generate(op_id, request, outbox)
        except ParrotError as exc:
            outbox.put(error_event(op_id, exc))
        except asyncio.CancelledError:
            # aborted (the abort route, or the stream's client went away): nobody waits for it
            outbox.put(error_event(op_id, EngineError(f"op {op_id!r} was aborted")))
        except Exception as exc:
            log.exception("batch op %s failed", op_id)
            outbox.put(error_event(op_id, ParrotError(f"internal error: {exc!r}")))
        finally:
            outbox.finished()
            if self._running.get(op_id) is asyncio.current_task():
                del self._running[op_id]

    async def _generate(self, op_id: str, op: GenerateOp, outbox: Outbox) -> None:
        await self.window.check(op.request)
        if not op.stream:
            # one finished event, the whole answer with the first token's time (first_token_s:
            # the manager's TTFT of a call nobody streamed)
            result = await self.engine.generate_all(op.request)
            outbox.put({"id": op_id, "chunk": result.to_wire()})
            return
        # Every engine's generate is an async generator (the protocol declares AsyncIterator).
        chunks = cast(AsyncGenerator[GenerateChunk, None], self.engine.generate(op.request))
        async with aclosing(chunks):  # closing it early aborts the request in the engine
            async for chunk in chunks:
                outbox.chunk(op_id, chunk)
                if chunk.is_finished:
                    return
        raise EngineError(f"op {op_id!r}: the engine's generate ended before its last chunk")
