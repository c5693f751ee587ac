"""What an engine's start-up worked out once, kept under its cache directory for later starts.

A start-up result that depends only on things a key can name (the GPU, torch, Triton, the
kernels' source, the model's shapes, the buckets) is computed by the first start and read by
the next ones: the small-batch linear choice (llama/linear_choice.py), the decode
attention's covering buckets (cuda/precompile.py) and the start-up speed profile
(observe/startup_probe.py). Delete the cache directory's folder of one to compute it again.
Files are written atomically, so two engines starting at once never read half a file; a file
that cannot be read or written is only logged (an optimisation never stops an engine).
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TypeVar

import torch

log = logging.getLogger(__name__)

T = TypeVar("T")


def cache_key(parts: list[object]) -> str:
    """A file name for what `parts` (reprs) describe."""
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:32]


def device_description(device: torch.device) -> str:
    """A GPU as a key names it: model, compute capability and SM count (what kernels' plans
    and timings depend on); another device by its name."""
    if device.type != "cuda":
        return str(device)
    return (f"{torch.cuda.get_device_name(device)} {torch.cuda.get_device_capability(device)} "
            f"{torch.cuda.get_device_properties(device).multi_processor_count}")


def software(device: torch.device, kernels: ModuleType | None) -> list[object]:
    """What every start-up key names: the device (`device_description`), torch, and where the
    Triton kernels run, Triton's version and the kernels' source digest."""
    parts: list[object] = [device_description(device), torch.__version__]
    if kernels is not None:
        import triton

        parts += [triton.__version__, kernels.source_digest()]
    return parts


def read_kept(path: Path | None, decode: Callable[[str], T], what: str) -> T | None:
    """The value kept at `path`, or None (none kept, or unreadable: logged)."""
    if path is None or not path.is_file():
        return None
    try:
        return decode(path.read_text())
    except (OSError, ValueError, KeyError, TypeError):
        log.warning("ignoring an unreadable %s cache %s", what, path)
        return None


def keep(path: Path | None, value: T, encode: Callable[[T], str], what: str) -> None:
    """Keep `value` at `path` for the next start (atomically; a failure is only logged)."""
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(encode(value))
        partial.replace(path)   # atomic: two engines starting at once never see half a file
    except OSError as exc:
        log.warning("could not keep the %s at %s: %s", what, path, exc)


def kept(path: Path | None, compute: Callable[[], T], encode: Callable[[T], str],
         decode: Callable[[str], T], what: str) -> tuple[T, bool]:
    """(the value kept at `path`, True) when there is one, else (compute(), False), kept at
    `path` for the next start. `what` names it in the log."""
    value = read_kept(path, decode, what)
    if value is not None:
        return value, True
    value = compute()
    keep(path, value, encode, what)
    return value, False
