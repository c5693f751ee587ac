"""Engines sharing a GPU time their kernels one at a time: the device's host-wide lock."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from parrot.engines.builtin.cuda import device_lock
from parrot.engines.builtin.cuda.device_lock import (device_key, exclusive_device,
                                                     exclusive_device_async, lock_path)

HOLD_S = 0.3


def hold_in_thread(key: str, directory, entered: threading.Event) -> threading.Thread:
    """Another engine: holds the device's lock for HOLD_S seconds."""
    def run() -> None:
        with exclusive_device(key, directory):
            entered.set()
            time.sleep(HOLD_S)
    thread = threading.Thread(target=run)
    thread.start()
    assert entered.wait(5)
    return thread


def test_a_second_holder_waits_for_the_first(tmp_path):
    entered = threading.Event()
    started = time.perf_counter()
    other = hold_in_thread("cuda-GPU-1", tmp_path, entered)
    with exclusive_device("cuda-GPU-1", tmp_path) as waited:
        inside = time.perf_counter()
    other.join()
    assert inside - started >= HOLD_S * 0.9          # it ran only after the other let go
    assert waited >= HOLD_S * 0.5
    # another device is not held up by it
    entered2 = threading.Event()
    other = hold_in_thread("cuda-GPU-1", tmp_path, entered2)
    with exclusive_device("cuda-GPU-2", tmp_path) as waited:
        assert waited < HOLD_S / 3
    other.join()


def test_the_lock_is_released_when_the_block_fails(tmp_path):
    with pytest.raises(RuntimeError):
        with exclusive_device("cpu", tmp_path):
            raise RuntimeError("measurement failed")
    with exclusive_device("cpu", tmp_path) as waited:
        assert waited < 1.0


def test_device_names_and_lock_files(tmp_path, monkeypatch):
    assert device_key(torch.device("cpu")) == "cpu"
    assert lock_path("cuda-GPU-5e/x y", tmp_path) == tmp_path / "parrot-device-cuda-GPU-5e_x_y.lock"
    monkeypatch.setenv(device_lock.LOCK_DIR_ENV, str(tmp_path / "locks"))
    assert lock_path("cpu").parent == tmp_path / "locks"
    with exclusive_device("cpu"):                      # the folder is made when missing
        assert lock_path("cpu").is_file()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_gpu_is_named_by_its_uuid():
    assert device_key(torch.device("cuda", 0)).startswith("cuda-")


async def test_the_async_lock_waits_in_a_thread_and_a_cancelled_wait_never_keeps_it(tmp_path):
    import asyncio

    entered = threading.Event()
    other = hold_in_thread("cuda-GPU-3", tmp_path, entered)
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticker = asyncio.create_task(tick())
    async with exclusive_device_async("cuda-GPU-3", tmp_path) as waited:
        assert waited >= HOLD_S * 0.5
    assert ticks >= 5                      # the loop ran while it waited
    other.join()
    # cancelled while another holds the lock: once that one lets go, nobody holds it
    entered = threading.Event()
    other = hold_in_thread("cuda-GPU-3", tmp_path, entered)
    waiting = asyncio.create_task(exclusive_device_async("cuda-GPU-3", tmp_path).__aenter__())
    await asyncio.sleep(0.05)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    other.join()
    await asyncio.sleep(0.2)               # the worker thread took it and let it go
    fcntl = pytest.importorskip("fcntl")
    with open(lock_path("cuda-GPU-3", tmp_path), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)   # raises while anyone holds it
        fcntl.flock(handle, fcntl.LOCK_UN)
    ticker.cancel()
