"""Sessions: a bearer token each, and the variables, calls and DAG only that session may see."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from parrot.manager.dag import SessionGraph
from parrot.manager.nodes import Call, PromptChars, Variable
from parrot.errors import NotFoundError, ParrotError, UnauthorizedError

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Session:
    session_id: str
    token: str
    graph: SessionGraph = field(default_factory=SessionGraph)
    variables: dict[str, Variable] = field(default_factory=dict)
    calls: dict[str, Call] = field(default_factory=dict)
    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)  # running call tasks
    needs_deduction: bool = False
    last_active: float = 0.0      # loop time of the last authenticated request
    num_waiters: int = 0          # `get`s waiting on this session's variables
    tenant: str = "default"       # who opened it (parrot/server/tenants.py)
    prefix_salt: str = ""         # mixed into its prefix hashes: "" shares across tenants
    expiry_timer: asyncio.TimerHandle | None = None  # the idle check; cancelled on delete
    prompt_chars: PromptChars = field(default_factory=PromptChars)  # of unfinished calls

    def variable(self, var_id: str) -> Variable:
        """A variable of this session; other sessions' ids are indistinguishable from unknown."""
        var = self.variables.get(var_id)
        if var is None:
            raise NotFoundError(f"unknown semantic variable {var_id!r} in this session")
        return var


def _token_key(token: str) -> bytes:
    """What the store indexes a token by: its digest, so a lookup's timing depends on the
    digest of what the client sent, never on how much of a real token it guessed."""
    return hashlib.sha256(token.encode()).digest()


class SessionStore:
    """Sessions by id, and by the digest of their bearer token.

    The rule every session route follows (docs/SECURITY.md): a request whose bearer is no
    session's token is a 401, decided from the headers alone before any body is read
    (`by_token`); a session's token naming another session — whichever tenant it belongs to,
    or none — is a 404 with exactly the message of an unknown id, so ids cannot be probed.
    """

    def __init__(self) -> None:
        self._sessions: dict[str, Session] = {}
        self._by_token: dict[bytes, Session] = {}
        self._per_tenant: dict[str, int] = {}   # live sessions of each tenant

    def create(self) -> Session:
        session = Session(session_id=f"s-{secrets.token_hex(8)}", token=secrets.token_urlsafe(24),
                          last_active=asyncio.get_running_loop().time())
        self._sessions[session.session_id] = session
        self._by_token[_token_key(session.token)] = session
        self._count(session.tenant, +1)
        return session

    def by_token(self, token: str | None) -> Session | None:
        """The session whose bearer token this is, or None."""
        if token is None or not token.isascii():
            return None
        session = self._by_token.get(_token_key(token))
        if session is None or not hmac.compare_digest(token.encode(), session.token.encode()):
            return None
        return session

    def authenticate(self, session_id: str, token: str | None) -> Session:
        session = self.by_token(token)
        if session is None:
            raise UnauthorizedError("missing or wrong bearer token (a session's token)")
        if session.session_id != session_id:
            raise NotFoundError(f"unknown session {session_id!r}")  # as for an unknown id
        session.last_active = asyncio.get_running_loop().time()
        return session

    def find(self, session_id: str) -> Session | None:
        return self._sessions.get(session_id)

    def get(self, session_id: str) -> Session:
        """Internal lookup (no token): for the manager's own bookkeeping only."""
        return self._sessions[session_id]

    def pop(self, session_id: str) -> Session:
        session = self._sessions.pop(session_id)
        self._by_token.pop(_token_key(session.token), None)
        self._count(session.tenant, -1)
        return session

    def assign(self, session: Session, tenant: str, prefix_salt: str) -> None:
        """Make `session` its tenant's (before any submit: its prefix hashes take the salt)."""
        self._count(session.tenant, -1)
        session.tenant, session.prefix_salt = tenant, prefix_salt
        self._count(tenant, +1)

    def num_of_tenant(self, tenant: str) -> int:
        return self._per_tenant.get(tenant, 0)

    def _count(self, tenant: str, delta: int) -> None:
        left = self._per_tenant.get(tenant, 0) + delta
        if left > 0:
            self._per_tenant[tenant] = left
        else:
            self._per_tenant.pop(tenant, None)

    def fail_unfinished(self, error: ParrotError) -> int:
        """Fail every variable still without a value (shutdown): its `get`s answer `error`.
        Returns how many were failed."""
        failed = 0
        for session in self:
            for var in session.variables.values():
                if not var.is_finished:
                    var.fail(error)
                    failed += 1
        return failed

    def __iter__(self) -> Iterator[Session]:
        return iter(list(self._sessions.values()))

    def __len__(self) -> int:
        return len(self._sessions)


class IdleExpiry:
    """Deletes a session nobody has used for `ttl_s` seconds: no authenticated request, no
    running call and no waiting `get`.

    One timer per session, re-armed only when it fires (not on every request). The timer holds
    the session's id, not the session, so a deleted session's memory is freed at once.
    """

    def __init__(self, store: SessionStore, ttl_s: float,
                 delete: Callable[[Session], None]) -> None:
        self._store, self._ttl_s, self._delete = store, ttl_s, delete

    def arm(self, session: Session, delay_s: float | None = None) -> None:
        session.expiry_timer = asyncio.get_running_loop().call_later(
            self._ttl_s if delay_s is None else delay_s, self._check, session.session_id)

    def _check(self, session_id: str) -> None:
        session = self._store.find(session_id)
        if session is None:
            return  # deleted already
        idle = asyncio.get_running_loop().time() - session.last_active
        if session.tasks or session.num_waiters or idle < self._ttl_s:
            self.arm(session, max(self._ttl_s - idle, 1e-3) if idle < self._ttl_s else None)
            return
        log.info("session %s idle for %.0f s: deleted", session.session_id, idle)
        self._delete(session)
