"""`GET /metrics`: Prometheus metrics of the manager, and the access log.

State (queue depth per criterion, calls by state, engine load and KV use, prefix hits) is read
from the manager when scraped, so it is never stale and costs nothing between scrapes. Events
(per-call latencies, policy decision time, HTTP requests) are observed as they happen through
the manager's `call_observers`, the scheduler's `round_observers` and the HTTP app's one
middleware (`http_api.Front`, which calls `Metrics.observe_request` after every request).
Every server has its own `CollectorRegistry` (no process-global state).

    parrot_ready_calls{criterion}          calls waiting for a placement
    parrot_calls{state}                    calls of live sessions by lifecycle state
    parrot_sessions                        live sessions
    parrot_engine_running_calls{engine}    placed and not finished
    parrot_engine_tokens_in_use{engine}    the manager's token accounting of running calls
    parrot_engine_kv_cached_tokens{engine} KV held by cached prefix contexts
    parrot_engine_kv_capacity_tokens{engine}
    parrot_engine_kv_usage_ratio{engine}   (running + cached) / capacity
    parrot_engine_healthy{engine}
    parrot_engine_reported_kv_blocks_used/_capacity{engine}, parrot_engine_reported_waiting/_running
                                           what each engine reports about itself (asked at scrape)
    parrot_engine_steps_total, _step_seconds_total, ... {engine}
                                           the engine's own cumulative work counters, one per
                                           name of parrot/engines/counters.py (its `metric`,
                                           milliseconds and microseconds as seconds; 0 where
                                           an engine does not count it)
    parrot_prefix_lookups_total{engine,result="hit"|"miss"}, parrot_prefix_hit_ratio{engine}
    parrot_engine_tpot_recent_seconds{engine}, parrot_engine_tpot_target_seconds{engine},
    parrot_engine_tpot_over_target_ratio{engine}, parrot_engine_tpot_target_load_tokens{engine}
                                           TPOT against the policy's per-token target
                                           (tpot_target block below)
    parrot_call_ttft_seconds, parrot_call_tpot_seconds, parrot_call_e2e_seconds  (histograms;
        TTFT/TPOT of calls whose outputs were streamed, or answered whole with the first
        token's time as the engine measured it (`GenerateResult.first_token_s`: in process
        and over either engine wire; an engine that does not time it gives none))
    parrot_calls_finished_total{state}
    parrot_policy_decision_seconds         one scheduling round (histogram)
    parrot_http_requests_total{method,route,status}, parrot_http_request_seconds{route}

Aborted work (`AbortedWork`, its own block): calls cancelled while placed on an engine (a
client that went away, a session DELETE, a drain) and the tokens the manager received for them.

    parrot_aborted_calls_total             calls cancelled on an engine
    parrot_aborted_tokens_total            tokens the manager had received for them: a lower
                                           bound (a Generate that nobody streamed is answered
                                           whole, in process or over HTTP: an abort before its
                                           end counts its call, not its tokens)

What the engines decoded for nobody is theirs to count, exactly, per engine:
parrot_engine_aborted_generates_total and parrot_engine_aborted_decode_tokens_total (every
Generate aborted before it finished, whoever aborted it; the engine counters above).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterable, Sequence

from aiohttp import web
from prometheus_client import (CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram,
                               generate_latest)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from parrot.manager.engine_pool import EngineState
from parrot.manager.call_flow import CANCELLED
from parrot.manager.manager import Manager
from parrot.manager.nodes import Call
from parrot.server.http_api import FRONT, bearer_token
from parrot.server.tenants import AccessControl
from parrot.engines.counters import COUNTERS
from parrot.engines.protocol import EngineStats
from parrot.errors import ParrotError
from parrot.types import CallState, Criterion

access_log = logging.getLogger("parrot.access")

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28)
_DECISION_BUCKETS = (1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 0.01, 0.05, 0.1, 0.5)


class ManagerCollector(Collector):
    """The manager's current state, read at scrape time."""

    def __init__(self, manager: Manager) -> None:
        self.manager = manager
        # What each engine last reported about itself (refreshed before every scrape).
        self.engine_stats: dict[str, EngineStats] = {}
        self.tpot_target = TpotAgainstTarget()

    async def refresh_engine_stats(self, timeout_s: float = 2.0) -> None:
        """Ask every healthy engine for its own stats (KV blocks, queue); an engine that does
        not answer in time keeps its last report out of this scrape."""
        engines = [e for e in self.manager.engines if e.is_healthy]

        async def one(engine: EngineState) -> EngineStats | None:
            try:
                return await asyncio.wait_for(engine.engine.stats(), timeout_s)
            except (TimeoutError, ParrotError):
                return None

        reports = await asyncio.gather(*(one(e) for e in engines))
        self.engine_stats = {e.engine_id: r for e, r in zip(engines, reports) if r is not None}

    def collect(self) -> Iterable[Metric]:
        m = self.manager
        ready = GaugeMetricFamily("parrot_ready_calls", "calls waiting for a placement",
                                  labels=["criterion"])
        by_criterion = {c.value: 0 for c in Criterion}
        for call in m.scheduler.ready_calls():
            by_criterion[(call.criterion or Criterion.LATENCY).value] += 1
        for criterion, count in by_criterion.items():
            ready.add_metric([criterion], count)
        yield ready
        states = GaugeMetricFamily("parrot_calls", "calls of live sessions by state",
                                   labels=["state"])
        counts = {s.value: 0 for s in CallState}
        sessions = list(m.sessions)
        for session in sessions:
            for call in session.calls.values():
                counts[call.state.value] += 1
        for state, count in counts.items():
            states.add_metric([state], count)
        yield states
        yield GaugeMetricFamily("parrot_sessions", "live sessions", value=len(sessions))
        yield from self._engines()
        yield from self.tpot_target.collect(m, self.engine_stats)

    def _engines(self) -> Iterable[Metric]:
        def gauge(name: str, doc: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=["engine"])

        running = gauge("parrot_engine_running_calls", "calls placed on the engine, running")
        in_use = gauge("parrot_engine_tokens_in_use", "token accounting of its running calls")
        cached = gauge("parrot_engine_kv_cached_tokens", "KV tokens held by cached prefixes")
        capacity = gauge("parrot_engine_kv_capacity_tokens", "KV cache size in tokens")
        usage = gauge("parrot_engine_kv_usage_ratio", "(running + cached tokens) / capacity")
        healthy = gauge("parrot_engine_healthy", "1 when the engine answers")
        hit_ratio = gauge("parrot_prefix_hit_ratio", "prefix context lookups that hit")
        lookups = CounterMetricFamily("parrot_prefix_lookups", "prefix context lookups",
                                      labels=["engine", "result"])
        for e in self.manager.engines:
            name = [e.engine_id]
            running.add_metric(name, len(e.running))
            in_use.add_metric(name, e.num_tokens_in_use)
            cached.add_metric(name, e.contexts.num_cached_tokens)
            capacity.add_metric(name, e.kv_capacity_tokens)
            usage.add_metric(name, (e.num_tokens_in_use + e.contexts.num_cached_tokens)
                             / max(e.kv_capacity_tokens, 1))
            healthy.add_metric(name, 1.0 if e.is_healthy else 0.0)
            hits, misses = e.contexts.num_hits, e.contexts.num_misses
            lookups.add_metric([e.engine_id, "hit"], hits)
            lookups.add_metric([e.engine_id, "miss"], misses)
            hit_ratio.add_metric(name, hits / (hits + misses) if hits + misses else 0.0)
        yield from (running, in_use, cached, capacity, usage, healthy, lookups, hit_ratio)
        yield from self.reported()

    def reported(self) -> Iterable[Metric]:
        """The engines' own view: KV blocks in use by their allocator, requests queued inside."""
        blocks_used = GaugeMetricFamily("parrot_engine_reported_kv_blocks_used", "KV blocks in "
                                        "use, as the engine reports", labels=["engine"])
        # Prometheus keeps `_total` for counters: a gauge of the engine's size is `_capacity`.
        blocks_total = GaugeMetricFamily("parrot_engine_reported_kv_blocks_capacity", "KV "
                                         "blocks, as the engine reports", labels=["engine"])
        waiting = GaugeMetricFamily("parrot_engine_reported_waiting", "requests queued inside "
                                    "the engine", labels=["engine"])
        running = GaugeMetricFamily("parrot_engine_reported_running", "sequences in the "
                                    "engine's running batch", labels=["engine"])
        # every known counter for every engine, 0 where it does not count it
        work = [(c, CounterMetricFamily(c.metric, c.meaning, labels=["engine"]))
                for c in COUNTERS]
        for name, stats in sorted(self.engine_stats.items()):
            blocks_used.add_metric([name], stats.num_blocks_total - stats.num_blocks_free)
            blocks_total.add_metric([name], stats.num_blocks_total)
            waiting.add_metric([name], stats.num_waiting)
            running.add_metric([name], stats.num_running)
            for counter, family in work:
                family.add_metric([name], stats.counter(counter.name) * counter.scale)
        yield from (blocks_used, blocks_total, waiting, running, *(f for _, f in work))


