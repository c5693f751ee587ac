"""docs/HTTP_API.md's authentication table is the server's: every route it names answers 401
without the credential its row names (with tenants configured) and not with it."""

from __future__ import annotations

import re
from pathlib import Path

from tests.server.front_door import bearer, config, new_session, running

DOC = Path(__file__).resolve().parents[2] / "docs" / "HTTP_API.md"
KEY = "tenant-a-key-0123456789"


def _table() -> list[tuple[str, str, str]]:
    """(who, method, path) for every route of the table."""
    text = DOC.read_text()
    section = text[text.index("## Authentication"):text.index("## Errors")]
    rows = []
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        routes, who = line.strip("|").split("|")[:2]
        kind = ("admin" if "admin token" in who else "session" if who.strip().startswith(
            "a session's token") else "tenant" if "tenant's API key" in who else "anyone")
        for method, path in re.findall(r"`(GET|POST|DELETE) (/[^` ]*)`", routes):
            rows.append((kind, method, path))
    return rows


def test_the_table_names_every_kind_and_route():
    kinds = {kind for kind, _, _ in _table()}
    assert kinds == {"anyone", "tenant", "session", "admin"}
    assert len(_table()) >= 20


async def test_every_route_of_the_table_is_gated_as_it_says():
    async with running(config({"admin_token": "admin-token-0123456789"},
                              tenants=[{"name": "a", "api_key": KEY}])) as (server, http):
        sid, session_auth = await new_session(http, KEY)
        credential = {"admin": bearer("admin-token-0123456789"), "tenant": bearer(KEY),
                      "session": session_auth, "anyone": None}
        for kind, method, template in sorted(_table(), key=lambda r: r[1] == "DELETE"):
            path = template.replace("{sid}", sid).replace("{vid}", "v-0").replace(
                "{model}", "simulated")
            for headers in (None, bearer("no-such-token-0123456789")):
                async with http.request(method, path, headers=headers,
                                        data=b"{}" if method == "POST" else None) as resp:
                    expected_401 = kind != "anyone"
                    assert (resp.status == 401) == expected_401, (kind, method, path,
                                                                 resp.status)
            body = (b'{"session_id": "%s"}' % sid.encode()) if kind == "session" else b"{}"
            async with http.request(method, path, headers=credential[kind],
                                    data=body if method == "POST" else None) as resp:
                assert resp.status != 401, (kind, method, path)
