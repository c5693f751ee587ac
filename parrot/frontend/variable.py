"""SemanticVariable: the client's handle on a value that lives in the service."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING, Any

from parrot.constraints import Constraint, JsonObject, parse_value

from parrot.types import Criterion, strongest
from parrot.wire_types import ErrorReply, GetRequest, SetVariableRequest, Value, VariableId

if TYPE_CHECKING:
    from parrot.frontend.session import Session


def gather(*variables: SemanticVariable | Iterable[SemanticVariable],
           criteria: Criterion | str = Criterion.LATENCY) -> asyncio.Future[list[str]]:
    """The values of `variables` (handles, or iterables of them), fetched concurrently under
    `criteria`. The criteria are declared at once, before this returns: calls still waiting
    to be submitted carry them, so the service places them under `criteria` (await the
    result inside the session's loop)."""
    handles: list[SemanticVariable] = []
    for item in variables:
        handles.extend([item] if isinstance(item, SemanticVariable) else item)
    for var in handles:
        var.declare(criteria)
    return asyncio.gather(*(var.aget(criteria) for var in handles))


class SemanticVariable:
    """A handle returned at once by a call; its id arrives when the submission is accepted.

    `await var.aget(perf=LATENCY)` (or the blocking `var.get()` in a `with Session()` block)
    returns the value; the criterion tells the service how the client will use it, and the
    service deduces the objectives of every call upstream from it.
    """

    def __init__(self, session: Session, name: str,
                 constraint: Constraint | None = None) -> None:
        self.session = session
        self.name = name
        self.constraint = constraint    # what the output is decoded under (None: free text)
        self._id: asyncio.Future[str] = session._loop.create_future()  # type: ignore[union-attr]
        self._value: str | None = None  # values never change: once known, no more messages
        self.stream_wanted = False      # astream() began before the submission was sent
        # The criterion of a get that began before the submission was sent: it travels with
        # the submission (the output placeholder's `criteria`), so the service deduces the
        # objectives of the calls before placing them, not a round trip later.
        self.get_criterion: Criterion | None = None
        # A get without a timeout began before the submission was sent: the program reads
        # this value at once, so the submission may wait for it (Session._flush).
        self.awaited = False

    def __repr__(self) -> str:
        ident = self._id.result() if self._id.done() and not self._id.exception() else "pending"
        return f"SemanticVariable({self.name!r}, {ident})"

    def _bind(self, creation: asyncio.Future[str]) -> None:
        def done(task: asyncio.Future[str]) -> None:
            if task.cancelled() or task.exception() is not None:
                self._fail(task.exception() or asyncio.CancelledError())
            else:
                self._resolve(task.result())
        creation.add_done_callback(done)

    def _resolve(self, var_id: str) -> None:
        if not self._id.done():
            self._id.set_result(var_id)

    def _fail(self, exc: BaseException) -> None:
        if not self._id.done():
            self._id.set_exception(exc)

    async def aid(self) -> str:
        """The service's id of this variable (waits for its submission)."""
        return await asyncio.shield(self._id)

    @property
    def id(self) -> str | None:
        return self._id.result() if self._id.done() and not self._id.exception() else None

    def _known(self, value: str) -> None:
        self._value = value

    def declare(self, perf: Criterion | str) -> Criterion:
        """Declare how this value will be fetched before fetching it: sent with the call's
        submission when that has not left yet (`fn(..., criteria=)`, `parrot.gather`)."""
        return self._want(perf)

    def _want(self, perf: Criterion | str) -> Criterion:
        """Parse a get's criterion and remember it for a submission not sent yet (the
        strongest of them: latency outranks throughput, as on the service)."""
        criterion = Criterion.parse(perf.value if isinstance(perf, Criterion) else perf)
        self.get_criterion = strongest((self.get_criterion, criterion))
        return criterion

    async def aget(self, perf: Criterion | str = Criterion.LATENCY,
                   timeout: float | None = None) -> str:
        criterion = self._want(perf)
        self.awaited = self.awaited or timeout is None
        var_id = await self.aid()
        if self._value is not None:
            return self._value
        reply = await self.session.request("POST", "/v1/get", Value, GetRequest(
            self.session.session_id, var_id, criterion, timeout))
        self._value = reply.value
        return reply.value

    async def aget_json(self, perf: Criterion | str = Criterion.LATENCY,
                        timeout: float | None = None) -> Any:
        """The value parsed: for an output decoded under a JSON constraint its JSON value
        (valid by construction; a generation cut by max_tokens raises ConstraintError), under
        a regex or choice the text itself, else (free text, or an output with transforms)
        the value parsed as JSON."""
        text = await self.aget(perf, timeout)
        return parse_value(self.constraint or JsonObject(), text)

    def get_json(self, perf: Criterion | str = Criterion.LATENCY,
                 timeout: float | None = None) -> Any:
        return self.session.run(self.aget_json(perf, timeout))

    async def astream(self, perf: Criterion | str = Criterion.LATENCY) -> AsyncIterator[str]:
        """The value as it is generated: `async for text in var.astream(): ...`. The pieces
        concatenate to the value (an output with transforms, or a value set by a client,
        arrives in one piece); a failed call raises its error."""
        # Set before the first await: a call made just before (still in the session's pending
        # batch) is then submitted with this output marked as streamed, so the engine streams
        # it from its first token. Called later, the value may come in fewer, larger pieces.
        self.stream_wanted = True
        criterion = self._want(perf)
        var_id = await self.aid()
        if self._value is not None:
            yield self._value
            return
        assert self.session.credentials is not None
        events = self.session.transport.stream(
            f"/v1/variables/{var_id}/stream",
            {"session_id": self.session.session_id, "criteria": criterion.value},
            self.session.credentials.token)
        async for event in events:
            if isinstance(event, ErrorReply):
                raise event.to_exception(424)
            yield event.text

    def get(self, perf: Criterion | str = Criterion.LATENCY, timeout: float | None = None) -> str:
        """Blocking get, for `with parrot.Session(...)` (synchronous) sessions."""
        value: str = self.session.run(self.aget(perf, timeout))
        return value

    async def aset(self, value: str) -> None:
        await self.session.request("POST", f"/v1/variables/{await self.aid()}", VariableId,
                                   SetVariableRequest(self.session.session_id, value))

    def set(self, value: str) -> None:
        self.session.run(self.aset(value))
