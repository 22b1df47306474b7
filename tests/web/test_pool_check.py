"""The pool checks a connection before handing it out only when it sat idle longer than
CHECK_AFTER_IDLE_SECONDS (quotaweb/postgresql/base.py): no round trip per request on a
busy server, and a backend terminated while idle is still replaced unseen."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest
from django.db import connection
from psycopg_pool import ConnectionPool

from quotaweb.postgresql import base as backend

pytestmark = pytest.mark.django_db(transaction=True)



class _Conn:
    pass


def test_only_a_connection_idle_long_enough_or_never_returned_is_checked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[Any] = []
    monkeypatch.setattr(ConnectionPool, "check_connection", staticmethod(checked.append))
    fresh, recent, idle = _Conn(), _Conn(), _Conn()
    setattr(recent, backend.RETURNED_AT, time.monotonic())
    setattr(idle, backend.RETURNED_AT, time.monotonic() - backend.CHECK_AFTER_IDLE_SECONDS - 1)
    for conn in (fresh, recent, idle):
        backend.check_if_idle(conn)
    assert checked == [fresh, idle]


def test_the_pool_uses_the_idle_check() -> None:
    connection.ensure_connection()
    assert connection.pool is not None
    assert connection.pool._check is backend.check_if_idle


def _conninfo() -> str:
    settings = connection.settings_dict
    return psycopg.conninfo.make_conninfo(
        host=settings["HOST"] or None, port=settings["PORT"] or None,
        user=settings["USER"] or None, password=settings["PASSWORD"] or None,
        dbname=settings["NAME"])


def _terminate(pid: int) -> None:
    with psycopg.connect(_conninfo(), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        # Until the backend has gone: a check made before would still find it alive.
        for _ in range(100):
            if not admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s",
                                 (pid,)).fetchone():
                return
            time.sleep(0.05)
    raise AssertionError(f"backend {pid} did not exit")


def _pid(conn: Any) -> int:
    return int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])


def _returned(pool: ConnectionPool, conn: Any, idle_seconds: float) -> None:
    """Give `conn` back as the backend does (DatabaseWrapper._close stamps it), as if
    `idle_seconds` ago."""
    setattr(conn, backend.RETURNED_AT, time.monotonic() - idle_seconds)
    pool.putconn(conn)


# Each test has a pool of its own, with the backend's check: the shared pool of the test
# process may hold connections other tests' threads took, so what it hands out next is not
# this test's to predict.
def _pool() -> ConnectionPool:
    pool = ConnectionPool(_conninfo(), min_size=1, max_size=2, check=backend.check_if_idle,
                          timeout=30, open=True)
    pool.wait(timeout=30)
    return pool


def test_a_backend_terminated_while_idle_is_replaced() -> None:
    with _pool() as pool:
        conn = pool.getconn()
        first = _pid(conn)
        conn.rollback()
        _returned(pool, conn, idle_seconds=backend.CHECK_AFTER_IDLE_SECONDS + 1)
        _terminate(first)
        # Idle longer than the threshold: checked, found dead, replaced unseen.
        again = pool.getconn()
        assert _pid(again) != first
        pool.putconn(again)


def test_a_backend_terminated_just_after_use_fails_one_request_then_is_replaced() -> None:
    """The price of skipping the round trip, and its bound: the request that gets the
    dead connection fails, and the pool discards it when it comes back."""
    with _pool() as pool:
        conn = pool.getconn()
        first = _pid(conn)
        conn.rollback()
        _returned(pool, conn, idle_seconds=0.0)
        _terminate(first)
        dead = pool.getconn()  # returned a moment ago: handed out unchecked
        with pytest.raises(psycopg.OperationalError):
            _pid(dead)
        pool.putconn(dead)  # broken: discarded
        fresh = pool.getconn()
        assert _pid(fresh) != first
        pool.putconn(fresh)
