"""Keeping PostgreSQL's planner statistics of the scheduler's tables up to date.

The cycle and the executors join open attempts to their jobs by status every second.
PostgreSQL plans those joins from the statistics ANALYZE last took; autovacuum takes them
again after a table changed by a tenth, but looks only once a minute
(autovacuum_naptime).  A table that grows from nothing to thousands of rows within that
minute (a new installation's first sweep, a burst of submissions on a quiet system) is
still planned as empty: the joins become nested loops over every pair of rows, and in
bench/api.py one such query took 93 ms each cycle where it takes 8 ms with statistics,
most of the PostgreSQL time a submission cost (README, Performance).

So the cycle, at most every CHECK_SECONDS (each cycle, at one a second), reads how much
each table changed since its last ANALYZE (pg_stat_user_tables) and analyzes, itself,
those that changed by more than MIN_CHANGES rows and FRACTION of their size: a burst is
analyzed within seconds, while a large table is left to autovacuum, which reaches it
first.  ANALYZE samples at most 30,000 rows (a few milliseconds on these tables), takes
no lock that writers wait for, and skips a table another ANALYZE or VACUUM holds
(SKIP_LOCKED).  A database user that does not own the tables gets PostgreSQL's warning
and nothing else.
"""

from __future__ import annotations

import logging
import time

from django.db import connection

from ..models import Attempt, Event, Job, WarmPool

log = logging.getLogger(__name__)

CHECK_SECONDS = 1.0
MIN_CHANGES = 500
FRACTION = 0.2

# The tables the cycle and the executors read every second.
TABLES = tuple(model._meta.db_table for model in (Job, Attempt, WarmPool, Event))

_last_check = {"at": float("-inf")}


def stale_tables() -> list[str]:
    """The scheduler's tables changed by more than MIN_CHANGES rows and FRACTION of their
    live rows since their last ANALYZE (by anyone: autovacuum's counts too)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname FROM pg_stat_user_tables WHERE relname = ANY(%s) "
            "AND schemaname = current_schema() "
            "AND n_mod_since_analyze > %s + %s * n_live_tup ORDER BY relname",
            [list(TABLES), MIN_CHANGES, FRACTION])
        return [name for (name,) in cursor.fetchall()]


def refresh(*, force: bool = False) -> list[str]:
    """Analyze the stale tables (on PostgreSQL, outside a transaction, at most every
    CHECK_SECONDS unless `force`); returns those analyzed."""
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        return []
    now = time.monotonic()
    if not force and now - _last_check["at"] < CHECK_SECONDS:
        return []
    _last_check["at"] = now
    stale = stale_tables()
    if stale:
        quote = connection.ops.quote_name
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE (SKIP_LOCKED) {', '.join(quote(name) for name in stale)}")
        log.info("analyzed %s: changed by more than %d rows and %d%% since their last "
                 "ANALYZE", ", ".join(stale), MIN_CHANGES, round(100 * FRACTION))
    return stale
