"""The wire API of the manager (DESIGN.md) as one route table over JSON bodies.

Both the aiohttp server (`http_api.py`) and the frontend's in-process transport dispatch through
`WireAPI.handle`, so they parse, authenticate and answer exactly alike.

The front door's rules live here too (docs/SECURITY.md): who may open sessions and register
engines (`AccessControl`), how much unfinished work a session and the service take (`Admission`,
429 + Retry-After), `max_tokens` against the engines' context windows, and draining on shutdown
(503 for new work).
"""

from __future__ import annotations

import gc
import re
import sys
from typing import Any
from collections.abc import Awaitable, Callable

from parrot.core.admission import Admission
from parrot.core.chat_submit import mark_streamed, pop_streamed, render_chat_submit
from parrot.core.config import EngineSpec
from parrot.core.manager import Manager
from parrot.core.nodes import Call
from parrot.core.requests import (GetRequest, SubmitRequest, batch_items, optional_value,
                                  resolve_batch_refs, session_id_of)
from parrot.core.sessions import Session
from parrot.core.tenants import AccessControl, TenantGrant
from parrot.errors import (InvalidRequestError, MethodNotAllowedError, NotFoundError, ParrotError,
                           ShuttingDownError, TooManyRequestsError)
from parrot.types import Criterion

# What anyone may see of an engine; load and prefix-cache counters are the admin's only (a
# tenant watching another's cache hits could confirm a guess of its prompt).
PUBLIC_ENGINE_FIELDS = ("name", "kind", "model", "healthy", "latency_capacity",
                        "throughput_capacity")

Body = Any
Reply = dict[str, Any]
RegisterEngine = Callable[[EngineSpec], Awaitable[None]]
Route = Callable[[re.Match, Body, "str | None"], Awaitable[Reply]]


