"""One engine at a time times kernels on a GPU: a host-wide lock per device.

Engines can share one GPU (each with part of its memory, as in the two-engine live runs), and
each times its linear layers at start-up (linear_choice.py). Timed at the same moment, each
would measure under the other's load and could keep the slower kernel. So the timing, and
the warm-up's graph capture after it (build.py), run under an exclusive `flock` on a file
named after the device: its UUID where torch reports one, since `CUDA_VISIBLE_DEVICES` gives
the same GPU different indices in different processes. The lock is the OS kernel's: it goes
with the process that holds it, even one killed mid-measurement, so a crashed engine never
blocks the next start.
"""

from __future__ import annotations

import asyncio
import os
import re
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import torch

try:
    import fcntl
except ImportError:  # not POSIX: nothing to share a GPU with here, so no lock
    fcntl = None  # type: ignore[assignment]

# Where the lock files live; every engine on the host must agree on it (the default does).
LOCK_DIR_ENV = "PARROT_DEVICE_LOCK_DIR"


def device_key(device: torch.device) -> str:
    """A name for `device` that is the same in every process on this host."""
    if device.type != "cuda":
        return device.type
    index = device.index if device.index is not None else torch.cuda.current_device()
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    return f"cuda-{uuid}" if uuid is not None else f"cuda-{index}"


def lock_path(key: str, directory: Path | None = None) -> Path:
    folder = directory or Path(os.environ.get(LOCK_DIR_ENV) or tempfile.gettempdir())
    return folder / f"parrot-device-{re.sub(r'[^A-Za-z0-9_.-]', '_', key)}.lock"


@contextmanager
def exclusive_device(key: str, directory: Path | None = None) -> Iterator[float]:
    """Hold the device's lock for the block; yields the seconds spent waiting for it."""
    started = time.perf_counter()
    if fcntl is None:
        yield 0.0
        return
    path = lock_path(key, directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield time.perf_counter() - started
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@asynccontextmanager
async def exclusive_device_async(key: str, directory: Path | None = None
                                 ) -> AsyncIterator[float]:
    """`exclusive_device` for a coroutine: the wait for the lock runs in a worker thread, so
    the event loop (and the engine's batching task) keeps running meanwhile. Cancelled while
    waiting, the thread still takes the lock when its holder lets go: it is released at once
    then, never held by a caller that is gone."""
    held = exclusive_device(key, directory)
    taking = asyncio.ensure_future(asyncio.to_thread(held.__enter__))
    try:
        waited = await asyncio.shield(taking)
    except asyncio.CancelledError:
        def release(done: asyncio.Future[float]) -> None:
            if not done.cancelled() and done.exception() is None:
                held.__exit__(None, None, None)
        taking.add_done_callback(release)
        raise
    try:
        yield waited
    finally:
        held.__exit__(None, None, None)
