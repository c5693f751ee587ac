from __future__ import annotations

import pytest

from parrot.serve_config import EngineSpec
from parrot.manager.manager import Manager
from parrot.manager.requests import SubmitRequest
from parrot.policies.least_queue import LeastQueuePolicy
from tests.manager.fakes import RecordingEngine


@pytest.fixture
async def manager():
    mgr = Manager(LeastQueuePolicy())
    await mgr.start()
    yield mgr
    await mgr.close()


@pytest.fixture
async def engine(manager):
    eng = RecordingEngine()
    await manager.add_engine(EngineSpec(name="e0", in_process=True), eng)
    return eng


def submit(manager, session, prompt, **bindings):
    """Submit with inputs bound to literal strings or variable ids (`v-...`)."""
    placeholders = []
    for name, value in bindings.items():
        if isinstance(value, dict):
            placeholders.append({"name": name, **value})
        elif value.startswith("v-"):
            placeholders.append({"name": name, "in_out": "input", "semantic_var_id": value})
        else:
            placeholders.append({"name": name, "in_out": "input", "value": value})
    req = SubmitRequest.from_json({"session_id": session.session_id, "prompt": prompt,
                                   "placeholders": placeholders})
    return manager.submit(session, req)


def out(call, name):
    return call.outputs[name].var_id
