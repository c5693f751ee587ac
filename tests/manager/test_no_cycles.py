"""A session's graph frees itself by reference counting: once the session is deleted, its
calls and variables are gone without a garbage collection. parrot-serve runs full collections
rarely (parrot/cli/limits.py) on the strength of this."""

from __future__ import annotations

import asyncio
import gc
import weakref

from parrot.types import Criterion
from tests.manager.conftest import out, submit


async def test_a_deleted_sessions_calls_and_variables_need_no_garbage_collection(manager, engine):
    session = manager.create_session()
    head = submit(manager, session, "System prompt. " * 30 + "A {{input:x}} {{output:y}}", x="hi")
    chain = submit(manager, session, "B {{input:x}} {{output:y}}", x=out(head, "y"))
    maps = [submit(manager, session, "Map {{input:c}} {{output:p}}", c=f"c{i}") for i in range(3)]
    reduce_ = submit(manager, session, "Reduce {{input:a}} {{input:b}} {{input:c}} {{output:r}}",
                     a=out(maps[0], "p"), b=out(maps[1], "p"), c=out(maps[2], "p"))
    await manager.get(session, out(chain, "y"), Criterion.LATENCY)
    manager.graph(session)
    await manager.get(session, out(reduce_, "r"), Criterion.THROUGHPUT)
    calls = [head, chain, *maps, reduce_]
    refs = [weakref.ref(c) for c in calls]
    refs += [weakref.ref(session.variable(out(c, name))) for c in calls for name in c.outputs]
    refs.append(weakref.ref(session.graph))
    await asyncio.sleep(0.05)   # the runs' tasks end
    gc.collect()
    gc.disable()
    try:
        manager.delete_session(session)
        del session, head, chain, maps, reduce_, calls
        await asyncio.sleep(0.05)   # the background frees of its contexts
        assert [r() for r in refs] == [None] * len(refs)
    finally:
        gc.enable()
