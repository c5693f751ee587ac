"""The client's Session: submits semantic-function calls and reads Semantic Variables.

Calls return `SemanticVariable` handles at once; the submissions run as tasks in order on the
session's event loop (the running one for `async with`, a private one for `with`, driven by the
blocking `get`). Two modes:

* "parrot" — the template and its variable bindings go to the service; dependent calls run
  inside it; only `submit` and `get` cross the network.
* "baseline" — request-level serving as with LangChain + FastChat: the client waits for each
  input value, renders the prompt itself and sends one blocking completion per call (a submit
  with `wait`, whose reply carries the generated text).

The session opens when the `with` block starts (`POST /v1/sessions`, a round trip), or, with
`defer_open=True`, with the program's first `submit_batch`, which then carries no session id
and opens the session on its way (docs/HTTP_API.md): a client that opens one session per
application saves that round trip. A request the first batch cannot carry (a variable created
or a graph read before any call) opens the session on its own first.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
from dataclasses import dataclass
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from parrot.errors import InvalidRequestError
from parrot.frontend.active import activate, deactivate
from parrot.frontend.function import SemanticFunction
from parrot.frontend.transport import (Delay, HttpTransport, InProcessTransport,
                                       SessionCredentials, Transport)
from parrot.frontend.variable import SemanticVariable
from parrot.transforms import apply_transforms
from parrot.types import Criterion
from parrot.wire_types import (BatchCall, BatchRef, BatchReply, CreateVariableRequest, ErrorReply,
                               Graph, PlaceholderSpec, SessionCreated, SessionDeleted,
                               SessionStats, SubmitBatchRequest, SubmitReply, SubmitRequest,
                               VariableId, WireMessage)

if TYPE_CHECKING:
    from parrot.manager.manager import Manager

R = TypeVar("R", bound=WireMessage)

MODES = ("parrot", "baseline")


@dataclass(frozen=True)
class _PendingCall:
    fn: SemanticFunction
    inputs: dict[str, Any]
    outputs: tuple[SemanticVariable, ...]


def _awaited_at_once(batch: list[_PendingCall]) -> bool:
    """Whether the batch waits for its awaited outputs: when the program already awaits every
    output of the batch that no call of the batch consumes (its results), it can do nothing
    with the batch's reply before those values exist, so they come with the reply and the
    program costs one round trip, as a request-level client's completion does. Otherwise
    the reply comes at once (a program that goes on needs the ids)."""
    consumed = {id(value) for pending in batch for value in pending.inputs.values()}
    results = [var for pending in batch for var in pending.outputs if id(var) not in consumed]
    return bool(results) and all(var.awaited for var in results)


class Session:
    def __init__(self, url: str | None = None, *, manager: Manager | None = None,
                 transport: Transport | None = None, mode: str = "parrot",
                 delay: Delay | None = None, defer_open: bool = False) -> None:
        if mode not in MODES:
            raise InvalidRequestError(f"unknown session mode {mode!r}; allowed: {list(MODES)}")
        if sum(x is not None for x in (url, manager, transport)) != 1:
            raise InvalidRequestError("give exactly one of url, manager and transport")
        if url is not None:
            transport = HttpTransport(url, delay)
        elif manager is not None:
            transport = InProcessTransport(manager, delay)
        assert transport is not None
        self.transport = transport
        self.mode = mode
        self.defer_open = defer_open
        self.credentials: SessionCredentials | None = None
        self._opening: asyncio.Future[Any] | None = None   # set once the open has begun
        self._loop: asyncio.AbstractEventLoop | None = None
        self._owns_loop = False
        self._last_submit: asyncio.Future[Any] | None = None
        self._batch: list[_PendingCall] = []
        self._tasks: list[asyncio.Future[Any]] = []
        self._token: contextvars.Token[Session] | None = None

    # --- context management ---------------------------------------------------------------

    # The "current session" context variable is set and reset here, in the caller's context,
    # not inside the open/close coroutines (a sync session runs those as tasks with their own
    # context copy).

    async def __aenter__(self) -> Session:
        self._loop = asyncio.get_running_loop()
        if not self.defer_open:
            try:
                await self._ensure_open()
            except BaseException:   # no __aexit__ follows: close the connections here
                await self.transport.close()
                raise
        self._token = activate(self)
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        self._reset_current()
        await self._close()

    def __enter__(self) -> Session:
        self._loop, self._owns_loop = asyncio.new_event_loop(), True
        if not self.defer_open:
            try:
                self.run(self._ensure_open())
            except BaseException:   # no __exit__ follows: close the connections and loop
                self.run(self.transport.close())
                self._loop.close()
                raise
        self._token = activate(self)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._reset_current()
        try:
            self.run(self._close())
        finally:
            assert self._loop is not None
            self._loop.close()

    def _reset_current(self) -> None:
        if self._token is not None:
            deactivate(self._token)
            self._token = None

    async def _open(self) -> None:
        reply = await self.transport.request("POST", "/v1/sessions", SessionCreated)
        self.credentials = SessionCredentials(reply.session_id, reply.token)

    async def _ensure_open(self) -> None:
        """Open the session unless it is open or its open has begun (then wait for that)."""
        if self.credentials is not None:
            return
        if self._opening is None:
            self._opening = asyncio.ensure_future(self._open())
        await self._opening

    async def _open_session_id(self) -> str:
        """The session's id, once it is open: for a request that names it."""
        await self._ensure_open()
        return self.session_id

    async def _close(self) -> None:
        # Let queued submissions finish (or fail) before the session goes away.
        await asyncio.gather(*self._tasks, return_exceptions=True)
        try:
            if self.credentials is not None:  # a deferred open that never happened: nothing
                await self.request("DELETE", f"/v1/sessions/{self.session_id}", SessionDeleted)
        finally:
            await self.transport.close()

    @property
    def session_id(self) -> str:
        assert self.credentials is not None, "the session is not open"
        return self.credentials.session_id

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run a coroutine to completion on a synchronous session's private loop."""
        assert self._loop is not None and self._owns_loop, "run() is for `with Session()`"
        return self._loop.run_until_complete(coro)

    async def request(self, method: str, path: str, reply: type[R],
                      body: WireMessage | None = None) -> R:
        """One message of this session (its token), answered by a `reply`. The session is
        open: the message names it (`_open_session_id`, or a variable id it handed out)."""
        assert self.credentials is not None
        return await self.transport.request(method, path, reply, body, self.credentials.token)

    # --- variables ---------------------------------------------------------------------

    def variable(self, name: str = "var", value: str | None = None) -> SemanticVariable:
        """A client-created variable; set it later with `var.set(value)` to release consumers."""
        var = SemanticVariable(self, name)
        var._bind(self._spawn(self._create_variable(name, value)))
        return var

    async def _create_variable(self, name: str, value: str | None) -> str:
        reply = await self.request("POST", "/v1/variables", VariableId,
                                   CreateVariableRequest(await self._open_session_id(), name,
                                                         value))
        return reply.semantic_var_id

    async def graph(self) -> Graph:
        """The session's DAG as the service sees it (calls, variables, states, engines)."""
        return await self.request("GET", f"/v1/sessions/{await self._open_session_id()}/graph",
                                  Graph)

    async def stats(self) -> SessionStats:
        """The session's own counters: calls by state, variables, waiting gets, tenant."""
        return await self.request("GET", f"/v1/sessions/{await self._open_session_id()}/stats",
                                  SessionStats)

    # --- calls -------------------------------------------------------------------------

    def call_function(self, fn: SemanticFunction,
                      inputs: dict[str, Any]) -> tuple[SemanticVariable, ...]:
        outputs = tuple(SemanticVariable(self, name, fn.output_constraint(name))
                        for name in fn.template.output_names)
        if self.mode == "baseline":
            self._spawn(self._submit_baseline(fn, inputs, outputs))
            return outputs
        # Parrot mode: calls made before the loop next runs travel in one submit_batch
        # message, in program order (one network round trip for a whole DAG).
        self._batch.append(_PendingCall(fn, inputs, outputs))
        if len(self._batch) == 1:
            self._last_submit = self._spawn(self._flush(self._last_submit))
        return outputs

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Future[Any]:
        assert self._loop is not None, "the session is not open"
        task = self._loop.create_task(coro)
        self._tasks.append(task)
        return task

    async def _flush(self, previous: asyncio.Future[Any] | None) -> None:
        if previous is not None:  # keep the service's view in program order
            await asyncio.gather(previous, return_exceptions=True)
        # One turn of the loop before the batch leaves: gets the program started as tasks
        # right after its calls (`asyncio.gather(*(v.aget(THROUGHPUT) for v in outs))`) run
        # their first step first, so their criteria travel with the submission and reach the
        # scheduler before the calls are placed, not a round trip later.
        await asyncio.sleep(0)
        batch, self._batch = self._batch, []
        produced = {id(var): (index, var.name) for index, pending in enumerate(batch)
                    for var in pending.outputs}
        wait = _awaited_at_once(batch)
        try:
            calls = tuple([await self._batch_call(pending, produced, wait)
                           for pending in batch])
            if self.credentials is None and self._opening is None:
                # The deferred open travels with this batch; requests made meanwhile wait
                # for it (and share its error).
                opening = asyncio.ensure_future(self._open_with(calls))
                self._opening = opening
                reply = await opening
            else:
                reply = await self.request("POST", "/v1/submit_batch", BatchReply,
                                           SubmitBatchRequest(await self._open_session_id(),
                                                              calls))
        except BaseException as exc:
            for pending in batch:
                for var in pending.outputs:
                    var._fail(exc)
            raise
        for pending, result in zip(batch, reply.results):
            if isinstance(result, ErrorReply):
                error = result.to_exception(400)
                for var in pending.outputs:
                    var._fail(error)
                continue
            ids, values = result.var_ids(), dict(result.values or {})
            for var in pending.outputs:
                if var.name in values:
                    var._known(values[var.name])
                var._resolve(ids[var.name])

    async def _open_with(self, calls: tuple[BatchCall, ...]) -> BatchReply:
        """The deferred open: this first batch names no session and opens one (the tenant's
        key travels as for `POST /v1/sessions`)."""
        reply = await self.transport.request("POST", "/v1/submit_batch", BatchReply,
                                             SubmitBatchRequest(None, calls))
        if reply.session is None:
            raise InvalidRequestError("the service opened no session for a batch without one "
                                      "(a manager older than this client?)")
        self.credentials = SessionCredentials(reply.session.session_id, reply.session.token)
        return reply

    async def _batch_call(self, pending: _PendingCall, produced: dict[int, tuple[int, str]],
                          wait: bool) -> BatchCall:
        fn = pending.fn
        placeholders = []
        for name, value in pending.inputs.items():
            transforms = fn.parsed_transforms.get(name, ())
            if isinstance(value, SemanticVariable) and id(value) in produced:
                index, output = produced[id(value)]  # an output of this same batch
                spec = PlaceholderSpec(name, "input", ref=BatchRef(index, output),
                                       transforms=transforms)
            elif isinstance(value, SemanticVariable):
                spec = PlaceholderSpec(name, "input", await value.aid(), transforms=transforms)
            else:
                spec = PlaceholderSpec(name, "input", value=str(value), transforms=transforms)
            placeholders.append(spec)
        # Gets the program began before this submission was sent travel with it.
        wanted = {var.name: var.get_criterion for var in pending.outputs}
        placeholders.extend(dataclasses.replace(spec, criteria=wanted[spec.name])
                            for spec in fn.output_placeholders())
        streamed = tuple(var.name for var in pending.outputs if var.stream_wanted)
        waited = tuple(var.name for var in pending.outputs if wait and var.awaited)
        return BatchCall(fn.template.source, tuple(placeholders), fn.sampling, streamed,
                         fn.chat_spec(), waited)

    async def _submit_baseline(self, fn: SemanticFunction, inputs: dict[str, Any],
                               outputs: tuple[SemanticVariable, ...]) -> None:
        # Request-level: the client holds every input value (it came back with the reply of
        # the completion that produced it), renders the prompt itself and sends it as one
        # plain blocking completion.
        values = {name: (await value.aget(Criterion.LATENCY))
                  if isinstance(value, SemanticVariable) else str(value)
                  for name, value in inputs.items()}
        for name, transforms in fn.parsed_transforms.items():
            if name in values:
                values[name] = apply_transforms(transforms, values[name])
        # Outputs stay placeholders: the service generates them.
        rendered = fn.template.render(
            {**values, **{name: "{{output:" + name + "}}" for name in fn.template.output_names}})
        placeholders = fn.output_placeholders()
        # One blocking completion per call (`wait`): the reply carries the generated values.
        try:
            reply = await self.request("POST", "/v1/submit", SubmitReply, SubmitRequest(
                await self._open_session_id(), rendered, placeholders, fn.sampling, wait=True,
                chat=fn.chat_spec()))
        except BaseException as exc:
            for var in outputs:
                var._fail(exc)
            raise
        ids, values = reply.var_ids(), dict(reply.values or {})
        for var in outputs:
            var._known(values[var.name])
            var._resolve(ids[var.name])
