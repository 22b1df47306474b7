"""Django's PostgreSQL backend, with the pool's health check only for connections that
sat idle in the pool.

With CONN_HEALTH_CHECKS, Django has psycopg_pool check every connection it hands out with
an empty query: a round trip to PostgreSQL before every request's first query.  A
connection that was returned a moment ago is almost surely alive (and a busy server's
connections never rest long), so this backend checks only those idle in the pool for
more than CHECK_AFTER_IDLE_SECONDS (env.POOL_CHECK_IDLE_SECONDS).  One whose backend was
terminated while idle (a failover, a proxy's idle timeout, pg_terminate_backend) is still
replaced before a request sees it; one terminated within the last seconds of use fails
the one request that gets it, and the pool discards it on its return
(tests/reliability/test_faults_postgres.py, tests/web/test_pool_check.py).
"""

from __future__ import annotations

import time
from typing import Any

from django.db.backends.postgresql import base
from psycopg_pool import ConnectionPool

from quotaweb.env import POOL_CHECK_IDLE_SECONDS

CHECK_AFTER_IDLE_SECONDS = POOL_CHECK_IDLE_SECONDS
RETURNED_AT = "_quotaweb_returned_at"


def check_if_idle(conn: Any) -> None:
    """psycopg_pool's `check`: ConnectionPool.check_connection, for a connection never
    returned or idle longer than CHECK_AFTER_IDLE_SECONDS; raising discards it."""
    returned = getattr(conn, RETURNED_AT, None)
    if returned is not None and time.monotonic() - returned < CHECK_AFTER_IDLE_SECONDS:
        return
    ConnectionPool.check_connection(conn)


class DatabaseWrapper(base.DatabaseWrapper):  # type: ignore[misc]
    @property
    def pool(self) -> Any:
        pool = super().pool
        # Django gives the pool ConnectionPool.check_connection when CONN_HEALTH_CHECKS is
        # on (None when off: then no check at all, as Django does).
        if pool is not None and pool._check is ConnectionPool.check_connection:
            pool._check = check_if_idle
        return pool

    def _close(self) -> None:
        if self.connection is not None and self.pool is not None:
            setattr(self.connection, RETURNED_AT, time.monotonic())
        super()._close()
