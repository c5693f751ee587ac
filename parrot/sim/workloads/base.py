"""What a workload sees of the cluster it runs on, and what it records per application.

A workload is an async function `run(env, spec) -> list[AppRecord]`. It opens one frontend
Session per application through `env.session(app_id)` (parrot or baseline mode, with the
network delay of that application already attached), measures end-to-end latency on the
loop's clock (virtual in simulation, real in live mode) and fetches the session's graph before
closing it, so the per-call timings and engines survive for the timeline plot.

An application's clock starts once its session is open, as the paper's artifact times a
program (its client registers with the service once, before the timed region; a
request-level client such as vLLM's has no session at all). Opening costs one client round
trip; it is recorded (`AppRecord.session_open_s`), not counted in the latency. Results
name this clock (`APP_CLOCK`); a result without it was timed from before the open.
"""

from __future__ import annotations

import math
import random
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol
from collections.abc import AsyncIterator

import parrot
from parrot.engines.sim_eos import eos_marker
from parrot.frontend.session import Session
from parrot.sim.network import NetworkDelay
from parrot.sim.workloads.spec import WorkloadSpec
from parrot.wire_types import CallNode, Graph


# What an application's latency counts from; written into every results JSON so that a
# reader can tell these runs from earlier ones, whose JSON lacks the key (their clock started
# before the session opened: one client round trip more in every variant).
APP_CLOCK = "session_open"


@dataclass(frozen=True)
class CallRecord:
    """One LLM call as the service ran it (from the session graph)."""

    app_id: str
    kind: str                       # the application's kind: chain_summary, chat, map_reduce
    engine: str | None
    criterion: str | None
    submitted: float | None
    ready: float | None             # all inputs known: queued for the policy from here
    dispatched: float | None
    finished: float | None
    state: str


@dataclass
class AppRecord:
    """One application run: its end-to-end latency and how many tokens it generated."""

    app_id: str
    kind: str
    is_main: bool                   # the app under test (chat traffic is background)
    started: float
    finished: float
    output_tokens: int
    calls: list[CallRecord] = field(default_factory=list)
    error: str | None = None
    session_open_s: float = 0.0     # the session's opening round trip, before `started`

    @property
    def latency_s(self) -> float:
        return self.finished - self.started

    @property
    def arrived(self) -> float:
        """When the application began: it opened its session then."""
        return self.started - self.session_open_s

    def to_json(self) -> dict[str, Any]:
        return {"app_id": self.app_id, "kind": self.kind, "is_main": self.is_main,
                "started": self.started, "finished": self.finished,
                "latency_s": self.latency_s, "output_tokens": self.output_tokens,
                "num_calls": len(self.calls), "error": self.error,
                "session_open_s": self.session_open_s}


class Env(Protocol):
    """The cluster a workload runs against (simulated or live)."""

    mode: str                                   # "parrot" or "baseline"

    def new_session(self, app_id: str) -> tuple[Session, NetworkDelay]: ...

    def now(self) -> float: ...

    def app_done(self, record: AppRecord) -> None: ...


def sampling(max_tokens: int) -> dict[str, Any]:
    """Fixed-length outputs, so every mode and engine generates the same number of tokens."""
    return {"max_tokens": max_tokens, "ignore_eos": True}


@dataclass(frozen=True)
class OutputLength:
    """One call's output: the sampling its function declares, the length it really has, and
    the text to append to one of the call's own inputs so that the simulated model stops
    there (empty for exact lengths)."""

    sampling: dict[str, Any]
    num_tokens: int
    marker: str = ""


# Spread of a sampled length around its mean (lognormal sigma): most chat and summary answers
# fall within 0.4-2.5x their mean, a few run longer.
LENGTH_SIGMA = 0.5


def output_length(spec: WorkloadSpec, mean: int, key: str) -> OutputLength:
    """The output of the call `key` (unique in the workload, the same in every variant) of
    nominal length `mean`, by `spec.output_lengths`: exact (max_tokens = mean, ignore_eos) or
    sampled (a seeded lognormal draw of mean `mean`, clipped to [1, max_tokens], under
    max_tokens = max_tokens_factor x mean, stopped by an [[eos@N]] marker)."""
    if spec.output_lengths == "exact":
        return OutputLength(sampling(mean), mean)
    cap = max(1, round(spec.max_tokens_factor * mean))
    rng = random.Random(f"length|{spec.seed}|{key}")
    mu = math.log(mean) - LENGTH_SIGMA ** 2 / 2     # so that the mean is `mean`
    tokens = min(cap, max(1, round(rng.lognormvariate(mu, LENGTH_SIGMA))))
    return OutputLength({"max_tokens": cap, "ignore_eos": False}, tokens,
                        " " + eos_marker(tokens))


@asynccontextmanager
async def app_session(env: Env, app_id: str, kind: str, *, is_main: bool,
                      output_tokens: int) -> AsyncIterator[AppRecord]:
    """Open a session for one application and time it from there (module docstring); the
    body sets `record.finished` (when the final `get` returns). The graph is read (without
    network delay) before the session is deleted."""
    session, network = env.new_session(app_id)
    opening = env.now()
    async with session:
        started = env.now()
        record = AppRecord(app_id, kind, is_main, started, float("nan"), output_tokens,
                           session_open_s=started - opening)
        try:
            yield record
        except Exception as exc:  # noqa: BLE001 - a failed app is reported, not fatal
            record.error = f"{type(exc).__name__}: {exc}"
            record.finished = env.now()
        network.stop()  # reading the graph and closing are bookkeeping, not the application
        record.calls = calls_of(app_id, kind, await session.graph())
    env.app_done(record)


def calls_of(app_id: str, kind: str, graph: Graph) -> list[CallRecord]:
    calls = []
    for node in graph.nodes:
        if not isinstance(node, CallNode):
            continue
        timings = node.timings
        calls.append(CallRecord(app_id, kind, node.engine, node.criterion,
                                timings.get("submitted"), timings.get("ready"),
                                timings.get("dispatched"), timings.get("finished"),
                                node.state))
    calls.sort(key=lambda c: (c.dispatched is None, c.dispatched or 0.0))
    return calls


async def get_latency(var: parrot.SemanticVariable) -> str:
    return await var.aget(parrot.LATENCY)

