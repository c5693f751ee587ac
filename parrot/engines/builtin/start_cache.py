"""What an engine's start-up worked out once, kept under its cache directory for later starts.

A start-up result that depends only on things a key can name (the GPU, torch, Triton, the
kernels' source, the model's shapes, the buckets) is computed by the first start and read by
the next ones: the small-batch linear choice (llama/linear_choice.py) and the decode
attention's covering buckets (cuda/precompile.py). Files are written atomically, so two
engines starting at once never read half a file; a file that cannot be read or written is
only logged (an optimisation never stops an engine).
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


def cache_key(parts: list[object]) -> str:
    """A file name for what `parts` (reprs) describe."""
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:32]


def kept(path: Path | None, compute: Callable[[], T], encode: Callable[[T], str],
         decode: Callable[[str], T], what: str) -> tuple[T, bool]:
    """(the value kept at `path`, True) when there is one, else (compute(), False), kept at
    `path` for the next start. `what` names it in the log."""
    if path is not None and path.is_file():
        try:
            return decode(path.read_text()), True
        except (OSError, ValueError, KeyError, TypeError):
            log.warning("ignoring an unreadable %s cache %s", what, path)
    value = compute()
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(f".{os.getpid()}.tmp")
            partial.write_text(encode(value))
            partial.replace(path)   # atomic: two engines starting at once never see half a file
        except OSError as exc:
            log.warning("could not keep the %s at %s: %s", what, path, exc)
    return value, False
