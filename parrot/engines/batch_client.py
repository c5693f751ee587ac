"""`HttpEngine`'s ops on the batched route (batch_wire.py): the Fills, Generates and Frees
asked for in one loop iteration leave in one request, and one reader per request hands each op
the events the engine tags with its id.

Flush: the first op of an iteration schedules the flush with `loop.call_soon`, so every op asked
for before the loop runs its next ready callbacks leaves with it, at most
`MAX_OPS_PER_REQUEST` to a request (one message, and one line of its events, stay small).

Failures: an op's error event fails that op alone. A failure of the request (its HTTP status,
a dropped connection, a stream that ends early or is malformed) fails the request's unfinished
ops, each with its own copy of the error. Deadlines and `abort_requests` act on each op's wait
through the client's guard, as on a request of its own.

Abort: an op whose caller stops waiting (it left a stream early, was cancelled or timed out) is
aborted in the engine: when it was its request's last unfinished op the request's connection
is dropped (the engine aborts what is left of a stream whose client went away), else its id
goes to `POST /v1/engine/abort` with the other aborts of that iteration.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import itertools
import json
import logging
import secrets
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, aclosing
from typing import Any

import aiohttp

from parrot.engines.batch_wire import ABORT_PATH, BATCH_PATH
from parrot.errors import EngineError, EngineUnavailableError, ParrotError, error_from_wire

log = logging.getLogger(__name__)

MAX_OPS_PER_REQUEST = 256
# Where each kind of op goes without the batch route (an engine of the protocol's first version).
OWN_ROUTES = {"fill": "/v1/engine/fill", "generate": "/v1/engine/generate",
              "free": "/v1/engine/free_context"}
_EVENT_KEY = {"fill": "fill", "generate": "chunk", "free": "free"}

Guard = Callable[[float | None], AbstractAsyncContextManager[None]]
OpenStream = Callable[[str, dict[str, Any]], Awaitable[aiohttp.ClientResponse]]
Post = Callable[[str, dict[str, Any]], Awaitable[Any]]


class BatchRouteMissing(Exception):
    """The engine answered the batch route with 404 or 405: the op goes by its own route."""


class Op:
    """One op of a batch: what its caller has not taken yet of its events."""

    __slots__ = ("id", "kind", "body", "events", "waiter", "finished", "request")

    def __init__(self, op_id: str, kind: str, body: dict[str, Any]) -> None:
        self.id = op_id
        self.kind = kind
        self.body = body
        self.events: collections.deque[Any] = collections.deque()  # payloads and errors
        self.waiter: asyncio.Future[None] | None = None
        self.finished = False      # its last event came, or its caller let it go
        self.request: _Request | None = None  # None: not sent yet

    def push(self, item: Any, *, last: bool) -> None:
        self.events.append(item)
        self.finished = self.finished or last
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)


class _Request:
    """One batch request: its unfinished ops by id, the task reading its stream, and the ops
    let go before the engine answered (None once it has: every op is known to it then)."""

    __slots__ = ("ops", "task", "let_go")

    def __init__(self, ops: list[Op]) -> None:
        self.ops = {op.id: op for op in ops}
        self.task: asyncio.Task[None] | None = None
        self.let_go: list[str] | None = []


class OpBatcher:
    def __init__(self, name: str, *, guard: Guard, open_stream: OpenStream, post: Post,
                 answered: Callable[[], None]) -> None:
        self.name = name
        self.supported = True   # False once the engine answered that it has no batch route
        self._guard = guard
        self._open_stream = open_stream
        self._post = post
        self._answered = answered
        # Op ids are unique on the engine among running ops: a random prefix per client.
        self._prefix = secrets.token_hex(4)
        self._count = itertools.count()
        self._queued: list[Op] = []
        self._aborts: list[str] = []
        self._flush_scheduled = False
        self._requests: set[_Request] = set()
        self._abort_posts: set[asyncio.Task[None]] = set()

    def submit(self, kind: str, body: dict[str, Any]) -> Op:
        op_id = f"{self._prefix}-{next(self._count)}"
        op = Op(op_id, kind, {"id": op_id, kind: body})
        self._queued.append(op)
        self._schedule_flush()
        return op

    async def next(self, op: Op, deadline: float | None) -> Any:
        """The op's next event (a payload), or raise its error."""
        async with self._guard(deadline):
            while not op.events:
                op.waiter = asyncio.get_running_loop().create_future()
                await op.waiter
        item = op.events.popleft()
        if isinstance(item, BaseException):
            raise item
        return item

    def release(self, op: Op) -> None:
        """The op's caller is done with it: an unfinished op is aborted in the engine."""
        if op.finished:
            return
        op.finished = True
        request = op.request
        if request is None:
            return  # not sent: the flush leaves it out
        del request.ops[op.id]
        if request.ops and request.let_go is not None:
            request.let_go.append(op.id)  # an abort sent now could reach the engine first
        elif request.ops:
            self._abort_later([op.id])
        elif request.task is not None:
            request.task.cancel()  # its connection dropped: the engine aborts the op

    def close(self, error: ParrotError) -> None:
        """Fail every op at once, what it had not taken yet dropped, and stop every request
        (the client is closing)."""
        for op in self._queued:
            op.push(copy.copy(error), last=True)
        self._queued.clear()
        for request in list(self._requests):
            for op in request.ops.values():
                op.events.clear()
            self._fail(request, error)
            if request.task is not None:
                request.task.cancel()
        for task in self._abort_posts:
            task.cancel()

    # ---- plumbing ----------------------------------------------------------------------------

    def _abort_later(self, ids: list[str]) -> None:
        if ids:
            self._aborts.extend(ids)
            self._schedule_flush()

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        ops = [op for op in self._queued if not op.finished]
        self._queued = []
        for start in range(0, len(ops), MAX_OPS_PER_REQUEST):
            request = _Request(ops[start:start + MAX_OPS_PER_REQUEST])
            for op in request.ops.values():
                op.request = request
            request.task = asyncio.create_task(self._read(request))
            self._requests.add(request)
        aborts, self._aborts = self._aborts, []
        for start in range(0, len(aborts), MAX_OPS_PER_REQUEST):
            task = asyncio.create_task(self._abort(aborts[start:start + MAX_OPS_PER_REQUEST]))
            self._abort_posts.add(task)
            task.add_done_callback(self._abort_posts.discard)

    async def _read(self, request: _Request) -> None:
        resp = None
        try:
            resp = await self._open_stream(
                BATCH_PATH, {"ops": [op.body for op in request.ops.values()]})
            let_go, request.let_go = request.let_go or [], None
            self._abort_later(let_go)
            if resp.status >= 400:
                async with self._guard(None):
                    data = await read_json(resp)
                if resp.status in (404, 405):
                    self.supported = False
                    self._fail(request, BatchRouteMissing())
                else:
                    self._fail(request, error_from_wire(data, resp.status))
                return
            async with aclosing(guarded_lines(resp, self._guard, None, self._answered)) as lines:
                async for line in lines:
                    self._deliver(request, line)
            self._fail(request, EngineUnavailableError(
                f"engine {self.name}: batch stream ended before its ops finished"))
        except ParrotError as exc:
            self._fail(request, exc)
        except Exception as exc:  # a malformed line or event: no op may wait forever
            self._fail(request, EngineError(f"engine {self.name}: malformed batch stream: "
                                            f"{exc!r}"))
        finally:
            self._requests.discard(request)
            if resp is not None:
                resp.release()  # a stream not read to its end closes its connection

    def _deliver(self, request: _Request, line: dict[str, Any]) -> None:
        for event in line["events"]:
            op = request.ops.get(event["id"])
            if op is None:
                continue  # its caller let it go
            if "error" in event:
                op.push(error_from_wire(event, event.get("status", 500)), last=True)
            else:
                payload = event[_EVENT_KEY[op.kind]]
                op.push(payload, last=op.kind != "generate"
                        or payload.get("finish_reason") is not None)
            if op.finished:
                del request.ops[op.id]

    def _fail(self, request: _Request, error: BaseException) -> None:
        for op in request.ops.values():
            op.push(copy.copy(error), last=True)
        request.ops.clear()

    async def _abort(self, ids: list[str]) -> None:
        try:
            await self._post(ABORT_PATH, {"ids": ids})
        except ParrotError as exc:  # best effort: an op not aborted runs to its end for nobody
            log.debug("engine %s: aborting %d ops failed: %r", self.name, len(ids), exc)


# ---- reading replies ---------------------------------------------------------------------------

async def read_json(resp: aiohttp.ClientResponse) -> Any:
    text = await resp.text()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text  # error_from_wire turns an unknown shape into a ParrotError with the status


async def guarded_lines(resp: aiohttp.ClientResponse, guard: Guard, deadline: float | None,
                        answered: Callable[[], None]) -> AsyncGenerator[dict[str, Any], None]:
    """The NDJSON lines of `resp`, each read within `guard(deadline)` (a scope never spans a
    `yield`: the consumer may be anywhere then); `answered()` at each."""
    async with aclosing(ndjson_lines(resp)) as lines:
        while True:
            async with guard(deadline):
                line = await anext(lines, None)
            if line is None:
                return
            answered()
            yield line


async def ndjson_lines(resp: aiohttp.ClientResponse) -> AsyncGenerator[dict[str, Any], None]:
    """Lines of any length (aiohttp's readline caps line size)."""
    buffer = b""
    async for piece in resp.content.iter_any():
        buffer += piece
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.strip():
                yield json.loads(line)
    if buffer.strip():
        yield json.loads(buffer)