class WireAPI:
    def __init__(self, manager: Manager, register_engine: RegisterEngine | None = None,
                 access: AccessControl | None = None) -> None:
        self.manager = manager
        self._register_engine = register_engine
        config = manager.config
        self.access = access or AccessControl(admin_token=config.admin_token)
        self.admission = Admission(config.max_active_calls, config.max_active_calls_per_session,
                                   config.retry_after_s)
        self.is_draining = False  # set on shutdown: no new sessions or calls
        self._routes: list[tuple[str, re.Pattern, Route]] = [
            ("GET", re.compile(r"/healthz"), self.healthz),
            ("POST", re.compile(r"/v1/sessions"), self.create_session),
            ("DELETE", re.compile(r"/v1/sessions/(?P<sid>[^/]+)"), self.delete_session),
            ("GET", re.compile(r"/v1/sessions/(?P<sid>[^/]+)/graph"), self.graph),
            ("GET", re.compile(r"/v1/sessions/(?P<sid>[^/]+)/stats"), self.session_stats),
            ("POST", re.compile(r"/v1/submit"), self.submit),
            ("POST", re.compile(r"/v1/submit_batch"), self.submit_batch),
            ("POST", re.compile(r"/v1/variables"), self.create_variable),
            ("POST", re.compile(r"/v1/variables/(?P<vid>[^/]+)"), self.set_variable),
            ("POST", re.compile(r"/v1/get"), self.get),
            ("GET", re.compile(r"/v1/engines"), self.list_engines),
            ("POST", re.compile(r"/v1/engines"), self.register_engine),
            ("GET", re.compile(r"/v1/stats"), self.stats),
        ]

    @property
    def route_table(self) -> list[tuple[str, str]]:
        """(method, path regex) of every route: for /openapi.json and the metrics' labels."""
        return [(method, pattern.pattern) for method, pattern, _ in self._routes]

    async def handle(self, method: str, path: str, body: Body, token: str | None) -> Reply:
        allowed = []
        for route_method, pattern, route in self._routes:
            match = pattern.fullmatch(path)
            if match is None:
                continue
            if route_method == method:
                return await route(match, body, token)
            allowed.append(route_method)
        if allowed:
            raise MethodNotAllowedError(f"{method} is not allowed on {path}; use {allowed}")
        raise NotFoundError(f"no such endpoint: {method} {path}")

    def _session(self, body: Body, token: str | None) -> Session:
        if not isinstance(body, dict):
            raise InvalidRequestError("request body must be a JSON object")
        return self.manager.authenticate(session_id_of(body), token)

    async def healthz(self, match: re.Match, body: Body, token: str | None) -> Reply:
        healthy = sum(e.is_healthy for e in self.manager.engines)
        total = len(self.manager.engines)
        return {"status": "ok" if healthy == total else "degraded", "engines": total,
                "healthy_engines": healthy}

    def _admit_new_work(self) -> None:
        if self.is_draining:
            raise ShuttingDownError("the service is shutting down and admits no new work")

    def admit_session(self, token: str | None) -> TenantGrant:
        """The checks before any new session (also the OpenAI routes' private ones): the service
        admits work, `token` is a tenant's API key where tenants are configured, and the
        session limit holds."""
        self._admit_new_work()
        grant = self.access.grant_session(token)
        if len(self.manager.sessions) >= self.manager.config.max_sessions:
            raise TooManyRequestsError(f"the service has {len(self.manager.sessions)} sessions "
                                       "(the limit); delete idle ones or retry later",
                                       self.admission.retry_after_s)
        return grant

    async def create_session(self, match: re.Match, body: Body, token: str | None) -> Reply:
        grant = self.admit_session(token)
        session = self.manager.create_session()
        # Before any submit, so every prefix hash of the session carries its tenant's salt.
        session.tenant, session.prefix_salt = grant.tenant, grant.prefix_salt
        return {"session_id": session.session_id, "token": session.token}

    async def delete_session(self, match: re.Match, body: Body, token: str | None) -> Reply:
        session = self.manager.authenticate(match["sid"], token)
        self.manager.delete_session(session)
        return {"deleted": session.session_id}

    async def graph(self, match: re.Match, body: Body, token: str | None) -> Reply:
        return self.manager.graph(self.manager.authenticate(match["sid"], token))

    async def submit(self, match: re.Match, body: Body, token: str | None) -> Reply:
        """Submit one call. With `"wait": true` the reply comes when the call's outputs exist
        and carries them (`values`): a plain blocking completion, as request-level clients
        (the baseline) use it."""
        session = self._session(body, token)
        body = dict(body)
        wait = body.pop("wait", False)
        if not isinstance(wait, bool):
            raise InvalidRequestError(f"submit: 'wait' must be a boolean, got {wait!r}")
        self._admit_new_work()
        self.admission.check(session, 1)
        body, streamed = pop_streamed(body)
        call = self._submit(session, SubmitRequest.from_json(
            render_chat_submit(self.manager, body)))
        mark_streamed(session, call, streamed)
        reply = self._submit_reply(call)
        if wait:
            reply["values"] = {name: await self.manager.get(session, b.var_id,
                                                            Criterion.LATENCY)
                               for name, b in call.outputs.items()}
        return reply

    def _submit(self, session: Session, request: SubmitRequest) -> Call:
        # max_tokens against the engines' windows and the configured cap: Manager.submit.
        call = self.manager.submit(session, request)
        self.admission.admitted(session, call)
        return call

    @staticmethod
    def _submit_reply(call: Call) -> Reply:
        placeholders = [{"name": b.name, "semantic_var_id": b.var_id}
                        for b in (*call.inputs.values(), *call.outputs.values())]
        return {"request_id": call.call_id, "placeholders": placeholders}

    async def submit_batch(self, match: re.Match, body: Body, token: str | None) -> Reply:
        """Several submits in one message, in order; a call may bind an output of an earlier
        call of the batch with `{"ref": {"call": j, "output": name}}`. Each call is accepted or
        rejected on its own: `results[i]` is a submit reply or an `{"error": ...}` object."""
        session = self._session(body, token)
        items = batch_items(body)
        self._admit_new_work()
        self.admission.check(session, len(items))
        results: list[Reply] = []
        for index, item in enumerate(items):
            try:
                resolved = resolve_batch_refs(item, index, results)
                resolved["session_id"] = session.session_id
                resolved, streamed = pop_streamed(resolved)
                call = self._submit(session, SubmitRequest.from_json(
                    render_chat_submit(self.manager, resolved)))
                mark_streamed(session, call, streamed)
                results.append(self._submit_reply(call))
            except ParrotError as exc:
                results.append(exc.to_wire())
        return {"results": results}

    async def create_variable(self, match: re.Match, body: Body, token: str | None) -> Reply:
        session = self._session(body, token)
        var = self.manager.create_variable(session, body.get("name", "var"), optional_value(body))
        return {"semantic_var_id": var.var_id}

    async def set_variable(self, match: re.Match, body: Body, token: str | None) -> Reply:
        session = self._session(body, token)
        self.manager.set_variable(session, match["vid"], optional_value(body, required=True))
        return {"semantic_var_id": match["vid"]}

    async def get(self, match: re.Match, body: Body, token: str | None) -> Reply:
        session = self._session(body, token)
        req = GetRequest.from_json(body)
        if session.num_waiters >= self.manager.config.max_waiting_gets_per_session:
            raise TooManyRequestsError(f"this session already has {session.num_waiters} `get`s "
                                       "waiting (the limit)", self.admission.retry_after_s)
        return {"value": await self.manager.get(session, req.semantic_var_id, req.criteria,
                                                req.timeout)}

    async def list_engines(self, match: re.Match, body: Body, token: str | None) -> Reply:
        return {"engines": self._describe_engines(token)}

    def _describe_engines(self, token: str | None) -> list[Reply]:
        full = [e.describe() for e in self.manager.engines]
        if self.access.is_admin(token):
            return full
        return [{k: d[k] for k in PUBLIC_ENGINE_FIELDS if k in d} for d in full]

    async def register_engine(self, match: re.Match, body: Body, token: str | None) -> Reply:
        self.access.require_admin(token, "registering an engine")
        if self._register_engine is None:
            raise NotFoundError("this manager does not accept engines by URL")
        if not isinstance(body, dict) or not isinstance(body.get("url"), str) \
                or not isinstance(body.get("name"), str):
            raise InvalidRequestError("register: body must be {name, url, ...capacities}")
        fields = {k: body[k] for k in ("name", "url", "latency_capacity", "throughput_capacity",
                                       "speed") if k in body}
        secret = body.get("secret")  # the engine's own secret, for the manager's requests
        if secret is not None and (not isinstance(secret, str) or not secret):
            raise InvalidRequestError("register: 'secret' must be a non-empty string")
        await self._register_engine(EngineSpec(kind="remote", **fields,
                                               params={"secret": secret} if secret else {}))
        return {"registered": fields["name"]}

    async def session_stats(self, match: re.Match, body: Body, token: str | None) -> Reply:
        """A session's own counters (only its bearer token shows them)."""
        session = self.manager.authenticate(match["sid"], token)
        states: dict[str, int] = {}
        for call in session.calls.values():
            states[call.state.value] = states.get(call.state.value, 0) + 1
        return {"session_id": session.session_id, "tenant": session.tenant,
                "calls": states, "variables": len(session.variables),
                "waiting_gets": session.num_waiters}

    async def stats(self, match: re.Match, body: Body, token: str | None) -> Reply:
        self.access.require_admin(token, "service-wide stats")
        rounds = list(self.manager.scheduler.round_stats)
        return {"sessions": len(self.manager.sessions),
                # Python objects alive after a full collection (a diagnostic for the admin:
                # RSS alone hides whether memory is garbage, kept by the allocator, or live).
                "allocated_blocks": _live_blocks(),
                "ready_calls": self.manager.scheduler.num_ready,
                "scheduling_rounds": len(rounds),
                "calls_placed": sum(n for _, n in rounds),
                "engines": [e.describe() for e in self.manager.engines]}


def _live_blocks() -> int:
    gc.collect()
    return sys.getallocatedblocks()
