"""Capturing CUDA graphs per bucket, shared by the decode graphs (graphs.py) and the prefill
graphs (prefill_graphs.py): one thread-local capture into a memory pool (`capture_graph`),
and buckets captured once each (`GraphBuckets`: a failed capture runs its bucket eagerly from
then on; captures made while serving are counted and timed for EngineStats)."""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

import torch

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
T = TypeVar("T")


def capture_graph(fn: Callable[[], T], pool: Any) -> tuple[torch.cuda.CUDAGraph, T]:
    """`fn` captured as a CUDA graph into the memory pool `pool`, and what the capture
    returned (the graph's outputs). thread_local: steps run in a worker thread while the
    event loop's thread may touch CUDA (e.g. a new request's torch.Generator)."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
        output = fn()
    return graph, output


class GraphBuckets(ABC, Generic[K, V]):
    """Buckets captured once each (`_capture`): a capture that fails is logged and its
    bucket runs eagerly from then on (never fail a request for a graph); one made while
    serving stalls the engine, so those are counted and timed (EngineStats). Warm-up
    captures call `capture`, steps `capture_at_runtime`."""

    kind = "CUDA graph"   # for the log lines

    def __init__(self) -> None:
        self._graphs: dict[K, V] = {}
        self._failed: set[K] = set()
        self.runtime_captures = 0
        self.runtime_capture_s = 0.0

    @abstractmethod
    def _capture(self, key: K) -> V: ...

    @property
    def captured_keys(self) -> list[K]:
        """The captured buckets, in the order they were captured."""
        return list(self._graphs)

    def release(self, key: K) -> None:
        """Forget a captured bucket (its steps then take another bucket or capture it again);
        its memory stays in the pool for the next capture."""
        self._graphs.pop(key, None)

    def capture(self, key: K) -> V | None:
        """The bucket captured over what the static buffers hold now (None: capture failed,
        logged; the bucket then runs eagerly)."""
        if key in self._failed:
            return None
        try:
            captured = self._capture(key)
        except Exception:  # never fail a request for a graph: this bucket runs eagerly
            log.exception("%s capture failed for bucket %s; running it eagerly", self.kind,
                          key)
            self._failed.add(key)
            return None
        self._graphs[key] = captured
        return captured

    def capture_at_runtime(self, key: K) -> V | None:
        started = time.perf_counter()
        captured = self.capture(key)
        spent = time.perf_counter() - started
        self.runtime_captures += 1
        self.runtime_capture_s += spent
        log.info("%s bucket %s captured while serving in %.1f ms (%d so far, %.2f s)",
                 self.kind, key, spent * 1000, self.runtime_captures, self.runtime_capture_s)
        return captured
