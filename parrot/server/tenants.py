"""Who may do what at the front door: tenants (API keys) open sessions, the admin token
registers engines and reads the engines' internal counters.

Without configured tenants anyone may open a session, and all sessions form one tenant. With
tenants, `POST /v1/sessions` needs a tenant's API key and the session belongs to that tenant.
A session's prompt prefixes are hashed with its tenant's salt unless the tenant opted into
sharing (`share_prefixes: true`), so two tenants never fork each other's cached contexts and
cannot learn from cache hits whether the other sent a prompt (see docs/SECURITY.md).
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from parrot.serve_config import TenantSpec
from parrot.errors import UnauthorizedError

OPEN_TENANT = "default"


@dataclass(frozen=True)
class TenantGrant:
    """What a new session gets: its tenant's name and the salt of its prefix hashes."""

    tenant: str
    prefix_salt: str
    max_sessions: int | None = None   # the tenant's own session quota (TenantSpec)


def _same(given: str | None, expected: str) -> bool:
    return given is not None and given.isascii() and hmac.compare_digest(
        given.encode(), expected.encode())


class AccessControl:
    def __init__(self, tenants: tuple[TenantSpec, ...] = (), admin_token: str | None = None
                 ) -> None:
        self._tenants = tenants
        self._admin_token = admin_token

    def call_quotas(self) -> dict[str, int]:
        """Each tenant's `max_active_calls`, where it has one."""
        return {t.name: t.max_active_calls for t in self._tenants
                if t.max_active_calls is not None}

    @property
    def is_open(self) -> bool:
        return not self._tenants

    def is_admin(self, token: str | None) -> bool:
        return self._admin_token is not None and _same(token, self._admin_token)

    def require_admin(self, token: str | None, what: str) -> None:
        if not self.is_admin(token):
            raise UnauthorizedError(f"{what} needs the admin token")

    def grant_session(self, token: str | None) -> TenantGrant:
        """The tenant a new session belongs to, from the API key it was opened with."""
        if self.is_open:
            return TenantGrant(OPEN_TENANT, "")
        # Compare against every key (no early exit): the time taken says nothing about which.
        found = [t for t in self._tenants if _same(token, t.api_key)]
        if not found:
            raise UnauthorizedError("opening a session needs a tenant API key "
                                    "(Authorization: Bearer <key>)")
        tenant = found[0]
        return TenantGrant(tenant.name, "" if tenant.share_prefixes else tenant.name,
                           tenant.max_sessions)
