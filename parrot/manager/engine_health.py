"""Engine liveness: heartbeats, outages, re-admission, and what happens when no engine is left.

* Every engine in another process (`Engine.is_remote`) has one watcher task that asks `healthz`
  every `engine_heartbeat_interval_s`; when nothing — no heartbeat, no answer to any other
  request (`Engine.last_answer_at`) — has come for `engine_heartbeat_timeout_s` (a frozen
  process, a dead host) the engine is declared down. A watcher whose own sleep overshot (our
  loop stalled, answers wait unread) starts its window afresh. A request that fails because the
  engine is unreachable declares it down at once, but only after one probe confirms it: a
  transient connection error on a live engine re-dispatches that one call and nothing more.
  In-process engines are watched only after a failure, until they answer again.
* Down: the engine leaves the policy's view (`is_healthy=False`), its in-flight requests fail
  at once (`Engine.abort_requests`), so the manager re-dispatches their calls, and the prefix
  contexts the manager cached there are forgotten (their frees are delivered if it comes back).
* Up again (the process resuming, or a new one at the same URL): re-admitted with an empty
  prefix cache. A process that comes back at another URL re-registers by name
  (`Manager.add_engine`).
* No engine left: ready calls wait `no_engine_grace_s` for one to come back, then fail with
  EngineUnavailableError, and so do new submits until an engine is back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from parrot.serve_config import EngineSpec, ManagerConfig
from parrot.manager.engine_pool import EnginePool, EngineState
from parrot.manager.events import EngineUp, HealthEvent, NoEngine
from parrot.engines.client import HttpEngine, HttpEngineSettings
from parrot.engines.protocol import Engine
from parrot.errors import ConflictError, EngineUnavailableError, InvalidRequestError, ParrotError

log = logging.getLogger(__name__)

Spawn = Callable[[Coroutine[Any, Any, Any], str], None]


def http_engine_settings(config: ManagerConfig) -> HttpEngineSettings:
    """The client settings for engine processes, from the manager's engine_* keys."""
    return HttpEngineSettings(connect_timeout_s=config.engine_connect_timeout_s,
                              request_timeout_s=config.engine_request_timeout_s,
                              # the heartbeat's own bound fires first: no answer in time
                              # and a refused probe are told apart
                              probe_timeout_s=2 * config.engine_heartbeat_timeout_s,
                              pool_size=config.engine_pool_size)


