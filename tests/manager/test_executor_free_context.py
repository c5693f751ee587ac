"""Freeing a call's private context: engine errors are logged (not swallowed silently, not
raised over a finished call); anything else is a bug and fails the call."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from parrot.serve_config import EngineSpec
from parrot.errors import EngineUnavailableError, UnknownContextError
from parrot.types import CallState, Criterion
from tests.manager.conftest import out, submit
from tests.manager.fakes import RecordingEngine


@dataclass
class FailingFreeEngine(RecordingEngine):
    """A RecordingEngine whose free_context raises `free_error` (an exception instance)."""

    free_error: Exception | None = None

    async def free_context(self, context_id: str) -> None:
        if self.free_error is not None:
            raise self.free_error
        await super().free_context(context_id)


async def run_one(manager, free_error: Exception):
    engine = FailingFreeEngine(free_error=free_error)
    await manager.add_engine(EngineSpec(name="e0", in_process=True), engine)
    session = manager.create_session()
    call = submit(manager, session, "say {{output:y}}")
    return session, call


async def test_an_engine_error_on_free_is_logged_with_the_context_and_the_call_succeeds(
        manager, caplog):
    session, call = await run_one(manager, EngineUnavailableError("connection reset"))
    with caplog.at_level(logging.WARNING, logger="parrot.manager.executor"):
        value = await manager.get(session, out(call, "y"), Criterion.LATENCY, timeout=10)
    assert value.startswith("gen(") and call.state is CallState.DONE
    [record] = [r for r in caplog.records if r.name == "parrot.manager.executor"]
    assert record.levelno == logging.WARNING
    assert f"c-{call.call_id}-0" in record.getMessage()
    assert "EngineUnavailableError: connection reset" in record.getMessage()


async def test_a_context_already_gone_is_only_a_debug_note(manager, caplog):
    session, call = await run_one(manager, UnknownContextError("c-x"))
    with caplog.at_level(logging.DEBUG, logger="parrot.manager.executor"):
        await manager.get(session, out(call, "y"), Criterion.LATENCY, timeout=10)
    assert call.state is CallState.DONE
    records = [r for r in caplog.records if r.name == "parrot.manager.executor"]
    assert [r.levelno for r in records] == [logging.DEBUG]


async def test_a_bug_in_free_is_not_swallowed(manager, caplog):
    session, call = await run_one(manager, TypeError("free_context() got an int"))
    with caplog.at_level(logging.ERROR, logger="parrot.manager.manager"):
        # The output was published before the free: its consumers keep it...
        assert (await manager.get(session, out(call, "y"), Criterion.LATENCY,
                                  timeout=10)).startswith("gen(")
        for _ in range(200):  # the free runs after the publish that woke the get
            if call.state.is_finished:
                break
            await asyncio.sleep(0.01)
    # ...but the call is failed with the bug's name and the traceback is logged.
    assert call.state is CallState.FAILED and "TypeError" in (call.error or "")
    assert any(r.exc_info and r.exc_info[0] is TypeError for r in caplog.records)
