"""Only one cycle runs at a time anywhere (docs/architecture.md, The tick).

On PostgreSQL a session-level advisory lock: it is released when its holder's connection
ends, so a cycle that dies (a worker killed with -9) never blocks the next one.  The
embedded mode has a single process; a threading lock does there.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection

CYCLE_LOCK_KEY = 0x51_57_43_59  # "QWCY"
_local_lock = threading.Lock()


@contextmanager
def cycle_lock() -> Iterator[bool]:
    """Yields True when this process holds the cycle lock, False when another does."""
    if connection.vendor != "postgresql":
        acquired = _local_lock.acquire(blocking=False)
        try:
            yield acquired
        finally:
            if acquired:
                _local_lock.release()
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [CYCLE_LOCK_KEY])
        acquired = bool(cursor.fetchone()[0])
    try:
        yield acquired
    finally:
        if acquired:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [CYCLE_LOCK_KEY])
