"""The session that semantic-function calls go to: the innermost one open in this context.

A `Session` activates itself on entry and resets on exit; a `SemanticFunction` call looks it
up here, so the function module never imports the session module (which builds functions'
calls) at run time.
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from parrot.frontend.session import Session

_active: contextvars.ContextVar[Session] = contextvars.ContextVar("parrot_session")


def current_session() -> Session:
    """The innermost open session of this context (a RuntimeError outside any)."""
    try:
        return _active.get()
    except LookupError:
        raise RuntimeError("semantic functions must be called inside a parrot.Session") from None


def activate(session: Session) -> contextvars.Token[Session]:
    return _active.set(session)


def deactivate(token: contextvars.Token[Session]) -> None:
    _active.reset(token)
