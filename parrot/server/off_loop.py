"""Work that grows with a request's size runs beside the manager's loop, not on it.

Parsing an 8 MiB body, decoding a 4,096-call batch into its typed request, or serialising its
reply are each one block of Python work in proportion to the request; on the loop, every other
session, the heartbeats and `/healthz` would wait for all of it. A big request's block runs in
a thread instead (a thread switches with the loop every few milliseconds: the GIL's switch
interval), and a small one, the usual case, stays on the loop, where it costs no hop. Only a
request that came over HTTP hops: an in-process caller (the frontend in the same process, a
simulation on a virtual clock) is trusted and keeps every step on the loop, in its order.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# A body of this many bytes (or a batch of CALLS_PER_SLICE calls) takes a few milliseconds
# to parse: from here on the thread hop is worth it.
OFF_LOOP_BYTES = 64 * 1024


_OVER_HTTP: contextvars.ContextVar[bool] = contextvars.ContextVar("over_http", default=False)


def serving_http() -> None:
    """Mark the current request (its task's context) as one that came over HTTP."""
    _OVER_HTTP.set(True)


async def beside_loop(big: bool, work: Callable[[], T]) -> T:
    """`work()`, in a thread when `big` (the caller's measure of the request's size) and the
    request came over HTTP."""
    if not (big and _OVER_HTTP.get()):
        return work()
    return await asyncio.to_thread(work)
