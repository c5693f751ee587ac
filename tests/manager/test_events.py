"""Manager.handle: the one entry engine health reports through (parrot/manager/events.py)."""

from __future__ import annotations

import asyncio

import pytest

from parrot.errors import CallFailedError, EngineUnavailableError
from parrot.manager.events import EngineUp, NoEngine
from parrot.manager.manager import Manager
from parrot.policies.least_queue import LeastQueuePolicy
from parrot.serve_config import EngineSpec, ManagerConfig
from parrot.types import CallState, Criterion
from tests.manager.conftest import out, submit
from tests.manager.fakes import RecordingEngine


async def test_no_engine_fails_the_ready_calls_and_later_calls_run_once_one_is_up() -> None:
    manager = Manager(LeastQueuePolicy(), ManagerConfig())
    await manager.start()
    try:
        session = manager.create_session()
        first = submit(manager, session, "A {{input:x}} {{output:y}}", x="1")
        await asyncio.sleep(0.01)
        assert first.state is CallState.READY                     # no engine to take it
        manager.handle(NoEngine(EngineUnavailableError("every engine is down")))
        assert first.state is CallState.FAILED
        with pytest.raises(CallFailedError, match="every engine is down"):
            await manager.get(session, out(first, "y"), Criterion.LATENCY, timeout=1)

        second = submit(manager, session, "B {{input:x}} {{output:y}}", x="2")
        engine = RecordingEngine()
        await manager.add_engine(EngineSpec(name="e0", in_process=True), engine)
        manager.handle(EngineUp("e0"))
        assert (await manager.get(session, out(second, "y"), Criterion.LATENCY,
                                  timeout=5)).startswith("gen(")
    finally:
        await manager.close()
