"""Statements of the hottest paths as PostgreSQL prepared statements.

Django's PostgreSQL backend binds parameters on the client side, so PostgreSQL parses and
plans every statement it receives.  For most statements that costs little beside their
work; for a submission's two it was most of their cost: planning the share lookup took
0.21 ms and executing it 0.04 ms, and planning the job insert 0.37 ms against 0.28 ms of
work (pg_stat_statements, bench/api.py; README, Performance).  Here they are sent with
server-side binding and `prepare=True`: psycopg prepares each text once per connection
(pooled connections keep theirs) and PostgreSQL reuses the plan.

A connection pooler between Quotaweb and PostgreSQL must keep prepared statements per
client (PgBouncer in transaction mode does from 1.21, with max_prepared_statements);
docker-compose.yml connects directly.

A statement run here is recorded in `connection.queries_log` as Django's debug cursor
records one, so the query counts of tests and of DEBUG still see it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from django.db import connection

NEVER_BY_COUNT = 2**31


@contextmanager
def cursor() -> Iterator[Any]:
    """A psycopg cursor with server-side binding on this thread's Django connection,
    its errors raised as Django's."""
    from psycopg import Cursor  # PostgreSQL's driver: imported where it is used

    connection.ensure_connection()
    conn = connection.connection
    if conn.prepare_threshold is None:
        # Django turns psycopg's preparation off (prepare_threshold None), which ignores
        # prepare=True too.  A threshold no statement reaches prepares only what is asked
        # here; Django's own cursors bind on the client side and are never prepared.
        conn.prepare_threshold = NEVER_BY_COUNT
    with connection.wrap_database_errors, Cursor(conn) as raw:
        yield raw


def execute(raw: Any, sql: str, params: Sequence[Any] = ()) -> None:
    """`raw.execute(sql, params)` as a prepared statement, recorded as Django records one."""
    started = time.monotonic()
    raw.execute(sql, params, prepare=True)
    if connection.queries_logged:
        connection.queries_log.append({
            "sql": f"{sql} -- {list(params)!r}"[:10_000],
            "time": f"{time.monotonic() - started:.3f}"})


def fetchone(sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
    """One row of a prepared statement (outside or inside the current transaction)."""
    with cursor() as raw:
        execute(raw, sql, params)
        row = raw.fetchone()
    return tuple(row) if row is not None else None
