"""A parrot-serve's /metrics as a benchmark reads it: totals over its engines, their growth
over a run, and waiting for the graph captures an engine's warm-up left for idle time.

Metric names are /metrics' (docs/HTTP_API.md); each total sums every label set (every
engine) of one metric.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import aiohttp

STEPS = "parrot_engine_steps_total"
RUNTIME_CAPTURES = "parrot_engine_graph_captures_at_runtime_total"
RUNTIME_CAPTURE_S = "parrot_engine_graph_capture_seconds_total"
IDLE_CAPTURES = "parrot_engine_graph_captures_idle_total"


def metric_total(metrics_text: str, name: str) -> float:
    """The sum of metric `name` over every label set (every engine) in a /metrics page."""
    total = 0.0
    for line in metrics_text.splitlines():
        if line.startswith(name) and line[len(name):len(name) + 1] in ("{", " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def steps_total(metrics_text: str) -> int:
    """The sum of every engine's `parrot_engine_steps_total` in a /metrics page."""
    return int(metric_total(metrics_text, STEPS))


async def server_metrics(url: str, admin_token: str) -> str:
    async with aiohttp.ClientSession() as client:
        async with client.get(f"{url}/metrics",
                              headers={"Authorization": f"Bearer {admin_token}"}) as reply:
            reply.raise_for_status()
            return await reply.text()


def grown(before: str, after: str, name: str) -> float:
    """How much metric `name` grew between two /metrics pages."""
    return metric_total(after, name) - metric_total(before, name)


async def idle_captures(url: str, admin_token: str) -> float:
    """Graphs the server's engines captured while idle so far."""
    return metric_total(await server_metrics(url, admin_token), IDLE_CAPTURES)


async def settle_idle_captures(read: Callable[[], Awaitable[float]], *, quiet_s: float = 1.5,
                               poll_s: float = 0.25, timeout_s: float = 300.0
                               ) -> tuple[float, int]:
    """Wait until the engines stop capturing the graphs their warm-up left for idle time
    (`lazy_graphs`; `read()` gives how many they captured so far): until the count has not
    moved for `quiet_s` (one capture takes tens of ms), at most `timeout_s`. Timing starts on
    a warm engine, so no run pays a capture its warm-up would have made. (seconds waited,
    graphs captured meanwhile)."""
    loop = asyncio.get_running_loop()
    started = last_change = loop.time()
    first = last = await read()
    while loop.time() - last_change < quiet_s and loop.time() - started < timeout_s:
        await asyncio.sleep(poll_s)
        now = await read()
        if now != last:
            last, last_change = now, loop.time()
    return loop.time() - started, int(last - first)
