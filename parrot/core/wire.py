"""The wire API of the manager (DESIGN.md) as one route table over JSON bodies.

Both the aiohttp server (`http_api.py`) and the frontend's in-process transport dispatch through
`WireAPI.handle`, so they parse, authenticate and answer exactly alike.
"""

from __future__ import annotations

import re
from typing import Any, Awaitable, Callable

from parrot.core.chat_submit import mark_streamed, pop_streamed, render_chat_submit
from parrot.core.config import EngineSpec
from parrot.core.manager import Manager
from parrot.core.nodes import Call
from parrot.core.requests import (GetRequest, SubmitRequest, batch_items, optional_value,
                                  resolve_batch_refs, session_id_of)
from parrot.core.sessions import Session
from parrot.errors import InvalidRequestError, NotFoundError, ParrotError, UnauthorizedError
from parrot.types import Criterion

Body = Any
Reply = dict[str, Any]
RegisterEngine = Callable[[EngineSpec], Awaitable[None]]
Route = Callable[[re.Match, Body, "str | None"], Awaitable[Reply]]


class WireAPI:
    def __init__(self, manager: Manager, register_engine: RegisterEngine | None = None) -> None:
        self.manager = manager
        self._register_engine = register_engine
        self._routes: list[tuple[str, re.Pattern, Route]] = [
            ("GET", re.compile(r"/healthz"), self.healthz),
            ("POST", re.compile(r"/v1/sessions"), self.create_session),
            ("DELETE", re.compile(r"/v1/sessions/(?P<sid>[^/]+)"), self.delete_session),
            ("GET", re.compile(r"/v1/sessions/(?P<sid>[^/]+)/graph"), self.graph),
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
            raise InvalidRequestError(f"{method} is not allowed on {path}; use {allowed}")
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

    async def create_session(self, match: re.Match, body: Body, token: str | None) -> Reply:
        session = self.manager.create_session()
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
        body, streamed = pop_streamed(body)
        call = self.manager.submit(session, SubmitRequest.from_json(
            render_chat_submit(self.manager, body)))
        mark_streamed(session, call, streamed)
        reply = self._submit_reply(call)
        if wait:
            reply["values"] = {name: await self.manager.get(session, b.var_id,
                                                            Criterion.LATENCY)
                               for name, b in call.outputs.items()}
        return reply

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
        results: list[Reply] = []
        for index, item in enumerate(batch_items(body)):
            try:
                resolved = resolve_batch_refs(item, index, results)
                resolved["session_id"] = session.session_id
                resolved, streamed = pop_streamed(resolved)
                call = self.manager.submit(session, SubmitRequest.from_json(
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
        return {"value": await self.manager.get(session, req.semantic_var_id, req.criteria,
                                                req.timeout)}

    async def list_engines(self, match: re.Match, body: Body, token: str | None) -> Reply:
        return {"engines": [e.describe() for e in self.manager.engines]}

    async def register_engine(self, match: re.Match, body: Body, token: str | None) -> Reply:
        admin = self.manager.config.admin_token
        if admin is not None and token != admin:
            raise UnauthorizedError("registering an engine needs the admin token")
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

    async def stats(self, match: re.Match, body: Body, token: str | None) -> Reply:
        rounds = list(self.manager.scheduler.round_stats)
        return {"sessions": len(self.manager.sessions),
                "ready_calls": self.manager.scheduler.num_ready,
                "scheduling_rounds": len(rounds),
                "calls_placed": sum(n for _, n in rounds),
                "engines": [e.describe() for e in self.manager.engines]}
