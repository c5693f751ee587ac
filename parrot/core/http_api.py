"""The manager's HTTP API (DESIGN.md "Wire API"), on aiohttp.

Every error is JSON `{"error": {"type", "message"}}`; client mistakes get a 4xx status and never
affect other sessions. Handlers only parse, authenticate and delegate to the Manager.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Awaitable, Callable

from aiohttp import web

from parrot.core.config import EngineSpec
from parrot.core.manager import Manager
from parrot.core.requests import GetRequest, SubmitRequest, optional_value, session_id_of
from parrot.core.sessions import Session
from parrot.errors import (InvalidRequestError, NotFoundError, ParrotError, PayloadTooLargeError,
                           UnauthorizedError)

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
RegisterEngine = Callable[[EngineSpec], Awaitable[None]]


def error_response(error: ParrotError) -> web.Response:
    return web.json_response(error.to_wire(), status=error.status)


@web.middleware
async def errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ParrotError as exc:
        return error_response(exc)
    except web.HTTPRequestEntityTooLarge as exc:
        return error_response(PayloadTooLargeError(exc.text or "request body too large"))
    except web.HTTPException as exc:
        if exc.status >= 400:
            return web.json_response({"error": {"type": exc.reason.replace(" ", ""),
                                                "message": exc.text or exc.reason}},
                                     status=exc.status)
        raise
    except Exception:  # noqa: BLE001 - a bug answers 500 and the server keeps serving
        log.exception("unhandled error in %s %s", request.method, request.path)
        return web.json_response({"error": {"type": "InternalError",
                                            "message": "internal server error"}}, status=500)


async def read_json(request: web.Request) -> Any:
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise PayloadTooLargeError(
            f"request body over {request.app['parrot.max_body']} bytes") from None
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidRequestError(f"request body is not valid JSON: {exc}") from None


def bearer_token(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


class ManagerAPI:
    def __init__(self, manager: Manager, register_engine: RegisterEngine | None = None) -> None:
        self.manager = manager
        self._register_engine = register_engine

    def app(self) -> web.Application:
        max_body = self.manager.config.max_body_bytes
        app = web.Application(client_max_size=max_body, middlewares=[errors_as_json])
        app["parrot.max_body"] = max_body
        app.router.add_get("/healthz", self.healthz)
        app.router.add_post("/v1/sessions", self.create_session)
        app.router.add_delete("/v1/sessions/{session_id}", self.delete_session)
        app.router.add_get("/v1/sessions/{session_id}/graph", self.graph)
        app.router.add_post("/v1/submit", self.submit)
        app.router.add_post("/v1/variables", self.create_variable)
        app.router.add_post("/v1/variables/{var_id}", self.set_variable)
        app.router.add_post("/v1/get", self.get)
        app.router.add_get("/v1/engines", self.list_engines)
        app.router.add_post("/v1/engines", self.register_engine)
        app.router.add_get("/v1/stats", self.stats)
        return app

    async def _session(self, request: web.Request, body: Any) -> Session:
        if not isinstance(body, dict):
            raise InvalidRequestError("request body must be a JSON object")
        return self.manager.authenticate(session_id_of(body), bearer_token(request))

    async def healthz(self, request: web.Request) -> web.Response:
        healthy = sum(e.is_healthy for e in self.manager.engines)
        status = 200 if healthy == len(self.manager.engines) else 503
        return web.json_response({"status": "ok" if status == 200 else "degraded",
                                  "engines": len(self.manager.engines),
                                  "healthy_engines": healthy}, status=status)

    async def create_session(self, request: web.Request) -> web.Response:
        if request.can_read_body:
            await read_json(request)  # an optional body must still be valid JSON
        session = self.manager.create_session()
        return web.json_response({"session_id": session.session_id, "token": session.token})

    async def delete_session(self, request: web.Request) -> web.Response:
        session = self.manager.authenticate(request.match_info["session_id"],
                                            bearer_token(request))
        self.manager.delete_session(session)
        return web.json_response({"deleted": session.session_id})

    async def graph(self, request: web.Request) -> web.Response:
        session = self.manager.authenticate(request.match_info["session_id"],
                                            bearer_token(request))
        return web.json_response(self.manager.graph(session))

    async def submit(self, request: web.Request) -> web.Response:
        body = await read_json(request)
        session = await self._session(request, body)
        call = self.manager.submit(session, SubmitRequest.from_json(body))
        placeholders = [{"name": b.name, "semantic_var_id": b.var_id}
                        for b in (*call.inputs.values(), *call.outputs.values())]
        return web.json_response({"request_id": call.call_id, "placeholders": placeholders})

    async def create_variable(self, request: web.Request) -> web.Response:
        body = await read_json(request)
        session = await self._session(request, body)
        var = self.manager.create_variable(session, body.get("name", "var"),
                                           optional_value(body))
        return web.json_response({"semantic_var_id": var.var_id})

    async def set_variable(self, request: web.Request) -> web.Response:
        body = await read_json(request)
        session = await self._session(request, body)
        var_id = request.match_info["var_id"]
        self.manager.set_variable(session, var_id, optional_value(body, required=True))
        return web.json_response({"semantic_var_id": var_id})

    async def get(self, request: web.Request) -> web.Response:
        body = await read_json(request)
        session = await self._session(request, body)
        req = GetRequest.from_json(body)
        value = await self.manager.get(session, req.semantic_var_id, req.criteria, req.timeout)
        return web.json_response({"value": value})

    async def list_engines(self, request: web.Request) -> web.Response:
        return web.json_response({"engines": [e.describe() for e in self.manager.engines]})

    async def register_engine(self, request: web.Request) -> web.Response:
        admin = self.manager.config.admin_token
        if admin is not None and bearer_token(request) != admin:
            raise UnauthorizedError("registering an engine needs the admin token")
        if self._register_engine is None:
            raise NotFoundError("this manager does not accept engines by URL")
        body = await read_json(request)
        if not isinstance(body, dict) or not isinstance(body.get("url"), str):
            raise InvalidRequestError("register: body must be {name, url, ...capacities}")
        fields = {k: body[k] for k in ("name", "url", "latency_capacity", "throughput_capacity",
                                       "speed") if k in body}
        try:
            spec = EngineSpec(kind="remote", **fields)
        except TypeError as exc:
            raise InvalidRequestError(f"register: {exc}") from None
        await self._register_engine(spec)
        return web.json_response({"registered": fields.get("name")})

    async def stats(self, request: web.Request) -> web.Response:
        rounds = list(self.manager.scheduler.round_stats)
        return web.json_response({
            "sessions": len(self.manager.sessions),
            "ready_calls": self.manager.scheduler.num_ready,
            "scheduling_rounds": len(rounds),
            "calls_placed": sum(n for _, n in rounds),
            "engines": [e.describe() for e in self.manager.engines]})
