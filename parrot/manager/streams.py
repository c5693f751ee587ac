"""A Semantic Variable's text while it is generated, for any number of readers.

The executor pushes each engine chunk of an output into the variable's `TextStream`; readers
(`follow`) get the new text as it arrives and end when the variable has its value (or fails).
No locks and no polling: every change sets the current `asyncio.Event` and drops it, so a
reader waits on exactly one event per change; the event exists only while a reader waits (most
outputs are never streamed: no event objects per variable for the garbage collector to walk).

If the call is re-dispatched after an engine failure, the new attempt's text extends what
readers already saw only where it agrees with it (greedy decoding repeats itself exactly). A
reader never ends with text that is not the value: when the final value does not begin with
what it was sent (a sampled re-run took another path), it ends with a `StreamResetError`
instead of its last piece, and the client `get`s the value.

A stream is a `get` too (`follow_as_get`): it counts against the session's
`max_waiting_gets_per_session` (429 past it) and ends with the get's `GetTimeoutError` (408)
when the value does not come in the get's time.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any
from collections.abc import AsyncIterator

from parrot.errors import StreamResetError, TooManyRequestsError

if TYPE_CHECKING:
    from parrot.manager.nodes import Variable


class TextStream:
    def __init__(self) -> None:
        self.text = ""                  # what readers may see so far
        self.num_tokens = 0             # tokens generated in the current attempt
        self.finish_reason: str | None = None
        self.wanted = False             # a reader follows it: the executor streams the Generate
        self._attempt_text = ""
        self._changed: asyncio.Event | None = None   # while a reader waits

    def begin_attempt(self) -> None:
        self._attempt_text, self.num_tokens, self.finish_reason = "", 0, None

    def push(self, text: str, num_tokens: int, finish_reason: str | None, *,
             visible: bool = True) -> None:
        """One engine chunk; `visible=False` counts it without showing its text to readers."""
        self._attempt_text += text
        self.num_tokens += num_tokens
        if finish_reason is not None:
            self.finish_reason = finish_reason
        grown = len(self._attempt_text) > len(self.text)
        if visible and grown and self._attempt_text.startswith(self.text):
            self.text = self._attempt_text
            self.notify()

    def notify(self) -> None:
        event, self._changed = self._changed, None
        if event is not None:
            event.set()

    async def wait_changed(self) -> None:
        """Until the next change (one after this is called)."""
        if self._changed is None:
            self._changed = asyncio.Event()
        await self._changed.wait()


async def follow(var: Variable, stop: asyncio.Future[Any] | None = None) -> AsyncIterator[str]:
    """Yield the text of `var` as it is generated, then the rest of its final value.

    The pieces are the engine's text as it arrives. An output with transforms is not streamed
    (its value is not a prefix of the raw text), so its value comes as one piece, as does the
    value of a variable the client sets. A failed variable raises its error; a value that does
    not begin with what was sent raises StreamResetError; `stop` failing (the pending get's
    timeout) raises its error.
    """
    var.stream.wanted = True
    sent = ""
    while True:
        if var.is_finished:
            if var.error is not None:
                raise var.error
            assert var.value is not None
            if not var.value.startswith(sent):
                raise StreamResetError(
                    f"variable {var.var_id}: its call was re-run after an engine failure and "
                    f"generated other text than the {len(sent)} characters streamed; its "
                    "value is complete: get it")
            if len(var.value) > len(sent):
                yield var.value[len(sent):]
            return
        if stop is not None and stop.done() and not stop.cancelled() \
                and stop.exception() is not None:
            raise stop.exception()  # type: ignore[misc]
        text = var.stream.text
        if len(text) > len(sent):
            piece, sent = text[len(sent):], text
            yield piece
            continue
        await var.stream.wait_changed()


async def follow_as_get(manager: Any, session: Any, var: Variable,
                        criterion: Any) -> AsyncIterator[str]:
    """`follow`, while a `get` of the variable at `criterion` is pending in the manager: a
    streaming reader seeds the objective of the calls upstream exactly as a client's get does,
    is held to the session's limit on waiting gets, and ends with the get's timeout."""
    check_waiting_limit(manager, session, var)
    getter = asyncio.ensure_future(manager.get(session, var.var_id, criterion))
    getter.add_done_callback(lambda _: var.stream.notify())  # wake the reader: it may be over
    try:
        async for piece in follow(var, getter):
            yield piece
    finally:
        getter.cancel()
        await asyncio.gather(getter, return_exceptions=True)


def check_waiting_limit(manager: Any, session: Any, var: Variable) -> None:
    """A new reader of an unfinished variable is one more waiting `get` of its session."""
    limit = manager.config.max_waiting_gets_per_session
    if not var.is_finished and session.num_waiters >= limit:
        raise TooManyRequestsError(f"this session already has {session.num_waiters} `get`s and "
                                   "streams waiting (the limit)", manager.config.retry_after_s)
