"""The wire API of the manager (docs/HTTP_API.md) as one route table.

A route takes the request body as parsed JSON, authenticates the session it names, parses it
once into its request type of `parrot.wire_types` (the frontend builds the same types) and
answers with a typed reply. Both the aiohttp server (`http_api.py`) and the frontend's
in-process transport dispatch through `WireAPI.handle` and serialise the reply at their edge
(`to_wire()`), so they parse, authenticate and answer exactly alike.

The front door's rules live here too (docs/SECURITY.md): who may open sessions and register
engines (`AccessControl`), how much unfinished work a session and the service take (`Admission`,
429 + Retry-After), `max_tokens` against the engines' context windows, and draining on shutdown
(503 for new work).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import re
import sys
from collections.abc import Awaitable, Callable, Iterator

from parrot.manager.admission import CALLS_PER_SLICE, Admission, Slices
from parrot.chat import load_renderer, renderer_loaded
from parrot.server.chat_submit import mark_streamed, render_chat
from parrot.serve_config import EngineSpec
from parrot.manager.manager import Manager
from parrot.manager.nodes import Call
from parrot.manager.requests import opens_session, resolve_refs, session_id_of
from parrot.manager.sessions import Session
from parrot.server.off_loop import beside_loop
from parrot.server.tenants import AccessControl, TenantGrant
from parrot.errors import (MethodNotAllowedError, NotFoundError, ParrotError,
                           ShuttingDownError, TooManyRequestsError, UnauthorizedError)
from parrot.regex_guard import regex_quota
from parrot.types import Criterion
from parrot.wire_types import (BatchReply, CreateVariableRequest, EngineDescription, EngineList,
                               ErrorReply, GetRequest, Graph, Health, PlaceholderBinding,
                               Registered, RegisterEngineRequest, RejectedCall, SessionCreated,
                               SessionDeleted, SessionStats, SetVariableRequest, Stats,
                               SubmitBatchRequest, SubmitReply, SubmitRequest, Value, VariableId,
                               WireMessage)

# A request body as the JSON parser left it (http_api.read_json, or the in-process transport):
# each route parses it once into its request type, after authenticating the session it names.
RawBody = object
RegisterEngine = Callable[[EngineSpec], Awaitable[None]]
Route = Callable[["re.Match[str]", RawBody, "str | None"], Awaitable[WireMessage]]
Gate = Callable[["str | None"], None]


def _anyone(token: str | None) -> None:
    """Open routes (their answers say what the caller may see)."""


class WireAPI:
    def __init__(self, manager: Manager, register_engine: RegisterEngine | None = None,
                 access: AccessControl | None = None) -> None:
        self.manager = manager
        self._register_engine = register_engine
        config = manager.config
        self.access = access or AccessControl(admin_token=config.admin_token)
        self.admission = Admission(config.max_active_calls, config.max_active_calls_per_session,
                                   config.retry_after_s, self.access.call_quotas())
        self.is_draining = False  # set on shutdown: no new sessions or calls
        # Each route with its gate: what the request's headers alone must show before its
        # body is read or parsed (docs/SECURITY.md, "Authenticate before reading").
        self._routes: list[tuple[str, re.Pattern[str], Route, Gate]] = [
            ("GET", re.compile(r"/healthz"), self.healthz, _anyone),
            ("POST", re.compile(r"/v1/sessions"), self.create_session, self._gate_open),
            ("DELETE", re.compile(r"/v1/sessions/(?P<sid>[^/]+)"), self.delete_session,
             self._gate_session),
            ("GET", re.compile(r"/v1/sessions/(?P<sid>[^/]+)/graph"), self.graph,
             self._gate_session),
            ("GET", re.compile(r"/v1/sessions/(?P<sid>[^/]+)/stats"), self.session_stats,
             self._gate_session),
            ("POST", re.compile(r"/v1/submit"), self.submit, self._gate_session),
            ("POST", re.compile(r"/v1/submit_batch"), self.submit_batch, self._gate_batch),
            ("POST", re.compile(r"/v1/variables"), self.create_variable, self._gate_session),
            ("POST", re.compile(r"/v1/variables/(?P<vid>[^/]+)"), self.set_variable,
             self._gate_session),
            ("POST", re.compile(r"/v1/get"), self.get, self._gate_session),
            ("GET", re.compile(r"/v1/engines"), self.list_engines, _anyone),
            ("POST", re.compile(r"/v1/engines"), self.register_engine, self._gate_admin),
            ("GET", re.compile(r"/v1/stats"), self.stats, self._gate_admin),
        ]
        # The routes a parameterless path matches (/v1/submit, /v1/get: nearly every
        # request), found once here instead of by matching every pattern per request.
        self._routes_of_path: dict[str, list[tuple[str, re.Match[str], Route, Gate]]] = {
            literal: list(self._matching(literal)) for _, pattern, _, _ in self._routes
            if re.escape(literal := pattern.pattern) == literal}

    @property
    def route_table(self) -> list[tuple[str, str]]:
        """(method, path regex) of every route: for /openapi.json and the metrics' labels."""
        return [(method, pattern.pattern) for method, pattern, _, _ in self._routes]

    async def handle(self, method: str, path: str, body: RawBody,
                     token: str | None) -> WireMessage:
        """The typed reply of a route (the transport serialises it), or a ParrotError."""
        return await self.admit(method, path, token)(body)

    def admit(self, method: str, path: str,
              token: str | None) -> Callable[[RawBody], Awaitable[WireMessage]]:
        """The route of `method path`, once the request's headers pass its gate (401, 404,
        405 and 503 are decided here, before the body is read); call it with the body."""
        allowed = []
        matching = self._routes_of_path.get(path)
        for route_method, match, route, gate in (
                self._matching(path) if matching is None else matching):
            if route_method == method:
                gate(token)

                async def run(body: RawBody, route: Route = route,
                              match: re.Match[str] = match) -> WireMessage:
                    with regex_quota():  # the request's regex patterns, bounded together
                        return await route(match, body, token)
                return run
            allowed.append(route_method)
        if allowed:
            raise MethodNotAllowedError(f"{method} is not allowed on {path}; use {allowed}")
        raise NotFoundError(f"no such endpoint: {method} {path}")

    @property
    def plain_paths(self) -> list[str]:
        """The route table's paths without parameters (/v1/submit, /v1/get, ...)."""
        return list(self._routes_of_path)

    def _matching(self, path: str) -> Iterator[tuple[str, re.Match[str], Route, Gate]]:
        """The routes whose pattern `path` matches, in order, with the match."""
        for route_method, pattern, route, gate in self._routes:
            match = pattern.fullmatch(path)
            if match is not None:
                yield route_method, match, route, gate

    # --- gates: the headers alone, before the body --------------------------------------------

    def _gate_session(self, token: str | None) -> None:
        """A session's token (which session the body or path names is checked with it)."""
        if self.manager.sessions.by_token(token) is None:
            raise UnauthorizedError("missing or wrong bearer token (a session's token)")

    def _gate_open(self, token: str | None) -> None:
        """Someone who may open a session: a tenant's key where tenants are configured."""
        self.access.grant_session(token)

    def _gate_batch(self, token: str | None) -> None:
        """A batch runs in the session of its token, or opens one with a tenant's key."""
        if self.manager.sessions.by_token(token) is None:
            self._gate_open(token)

    def _gate_admin(self, token: str | None) -> None:
        self.access.require_admin(token, "this route")

    def require_caller(self, token: str | None) -> None:
        """The OpenAI routes' gate: where tenants are configured, a tenant's key or a
        session's token (joining that session); anyone otherwise."""
        if not self.access.is_open and self.manager.sessions.by_token(token) is None:
            self.access.grant_session(token)

    def _session(self, body: RawBody, token: str | None) -> Session:
        return self.manager.authenticate(session_id_of(body), token)

    async def healthz(self, match: re.Match[str], body: RawBody, token: str | None) -> Health:
        healthy = sum(e.is_healthy for e in self.manager.engines)
        total = len(self.manager.engines)
        return Health("ok" if healthy == total else "degraded", total, healthy)

    def admit_new_work(self) -> None:
        """503 while draining: no new session, call, variable or value."""
        if self.is_draining:
            raise ShuttingDownError("the service is shutting down and admits no new work")

    def admit_session(self, token: str | None) -> TenantGrant:
        """The checks before any new session (also the OpenAI routes' private ones): the service
        admits work, `token` is a tenant's API key where tenants are configured, and the
        session limit holds."""
        self.admit_new_work()
        grant = self.access.grant_session(token)
        if len(self.manager.sessions) >= self.manager.config.max_sessions:
            raise TooManyRequestsError(f"the service has {len(self.manager.sessions)} sessions "
                                       "(the limit); delete idle ones or retry later",
                                       self.admission.retry_after_s)
        held = self.manager.sessions.num_of_tenant(grant.tenant)
        if grant.max_sessions is not None and held >= grant.max_sessions:
            raise TooManyRequestsError(f"tenant {grant.tenant!r} has {held} sessions (its "
                                       "max_sessions); delete idle ones or retry later",
                                       self.admission.retry_after_s)
        return grant

    async def create_session(self, match: re.Match[str], body: RawBody,
                             token: str | None) -> SessionCreated:
        grant = self.admit_session(token)  # the body is not read: a session has no options
        session = self._open_session(grant)
        return SessionCreated(session.session_id, session.token)

    def _open_session(self, grant: TenantGrant) -> Session:
        session = self.manager.create_session()
        # Before any submit, so every prefix hash of the session carries its tenant's salt.
        self.manager.sessions.assign(session, grant.tenant, grant.prefix_salt)
        return session

    async def delete_session(self, match: re.Match[str], body: RawBody,
                             token: str | None) -> SessionDeleted:
        session = self.manager.authenticate(match["sid"], token)
        self.manager.delete_session(session)
        return SessionDeleted(session.session_id)

    async def graph(self, match: re.Match[str], body: RawBody, token: str | None) -> Graph:
        return self.manager.graph(self.manager.authenticate(match["sid"], token))

    async def submit(self, match: re.Match[str], body: RawBody,
                     token: str | None) -> SubmitReply:
        """Submit one call. With `"wait": true` the reply comes when the call's outputs exist
        and carries them (`values`): a plain blocking completion, as request-level clients
        (the baseline) use it."""
        session = self._session(body, token)
        self.admit_new_work()
        self.admission.check(session, 1)
        request = SubmitRequest.from_wire(body)
        if request.chat is not None and not renderer_loaded():   # the first chat submit:
            await asyncio.to_thread(load_renderer)               # its import beside the loop
        call = self._submit(session, request)
        reply = self._submit_reply(call)
        if not request.wait:
            return reply
        values = {name: await self.manager.get(session, b.var_id, Criterion.LATENCY)
                  for name, b in call.outputs.items()}
        return SubmitReply(reply.request_id, reply.placeholders, values)

    def _submit(self, session: Session, request: SubmitRequest) -> Call:
        # max_tokens against the engines' windows and the configured cap: Manager.submit.
        call = self.manager.submit(session, render_chat(self.manager, request))
        mark_streamed(session, call, request.stream)
        self.admission.admitted(session, call)
        return call

    @staticmethod
    def _submit_reply(call: Call) -> SubmitReply:
        inputs = [PlaceholderBinding(b.name, b.var_id) for b in call.inputs.values()]
        outputs = [PlaceholderBinding(b.name, b.var_id) for b in call.outputs.values()]
        return SubmitReply(call.call_id, (*inputs, *outputs))

    async def submit_batch(self, match: re.Match[str], body: RawBody,
                           token: str | None) -> BatchReply:
        """Several submits in one message, in order; a call may bind an output of an earlier
        call of the batch with `{"ref": {"call": j, "output": name}}`. Each call is accepted or
        rejected on its own: `results[i]` is a submit reply or an `{"error": ...}` object.

        A batch without `session_id` opens its session first, as `POST /v1/sessions` would
        (the tenant's key, the session limit), once the body parses and the service admits
        its calls; the reply carries the session and its token."""
        opened: SessionCreated | None = None
        calls = body.get("calls") if isinstance(body, dict) else None
        big = isinstance(calls, list) and len(calls) > CALLS_PER_SLICE  # decoded beside the loop
        if opens_session(body):
            grant = self.admit_session(token)  # who asks, before what they ask is read
            batch = await beside_loop(big, lambda: SubmitBatchRequest.from_wire(body))
            grant = self.admit_session(token)  # again: others may have opened sessions since
            self.admission.check(None, len(batch.calls), grant.tenant)
            session = self._open_session(grant)
            opened = SessionCreated(session.session_id, session.token)
        else:
            session = self._session(body, token)
            batch = await beside_loop(big, lambda: SubmitBatchRequest.from_wire(body))
            self.admit_new_work()
            self.admission.check(session, len(batch.calls))
        results: list[SubmitReply | ErrorReply] = []
        slices = Slices()
        for index, call in enumerate(batch.calls):
            await slices.next()  # a slice at a time (admission.Slices)
            try:
                if self.manager.sessions.find(session.session_id) is not session:
                    raise NotFoundError(f"session {session.session_id} was deleted")
                self.admit_new_work()
                if isinstance(call, RejectedCall):
                    raise call.error
                request = resolve_refs(call, index, results, session.session_id)
                results.append(self._submit_reply(self._submit(session, request)))
            except ParrotError as exc:
                results.append(ErrorReply.of(exc))
        waited = await self._waited_values(session, batch, results)
        for index, values in waited.items():
            reply = results[index]
            assert isinstance(reply, SubmitReply)  # only accepted calls are waited for
            results[index] = dataclasses.replace(reply, values=values)
        return BatchReply(tuple(results), opened)

    async def _waited_values(self, session: Session, batch: SubmitBatchRequest,
                             results: list[SubmitReply | ErrorReply]
                             ) -> dict[int, dict[str, str]]:
        """The values of the outputs the batch's calls `wait` for, by call index, once they
        exist (each awaited as a get under its placeholder's criteria). An output whose call
        failed, or a session at its limit of waiting gets, is left out: the client then gets
        it (and its error) as it would have without `wait`."""
        wanted: list[tuple[int, str, str, Criterion]] = []
        for index, (call, result) in enumerate(zip(batch.calls, results)):
            if isinstance(call, RejectedCall) or isinstance(result, ErrorReply):
                continue
            ids = result.var_ids()
            criteria = {p.name: p.criteria for p in call.placeholders if p.is_output}
            wanted.extend((index, name, ids[name], criteria.get(name) or Criterion.LATENCY)
                          for name in call.wait)
        room = self.manager.config.max_waiting_gets_per_session - session.num_waiters
        if not wanted or len(wanted) > room:
            return {}
        values = await asyncio.gather(*(self.manager.get(session, var_id, criterion)
                                        for _, _, var_id, criterion in wanted),
                                      return_exceptions=True)
        waited: dict[int, dict[str, str]] = {}
        for (index, name, _, _), value in zip(wanted, values):
            if isinstance(value, str):
                waited.setdefault(index, {})[name] = value
            elif not isinstance(value, ParrotError):
                raise value
        return waited

    async def create_variable(self, match: re.Match[str], body: RawBody,
                              token: str | None) -> VariableId:
        session = self._session(body, token)
        self.admit_new_work()  # draining: no new variables, no new values
        request = CreateVariableRequest.from_wire(body)
        var = self.manager.create_variable(session, request.name, request.value)
        return VariableId(var.var_id)

    async def set_variable(self, match: re.Match[str], body: RawBody,
                           token: str | None) -> VariableId:
        session = self._session(body, token)
        self.admit_new_work()
        request = SetVariableRequest.from_wire(body)
        self.manager.set_variable(session, match["vid"], request.value)
        return VariableId(match["vid"])

    async def get(self, match: re.Match[str], body: RawBody, token: str | None) -> Value:
        session = self._session(body, token)
        request = GetRequest.from_wire(body)
        if session.num_waiters >= self.manager.config.max_waiting_gets_per_session:
            raise TooManyRequestsError(f"this session already has {session.num_waiters} `get`s "
                                       "waiting (the limit)", self.admission.retry_after_s)
        return Value(await self.manager.get(session, request.semantic_var_id, request.criteria,
                                            request.timeout))

    async def list_engines(self, match: re.Match[str], body: RawBody,
                           token: str | None) -> EngineList:
        full = self._describe_engines()
        if self.access.is_admin(token):
            return EngineList(full)
        return EngineList(tuple(e.public() for e in full))

    def _describe_engines(self) -> tuple[EngineDescription, ...]:
        return tuple(EngineDescription.from_wire(e.describe(), "engine", strict=False)
                     for e in self.manager.engines)

    async def register_engine(self, match: re.Match[str], body: RawBody,
                              token: str | None) -> Registered:
        self.access.require_admin(token, "registering an engine")
        if self._register_engine is None:
            raise NotFoundError("this manager does not accept engines by URL")
        request = RegisterEngineRequest.from_wire(body)
        secret = {"secret": request.secret} if request.secret else {}
        await self._register_engine(EngineSpec(kind="remote", **request.spec_fields(),
                                               params=secret))
        return Registered(request.name)

    async def session_stats(self, match: re.Match[str], body: RawBody,
                            token: str | None) -> SessionStats:
        """A session's own counters (only its bearer token shows them)."""
        session = self.manager.authenticate(match["sid"], token)
        states: dict[str, int] = {}
        for call in session.calls.values():
            states[call.state.value] = states.get(call.state.value, 0) + 1
        return SessionStats(session.session_id, session.tenant, states, len(session.variables),
                            session.num_waiters)

    async def stats(self, match: re.Match[str], body: RawBody, token: str | None) -> Stats:
        self.access.require_admin(token, "service-wide stats")
        rounds = list(self.manager.scheduler.round_stats)
        return Stats(sessions=len(self.manager.sessions),
                     # Python objects alive after a full collection (a diagnostic for the
                     # admin: RSS alone hides whether memory is garbage, kept by the
                     # allocator, or live).
                     allocated_blocks=_live_blocks(),
                     ready_calls=self.manager.scheduler.num_ready,
                     scheduling_rounds=len(rounds),
                     calls_placed=sum(n for _, n in rounds),
                     engines=self._describe_engines())


def _live_blocks() -> int:
    gc.collect()
    return sys.getallocatedblocks()