class EngineHealth:
    def __init__(self, pool: EnginePool, config: ManagerConfig, *, spawn: Spawn,
                 notify: Callable[[HealthEvent], None]) -> None:
        """notify: the manager's one entry for what health finds (events.py)."""
        self._pool = pool
        self._config = config
        self._spawn = spawn
        self._notify = notify
        self._watched: set[str] = set()
        self._outage_since: float | None = None  # when the last healthy engine went down
        self._grace_timer: asyncio.TimerHandle | None = None
        self._confirming: dict[str, asyncio.Future[bool | None]] = {}

    async def admit(self, spec: EngineSpec, engine: Engine) -> EngineState:
        """Add an engine to the pool, or re-admit one by name: an engine that is down
        (restarted, maybe at another URL) or that registers again from the same URL with a new
        secret (restarted before its heartbeat lapsed) gets the new client and an empty prefix
        cache; the same process registering again is a no-op (the spare client is closed); a
        live engine's name at another URL is a conflict."""
        info = await engine.info()
        state = next((e for e in self._pool if e.engine_id == spec.name), None)
        if state is None:
            state = self._pool.add(spec, engine, info)
            log.info("engine %s joined (%s, %s)", spec.name, info.kind, info.model)
            self._end_outage()  # a new engine ends an outage as well as a returning one
        else:
            client = engine if isinstance(engine, HttpEngine) else None
            same_url = client is not None and getattr(state.engine, "url", None) == client.url
            if state.is_healthy and client is not None and same_url \
                    and client.same_endpoint(state.engine):
                await engine.close()
                return state
            if state.is_healthy and not same_url:
                raise ConflictError(f"an engine named {spec.name!r} is already registered")
            old = state.engine
            self._pool.reconnect(state, spec, engine, info)
            old.abort_requests(f"engine {spec.name} re-registered")  # its calls move over
            self._spawn(_close_later(old), f"close-old-{spec.name}")
            log.info("engine %s re-registered at %s", spec.name, getattr(engine, "url", "-"))
            self.mark_up(state)
        if state.engine.is_remote:
            self._start_watcher(state)
        self._notify(EngineUp(state.engine_id))
        return state

    def close(self) -> None:
        if self._grace_timer is not None:
            self._grace_timer.cancel()
        for probe in list(self._confirming.values()):
            probe.cancel()

    async def confirm_down(self, state: EngineState, error: EngineUnavailableError) -> None:
        """A request to `state` failed as unreachable: mark the engine down unless a probe
        shows it alive (then only that request failed). A probe that gets no answer in time
        is not proof on its own while the engine is still answering other requests (a busy
        manager reads answers late); a refused probe is."""
        if not state.is_healthy:
            return
        # Many calls fail together when an engine dies: they share one probe.
        probe = self._confirming.get(state.engine_id)
        if probe is None:
            probe = self._confirming[state.engine_id] = asyncio.ensure_future(self._probe(state))
            probe.add_done_callback(lambda _: self._confirming.pop(state.engine_id, None))
        answer = await asyncio.shield(probe)
        if not state.is_healthy:
            return
        if answer or (answer is None and self._answered_lately(state)):
            log.info("engine %s: a request failed (%s) but the engine lives; only that call "
                     "is re-dispatched", state.engine_id, error)
            return
        self.mark_down(state, str(error))

    def mark_down(self, state: EngineState, reason: str) -> None:
        if not state.is_healthy:
            return
        log.warning("engine %s down (%s); its calls are re-dispatched", state.engine_id, reason)
        state.is_healthy = False
        state.engine.abort_requests(reason)
        stale = [ctx.context_id for ctx in state.contexts.prefix_hashes.values()]
        state.contexts.forget_all()
        if stale:
            self._spawn(_free_all(state, stale), f"free-stale-{state.engine_id}")
        if not state.engine.is_remote:
            self._start_watcher(state)  # in-process: watched until it answers again
        if self._outage_since is None and not any(e.is_healthy for e in self._pool):
            loop = asyncio.get_running_loop()
            self._outage_since = loop.time()
            self._grace_timer = loop.call_later(self._config.no_engine_grace_s,
                                                self._grace_expired)

    def no_engine_error(self) -> EngineUnavailableError | None:
        """The error for new work once every engine has been down past the grace period."""
        if self._outage_since is None or self._grace_timer is not None:
            return None
        down = ", ".join(f"{e.engine_id}" for e in self._pool)
        return EngineUnavailableError(
            f"no engine can take the call: every engine is down ({down}) for more than "
            f"no_engine_grace_s={self._config.no_engine_grace_s:g}")

    def check_can_take(self, max_tokens: dict[str, int]) -> None:
        """Refuse a submit no engine can serve: every engine down past the grace period, or an
        output's max_tokens over the largest context window (it could never finish as asked
        and would hold a batch slot until the window fills) or over `max_output_tokens`."""
        if (error := self.no_engine_error()) is not None:
            raise error
        window = self._pool.max_context_len
        cap = self._config.max_output_tokens
        known = [n for n in (window, cap) if n is not None]
        if not known:
            return
        limit = min(known)
        for name, n in max_tokens.items():
            if n > limit:  # (the message is formatted only here: every submit passes by)
                why = (f"manager.max_output_tokens ({cap})" if cap == limit
                       else f"the largest engine context window ({window} tokens)")
                raise InvalidRequestError(f"output {name!r}: max_tokens={n} exceeds {why}: "
                                          f"over the limit of {limit}")

    # ---- internals ---------------------------------------------------------------------------

    def _start_watcher(self, state: EngineState) -> None:
        if state.engine_id not in self._watched:
            self._watched.add(state.engine_id)
            self._spawn(self._watch(state), f"heartbeat-{state.engine_id}")

    async def _watch(self, state: EngineState) -> None:
        loop = asyncio.get_running_loop()
        interval = self._config.engine_heartbeat_interval_s
        timeout = self._config.engine_heartbeat_timeout_s
        last_answer = loop.time()
        try:
            while state.engine.is_remote or not state.is_healthy:
                if await self._probe(state):
                    last_answer = loop.time()
                    if not state.is_healthy:
                        self.mark_up(state)
                else:
                    silent = loop.time() - max(last_answer, state.engine.last_answer_at or 0.0)
                    if state.is_healthy and silent >= timeout:
                        self.mark_down(state, f"no heartbeat answer for {silent:.1f} s")
                slept_from = loop.time()
                await asyncio.sleep(interval)
                if loop.time() - slept_from > interval + timeout / 2:
                    # Our own loop stalled: answers may be waiting unread. Judge afresh.
                    last_answer = loop.time()
        finally:
            self._watched.discard(state.engine_id)

    async def _probe(self, state: EngineState) -> bool | None:
        """True: healthy; False: refused or unhealthy; None: no answer within the timeout."""
        try:
            return await asyncio.wait_for(state.engine.healthz(),
                                          self._config.engine_heartbeat_timeout_s)
        except TimeoutError:
            return None
        except ParrotError:
            return False

    def _answered_lately(self, state: EngineState) -> bool:
        seen = state.engine.last_answer_at
        return seen is not None and \
            asyncio.get_running_loop().time() - seen < self._config.engine_heartbeat_timeout_s

    def mark_up(self, state: EngineState) -> None:
        log.info("engine %s answers again: re-admitted", state.engine_id)
        state.is_healthy = True
        self._end_outage()
        self._notify(EngineUp(state.engine_id))

    def _end_outage(self) -> None:
        self._outage_since = None
        if self._grace_timer is not None:
            self._grace_timer.cancel()
            self._grace_timer = None

    def _grace_expired(self) -> None:
        self._grace_timer = None
        error = self.no_engine_error()
        if error is not None:
            log.error("%s", error)
            self._notify(NoEngine(error))


async def _free_all(state: EngineState, context_ids: list[str]) -> None:
    """Best effort: a down HttpEngine keeps these and delivers them when it answers again."""
    engine = state.engine
    for context_id in context_ids:
        try:
            await engine.free_context(context_id)
        except ParrotError:
            pass


async def _close_later(engine: Engine, delay_s: float = 1.0) -> None:
    """Close a replaced client once its aborted requests have unwound."""
    await asyncio.sleep(delay_s)
    await engine.close()
