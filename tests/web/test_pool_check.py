"""The pool checks a connection before handing it out only when it sat idle longer than
CHECK_AFTER_IDLE_SECONDS (quotaweb/postgresql/base.py): no round trip per request on a
busy server, and a backend terminated while idle is still replaced unseen."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest
from django.db import OperationalError, connection
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


def _terminate_every_backend_of_the_test_database() -> int:
    settings = connection.settings_dict
    with psycopg.connect(host=settings["HOST"] or None, port=settings["PORT"] or None,
                         user=settings["USER"] or None, password=settings["PASSWORD"] or None,
                         dbname="postgres", autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()", (settings["NAME"],)).fetchall()
    return len(rows)


def _query() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


def test_a_backend_terminated_while_idle_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    first = _query()
    connection.close()  # back to the pool
    assert _terminate_every_backend_of_the_test_database() >= 1
    time.sleep(0.2)  # the backends exit
    # As if it had sat idle longer than the threshold: checked, found dead, replaced.
    monkeypatch.setattr(backend, "CHECK_AFTER_IDLE_SECONDS", 0.0)
    assert _query() != first
    connection.close()


def test_a_backend_terminated_just_after_use_fails_one_request_then_is_replaced(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The price of skipping the round trip, and its bound: the request that gets the
    dead connection fails, and the pool discards it when it comes back."""
    monkeypatch.setattr(backend, "CHECK_AFTER_IDLE_SECONDS", 3600.0)
    _query()
    connection.close()
    assert _terminate_every_backend_of_the_test_database() >= 1
    time.sleep(0.2)
    failures = 0
    for _ in range(connection.pool.max_size + 1):
        try:
            _query()
            break
        except OperationalError:
            failures += 1
        finally:
            connection.close()
    assert 1 <= failures <= connection.pool.max_size
    _query()
    connection.close()