# --- TPOT against the per-token latency target, per engine ---------------------------------

class TpotAgainstTarget:
    """Each engine's time per output token since the previous scrape (from its cumulative
    `tpot_generates` / `tpot_us_sum`), and, where the policy keeps a per-token target
    (`Policy.tpot_target_ms`), the target, the ratio of the two (> 1: missed) and the load at
    which the engine's speed profile meets the target (the bound the policy keeps to). An
    engine that finished no Generate since the previous scrape has no recent TPOT."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[int, int]] = {}   # engine -> (generates, us_sum) seen

    def collect(self, manager: Manager, stats: dict[str, EngineStats]) -> Iterable[Metric]:
        def gauge(name: str, doc: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=["engine"])

        recent = gauge("parrot_engine_tpot_recent_seconds", "mean time per output token of "
                       "the Generates the engine finished since the previous scrape")
        target = gauge("parrot_engine_tpot_target_seconds", "the policy's per-token latency "
                       "target")
        ratio = gauge("parrot_engine_tpot_over_target_ratio", "recent TPOT / the target "
                      "(> 1: the target was missed)")
        bound = gauge("parrot_engine_tpot_target_load_tokens", "the load (tokens) at which "
                      "the engine's speed profile meets the target")
        target_ms = manager.scheduler.policy.tpot_target_ms
        by_name = {e.engine_id: e for e in manager.engines}
        for name, report in sorted(stats.items()):
            seen = self._last.get(name, (0, 0))
            now = (report.counter("tpot_generates"), report.counter("tpot_us_sum"))
            self._last[name] = now
            count, us = now[0] - seen[0], now[1] - seen[1]
            mean_s = us * 1e-6 / count if count > 0 else None   # a restart resets: skip it
            if mean_s is not None:
                recent.add_metric([name], mean_s)
            engine = by_name.get(name)
            if target_ms is None or engine is None:
                continue
            target.add_metric([name], target_ms * 1e-3)
            bound.add_metric([name], engine.profile.max_batch_tokens(target_ms
                                                                     * engine.spec.speed))
            if mean_s is not None:
                ratio.add_metric([name], mean_s / (target_ms * 1e-3))
        yield from (recent, target, ratio, bound)


class Metrics:
    """A registry for one server: the state collector plus the event metrics."""

    def __init__(self, manager: Manager, wire_routes: Sequence[tuple[str, str]],
                 access: AccessControl | None = None) -> None:
        # The scrape shows per-engine prefix hits: the side channel GET /v1/engines keeps from
        # tenants (docs/SECURITY.md), so /metrics needs the admin token too.
        self._access = access
        self.registry = CollectorRegistry()
        self.state = ManagerCollector(manager)
        self.registry.register(self.state)
        # A label is the route's template whatever the method (the method is its own label).
        self._route_labels = [(re.compile(pattern), _template(pattern))
                              for _method, pattern in wire_routes]
        r = self.registry
        self.ttft = Histogram("parrot_call_ttft_seconds", "submit to first generated token",
                              buckets=_LATENCY_BUCKETS, registry=r)
        self.tpot = Histogram("parrot_call_tpot_seconds", "time per output token after the "
                              "first", buckets=_TOKEN_BUCKETS, registry=r)
        self.e2e = Histogram("parrot_call_e2e_seconds", "submit to the call's last output",
                             buckets=_LATENCY_BUCKETS, registry=r)
        self.finished = Counter("parrot_calls_finished", "calls that left an engine",
                                ["state"], registry=r)
        self.decision = Histogram("parrot_policy_decision_seconds", "one scheduling round",
                                  buckets=_DECISION_BUCKETS, registry=r)
        self.requests = Counter("parrot_http_requests", "HTTP requests",
                                ["method", "route", "status"], registry=r)
        self.request_seconds = Histogram("parrot_http_request_seconds", "HTTP request time "
                                         "(to the end of a stream)", ["route"],
                                         buckets=_LATENCY_BUCKETS, registry=r)
        # The request metrics' children by their labels, held here: `labels()` validates and
        # locks on every call, and returns the same child for the same labels anyway (the
        # children are as many as prometheus-client keeps).
        self._request_counts: dict[tuple[str, str, int], Counter] = {}
        self._request_timers: dict[str, Histogram] = {}
        self._finished_counts: dict[CallState, Counter] = {}
        manager.call_observers.append(self.observe_call)
        manager.scheduler.round_observers.append(lambda seconds, _: self.decision.observe(seconds))
        self.aborted = AbortedWork(manager, r)

    def observe_call(self, call: Call) -> None:
        if call.state is CallState.RUNNING:
            return  # re-queued after an engine failure: it finishes later
        finished = self._finished_counts.get(call.state)
        if finished is None:
            finished = self._finished_counts[call.state] = self.finished.labels(
                call.state.value)
        finished.inc()
        t = call.timings
        if call.state is not CallState.DONE or "submitted" not in t or "finished" not in t:
            return
        self.e2e.observe(t["finished"] - t["submitted"])
        if "first_token" in t:
            self.ttft.observe(t["first_token"] - t["submitted"])
            tokens = sum(b.stream.num_tokens for b in call.outputs.values())
            if tokens > 1:
                self.tpot.observe((t["finished"] - t["first_token"]) / (tokens - 1))

    def route_label(self, request: web.Request) -> str:
        """A bounded label: the route's template, never the raw path."""
        resource = request.match_info.route.resource
        canonical = resource.canonical if resource is not None else ""
        if canonical and "{tail}" not in canonical:
            return canonical
        for pattern, template in self._route_labels:
            if pattern.fullmatch(request.path):
                return template
        return "unmatched"

    def setup(self, app: web.Application) -> None:
        app.router.add_get("/metrics", self.serve)
        app[FRONT].observe(self.observe_request)

    async def serve(self, request: web.Request) -> web.Response:
        if self._access is not None:
            self._access.require_admin(bearer_token(request), "/metrics")
        await self.state.refresh_engine_stats()
        return web.Response(body=generate_latest(self.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    def observe_request(self, request: web.Request, status: int, seconds: float) -> None:
        """A request answered (`http_api.Front`, the app's one middleware, calls it after
        every request, with the status a client got or 500 where none came)."""
        route = self.route_label(request)
        self._request_count(request.method, route, status).inc()
        self._request_timer(route).observe(seconds)
        if access_log.isEnabledFor(logging.INFO):  # the peer and path cost a lookup each
            access_log.info("%s %s %s %d %.1fms", request.remote, request.method,
                            request.path_qs, status, seconds * 1000)

    def _request_count(self, method: str, route: str, status: int) -> Counter:
        key = (method, route, status)
        child = self._request_counts.get(key)
        if child is None:
            child = self._request_counts[key] = self.requests.labels(method, route, str(status))
        return child

    def _request_timer(self, route: str) -> Histogram:
        child = self._request_timers.get(route)
        if child is None:
            child = self._request_timers[route] = self.request_seconds.labels(route)
        return child


class AbortedWork:
    """Counters of the work cancellation threw away (observed as each cancelled call ends)."""

    def __init__(self, manager: Manager, registry: CollectorRegistry) -> None:
        self.calls = Counter("parrot_aborted_calls", "calls cancelled while on an engine "
                             "(client gone, session deleted, drain)", registry=registry)
        # The manager sees only the tokens that reached it; the engines count what they
        # decoded (parrot_engine_aborted_decode_tokens_total).
        self.tokens = Counter("parrot_aborted_tokens", "tokens the manager had received for "
                              "calls cancelled on an engine (a lower bound: a Generate that "
                              "was not streamed reports none before it finishes; the tokens "
                              "decoded: parrot_engine_aborted_decode_tokens_total)",
                              registry=registry)
        manager.call_observers.append(self.observe_call)

    def observe_call(self, call: Call) -> None:
        if call.state is not CallState.FAILED or call.error != CANCELLED:
            return
        self.calls.inc()
        self.tokens.inc(sum(b.stream.num_tokens for b in call.outputs.values()))


def _template(pattern: str) -> str:
    """`/v1/sessions/(?P<sid>[^/]+)` -> `/v1/sessions/{sid}`."""
    return re.sub(r"\(\?P<(\w+)>[^)]*\)", r"{\1}", pattern)
