"""Which linear layers take the small-batch kernels: measured on this GPU at start-up.

The kernels' tiles and their `kernel_wins` table were measured on an H200 for LLaMA-7B's
shapes; on another GPU, or another model's shapes, a kernel can lose to cuBLAS. So before the
decode graphs are captured, every projection shape of the model is timed at every decode row
bucket both ways — the kernels' small-batch linear and `F.linear` — over the model's own
per-layer weights (each layer's matrix once: a weight read, as in a decode step), each side
captured in a CUDA graph (no launch overhead, as in a replayed step), and the faster is used
from then on. Row counts between buckets take the choice of the bucket the graphs pad them to;
counts above the largest bucket measured fall back to the static table.
"""

from __future__ import annotations

import bisect
import functools
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch
import torch.nn.functional as F

from parrot.engines.builtin.start_cache import cache_key, kept, software

log = logging.getLogger(__name__)

# Seconds per call of the thunks (each one linear layer call), timed together.
Timer = Callable[[list[Callable[[], object]]], float]


@dataclass(frozen=True)
class LinearChoice:
    kernel: frozenset[tuple[int, int, int]]   # (n, k, row bucket) where the kernel was faster
    measured: frozenset[tuple[int, int, int]]  # every (n, k, row bucket) timed
    buckets: tuple[int, ...]                   # the row buckets timed, ascending

    def bucket(self, rows: int) -> int | None:
        """The measured bucket a step of `rows` rows is padded to (the graphs' own buckets,
        whatever their sizes); None above the largest."""
        i = bisect.bisect_left(self.buckets, rows)
        return self.buckets[i] if i < len(self.buckets) else None

    def kernel_wins(self, n: int, k: int, rows: int) -> bool | None:
        """Whether the kernel was the faster at the bucket of `rows`; None: not measured."""
        key = (n, k, self.bucket(rows))
        return key in self.kernel if key in self.measured else None

    def describe(self) -> str:
        return (f"small-batch kernels faster on {len(self.kernel)} of {len(self.measured)} "
                "(shape, rows) pairs measured")

    def to_json(self) -> str:
        return json.dumps({"kernel": sorted(self.kernel), "measured": sorted(self.measured),
                           "buckets": list(self.buckets)})

    @classmethod
    def from_json(cls, text: str) -> LinearChoice:
        data = json.loads(text)

        def triples(name: str) -> frozenset[tuple[int, int, int]]:
            return frozenset((int(n), int(k), int(b)) for n, k, b in data[name])
        return cls(triples("kernel"), triples("measured"),
                   tuple(int(b) for b in data["buckets"]))


def choice_key(weights: Mapping[tuple[int, int], Sequence[torch.Tensor]],
               buckets: Sequence[int], kernels: ModuleType) -> str:
    """What a measured choice depends on: the GPU (name, capability, SMs), torch and Triton, the
    kernels' source, the shapes, layer counts and dtype, the buckets. Equal keys: the same
    measurement, to within its noise."""
    first = next(iter(weights.values()))[0]
    parts = software(first.device, kernels) + [
        str(first.dtype), sorted((n, k, len(ws)) for (n, k), ws in weights.items()),
        sorted(set(buckets))]
    return cache_key(parts)


def cached_linear_choice(measure: Callable[[], LinearChoice], path: Path | None
                         ) -> tuple[LinearChoice, bool]:
    """(the choice kept at `path`, True) when there is one, else (measure(), False), kept at
    `path` for the next start (a later engine on the same GPU, torch, Triton, kernels and
    model shapes measures nothing; start_cache.py)."""
    return kept(path, measure, LinearChoice.to_json, LinearChoice.from_json, "linear choice")


def measure_linear_choice(weights: Mapping[tuple[int, int], Sequence[torch.Tensor]],
                          buckets: Sequence[int], kernels: ModuleType,
                          timer: Timer) -> LinearChoice:
    """Time `kernels.small_batch_linear` against `F.linear` for every shape (n, k) -> its
    weights (one per layer) at every row bucket up to the kernels' `MAX_GEMV_ROWS`."""
    kernel, measured = set(), set()
    timed = sorted(b for b in set(buckets) if b <= kernels.MAX_GEMV_ROWS)
    for (n, k), ws in weights.items():
        for rows in timed:
            x = torch.randn(rows, k, device=ws[0].device, dtype=ws[0].dtype)
            small = timer([functools.partial(kernels.small_batch_linear, x, w) for w in ws])
            library = timer([functools.partial(F.linear, x, w) for w in ws])
            measured.add((n, k, rows))
            if small < library:
                kernel.add((n, k, rows))
    return LinearChoice(frozenset(kernel), frozenset(measured), tuple(timed))


def cuda_graph_timer(reps: int = 3, warm: int = 1) -> Timer:
    """Seconds per call: the calls captured in one CUDA graph (after one eager pass, which
    compiles the kernels), replayed `warm` times untimed, then `reps` times between events.
    (The benchmarks under bench/ time the same way: `bench_gemv.graph_time`.)"""
    def seconds(calls: list[Callable[[], object]]) -> float:
        for call in calls:
            call()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for call in calls:
                call()
        for _ in range(warm):
            graph.replay()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            graph.replay()
        end.record()
        end.synchronize()
        del graph
        return start.elapsed_time(end) / 1e3 / (reps * len(calls))
    return seconds
