"""Sessions: bearer tokens, per-session variable visibility, failing what is unfinished, and
idle expiry."""

from __future__ import annotations

import asyncio

import pytest

from parrot.manager.nodes import Variable
from parrot.manager.sessions import IdleExpiry, Session, SessionStore
from parrot.errors import NotFoundError, ShuttingDownError, UnauthorizedError

TTL = 0.2


async def test_each_session_gets_its_own_id_and_token():
    store = SessionStore()
    a, b = store.create(), store.create()
    assert a.session_id != b.session_id and a.token != b.token
    assert len(a.token) >= 32  # 24 random bytes, URL-safe
    assert list(store) == [a, b] and len(store) == 2
    assert store.find(a.session_id) is a and store.find("s-nope") is None


@pytest.mark.parametrize("token", [None, "", "wrong", "\u00e9t\u00e9"])
async def test_authenticate_rejects_a_missing_wrong_or_non_ascii_token(token):
    store = SessionStore()
    session = store.create()
    with pytest.raises(UnauthorizedError):
        store.authenticate(session.session_id, token)
    # Another session's token naming this one: exactly what an unknown id gets.
    with pytest.raises(NotFoundError) as other:
        store.authenticate(session.session_id, store.create().token)
    with pytest.raises(NotFoundError) as unknown:
        store.authenticate("s-0123456789abcdef", store.create().token)
    assert str(other.value).replace(session.session_id, "ID") == \
        str(unknown.value).replace("s-0123456789abcdef", "ID")


async def test_authenticate_returns_the_session_and_marks_it_active():
    store = SessionStore()
    session = store.create()
    created_at = session.last_active
    await asyncio.sleep(0.01)
    assert store.authenticate(session.session_id, session.token) is session
    assert session.last_active > created_at
    with pytest.raises(NotFoundError, match="unknown session"):
        store.authenticate("s-0000", session.token)


async def test_a_session_sees_only_its_own_variables():
    store = SessionStore()
    mine, other = store.create(), store.create()
    var = Variable("v-1", other.session_id, "x")
    other.variables[var.var_id] = var
    assert other.variable("v-1") is var
    with pytest.raises(NotFoundError, match="unknown semantic variable 'v-1'"):
        mine.variable("v-1")


async def test_fail_unfinished_fails_only_variables_without_a_value():
    store = SessionStore()
    session = store.create()
    done, waiting = Variable("v-d", session.session_id, "d"), Variable("v-w", session.session_id,
                                                                        "w")
    done.set_value("42")
    session.variables.update({done.var_id: done, waiting.var_id: waiting})
    error = ShuttingDownError("stopping")
    assert store.fail_unfinished(error) == 1
    assert (done.value, done.error) == ("42", None)
    assert waiting.error is error and waiting.is_finished
    assert store.fail_unfinished(error) == 0  # already failed: not counted twice


async def expiring(store: SessionStore) -> tuple[IdleExpiry, list[Session]]:
    deleted: list[Session] = []

    def delete(session: Session) -> None:
        store.pop(session.session_id)
        deleted.append(session)

    return IdleExpiry(store, TTL, delete), deleted


async def test_an_idle_session_is_deleted_after_the_ttl():
    store = SessionStore()
    expiry, deleted = await expiring(store)
    session = store.create()
    expiry.arm(session)
    await asyncio.sleep(TTL / 2)
    assert deleted == []
    await asyncio.sleep(TTL)
    assert deleted == [session] and store.find(session.session_id) is None


async def test_activity_pushes_expiry_back_by_the_ttl():
    store = SessionStore()
    expiry, deleted = await expiring(store)
    session = store.create()
    expiry.arm(session)
    await asyncio.sleep(TTL * 0.8)
    store.authenticate(session.session_id, session.token)  # a request: active again
    await asyncio.sleep(TTL * 0.6)                          # past the first deadline
    assert deleted == []
    await asyncio.sleep(TTL)
    assert deleted == [session]


async def test_a_session_with_a_waiting_get_or_a_running_call_is_kept():
    store = SessionStore()
    expiry, deleted = await expiring(store)
    waiting, running = store.create(), store.create()
    waiting.num_waiters = 1
    task = asyncio.create_task(asyncio.sleep(10))
    running.tasks["r-1"] = task
    expiry.arm(waiting)
    expiry.arm(running)
    try:
        await asyncio.sleep(TTL * 3)
        assert deleted == []
        waiting.num_waiters = 0
        await asyncio.sleep(TTL * 2)
        assert deleted == [waiting]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_the_timer_of_a_deleted_session_does_nothing():
    store = SessionStore()
    expiry, deleted = await expiring(store)
    session = store.create()
    expiry.arm(session)
    store.pop(session.session_id)  # deleted by the client before it expired
    await asyncio.sleep(TTL * 2)
    assert deleted == []
