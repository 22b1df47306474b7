"""Writing events to the outbox, and reading them in commit order.

docs/api.md promises that `GET /events?after=<id>` never misses an event.  Ids come from a
sequence at insert time, so two transactions may commit out of id order: a reader could see
id 12 while id 11 is still uncommitted, move its cursor past 12 and never see 11.  Writers
do not queue for each other to prevent that; instead readers stop where an id could still
appear (PostgreSQL):

- Every writer *announces* itself before it draws an event id (`announce`): it reads the
  sequence's last value `a` and takes a shared transaction-scoped advisory lock on the key
  ANNOUNCED | a, held until it commits or rolls back.  Every id it draws is above `a`.
  Shared locks do not wait for each other, so writers run side by side.
- A reader asks how far the log is final (`readable_upto`): first S, the sequence's last
  value, then L, the lowest key announced by another session of this database.  Every id
  up to min(S, L) (S when nobody has announced) is committed or will never be: a writer that
  could still write an id ≤ S drew it before S was read, so it announced before that, and
  its lock was still held when L was read (PostgreSQL releases a transaction's locks only
  once its commit is visible).  Readers that page by id (`readable`) stop there; the rest
  arrives on their next read.

What writers must not do side by side they serialise otherwise: submissions to a share and
changes of that share's state or limits take the share's admission lock (`lock_shares`);
writers that change existing jobs, attempts and pools (the cycle, executors, user actions,
configuration) take the change lock (`lock_changes`), which submissions never wait for.
SQLite serialises writers anyway (transactions start IMMEDIATE): announcing and the locks
are no-ops there, and the bound is the largest id.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import Max, QuerySet
from django.utils import timezone

from scheduler.events import EventType, Payload, details

from ..models import Event, Job
from ..read_model.times import iso
from .clock import from_engine

# Keys of announcements: the sequence value with this bit set (a bigint advisory key), so
# that they never clash with the cycle's lock or any other single-key advisory lock.
ANNOUNCED = 1 << 62
# The two-int advisory key space of the shares' admission locks: (SHARE_LOCK_SPACE, id).
SHARE_LOCK_SPACE = 0x51_57_53_48  # "QWSH"
# The change lock's key (`lock_changes`; once the event lock every writer took).
CHANGE_LOCK_KEY = 0x51_57_45_56  # "QWEV"

EVENT_TABLE = Event._meta.db_table
# The event ids' sequence (a serial or identity column: pg_get_serial_sequence finds both).
_SEQUENCE = f"pg_get_serial_sequence('{EVENT_TABLE}', 'id')"
ANNOUNCE_SQL = (f"SELECT pg_advisory_xact_lock_shared({ANNOUNCED}::bigint "
                f"| COALESCE(pg_sequence_last_value({_SEQUENCE}::regclass), 0))")
# S first, then the lowest key other sessions of this database announced at or below it:
# the subquery reads S's column, so it runs after S is read (and the lock table is read
# when the subquery runs, not from a snapshot).
READABLE_SQL = f"""
SELECT s.last, (
    SELECT min(((l.classid::bigint << 32) | l.objid::bigint) & {ANNOUNCED - 1})
    FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.objsubid = 1
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND (l.classid::bigint & {ANNOUNCED >> 32}) <> 0
      AND l.pid <> pg_backend_pid()
      AND ((l.classid::bigint << 32) | l.objid::bigint) & {ANNOUNCED - 1} <= s.last
) FROM (SELECT COALESCE(pg_sequence_last_value({_SEQUENCE}::regclass), 0) AS last
        OFFSET 0) s
"""


def announce() -> None:
    """Announce the current transaction as a writer of events, before it draws any event
    id (see the module's docstring); held until it commits."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("events are written inside a transaction")
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(ANNOUNCE_SQL)


def lock_changes() -> None:
    """Take the change lock, then announce (`announce`), for the rest of the transaction.

    Writers that change existing jobs, attempts and warm pools (the cycle's transitions and
    decisions, executors' reports, a user's terminate or priority change, configuration)
    run one at a time: they lock rows in different orders, and one at a time they can never
    deadlock.  Submissions take no part in it (they only add jobs, under their shares'
    admission locks): they do not wait for a cycle's apply, nor it for them."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("events are written inside a transaction")
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            # Two statements, one round trip: the announcement once the lock is held.
            cursor.execute(f"SELECT pg_advisory_xact_lock({CHANGE_LOCK_KEY}); {ANNOUNCE_SQL}")


def lock_shares(share_ids: Iterable[int]) -> None:
    """Take the admission lock of each share (in id order: two writers never deadlock) for
    the rest of the transaction: submissions to a share, and changes of its state and
    limits, run one at a time, so no two submissions slip past a queue limit together.
    On SQLite, writers are serialised already."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("shares are locked inside a transaction")
    ids = sorted(set(share_ids))
    if connection.vendor == "postgresql" and ids:
        with connection.cursor() as cursor:
            cursor.execute("SELECT " + ", ".join(
                ["pg_advisory_xact_lock(%s, %s)"] * len(ids)),
                [value for pk in ids for value in (SHARE_LOCK_SPACE, pk)])


@contextmanager
def admit_with_next_statement(share_ids: Iterable[int]) -> Iterator[None]:
    """Lock the shares (`lock_shares`) and announce (`announce`) in the same round trip as
    the next statement run inside the block: on PostgreSQL all three are sent together
    (psycopg's pipeline mode), and the server runs the statement once the locks are held."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("events are written inside a transaction")
    if connection.vendor != "postgresql" or connection.connection is None:
        lock_shares(share_ids)
        announce()
        yield
        return
    raw = connection.connection
    with raw.pipeline():
        lock_shares(share_ids)
        announce()
        yield


def readable_upto() -> int:
    """The largest event id up to which the log is final: every event with an id at or
    below it is committed, or never will be.  0 for an empty log.  Call it outside a
    transaction, or before the reads it bounds in READ COMMITTED (each of them then reads
    a snapshot taken after it)."""
    if connection.vendor != "postgresql":
        return Event.objects.aggregate(last=Max("id"))["last"] or 0
    with connection.cursor() as cursor:
        cursor.execute(READABLE_SQL)
        last, lowest = cursor.fetchone()
    return int(last) if lowest is None else min(int(last), int(lowest))


def readable(rows: QuerySet[Event], upto: int | None = None) -> QuerySet[Event]:
    """`rows` without the events that are not final yet (ids above `upto`, by default
    readable_upto())."""
    return rows.filter(id__lte=readable_upto() if upto is None else upto)


def event(
    event_type: EventType,
    *,
    job: Job | None = None,
    quota_share: str | None = None,
    details: dict[str, Any] | None = None,
    time: datetime | None = None,
) -> Event:
    """An unsaved Event; write it with `record` or `record_all`."""
    share = quota_share if quota_share is not None else (
        job.quota_share.name if job is not None else None
    )
    return Event(
        time=time or timezone.now(),
        type=event_type,
        job=job,
        quota_share=share,
        details=details or {},
    )


def record(event_type: EventType, **fields: Any) -> Event:
    """Write one event (the caller has announced)."""
    item = event(event_type, **fields)
    item.save()
    return item


def of(payload: Payload, **fields: Any) -> Event:
    """An unsaved Event carrying a typed payload (write it with `record_all`)."""
    return event(payload.type, details=rendered(payload), **fields)


def emit(payload: Payload, **fields: Any) -> Event:
    """Write one event carrying a typed payload (the caller has announced)."""
    return record(payload.type, details=rendered(payload), **fields)


def rendered(payload: Payload) -> dict[str, Any]:
    """docs/api.md's event details: jobs by id, times in ISO 8601 UTC with a Z."""
    return details(payload, job=int, time=lambda seconds: iso(from_engine(seconds), "auto"))


def record_all(items: list[Event], *, when: Condition | None = None) -> list[Event]:
    """Write events in order, ids ascending (the caller has announced).

    `when`: an SQL condition and its parameters, checked in the same statement (its snapshot is
    taken after the caller's locks, so it sees every transaction committed before): the events
    are written only if it holds, and [] is returned if not.  PostgreSQL only."""
    if not items:
        return []
    if when is None:
        return Event.objects.bulk_create(items)
    if connection.vendor != "postgresql":
        raise NotImplementedError("a conditional write of events needs PostgreSQL")
    condition, condition_params = when
    rows: list[str] = []
    params: list[Any] = []
    for ordinal, item in enumerate(items):
        rows.append("(%s, %s::timestamptz, %s, %s, %s, %s::jsonb)")
        params += [ordinal, item.time, str(item.type), item.job_id, item.quota_share,
                   json.dumps(item.details)]
    sql = (f"INSERT INTO {Event._meta.db_table} (time, type, job_id, quota_share, details) "
           "SELECT v.time, v.type, v.job_id, v.quota_share, v.details "
           f"FROM (VALUES {', '.join(rows)}) "
           "AS v(ordinal, time, type, job_id, quota_share, details) "
           f"WHERE {condition} ORDER BY v.ordinal RETURNING id")
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, *condition_params])
        ids = [row[0] for row in cursor.fetchall()]
    if not ids:
        return []
    for item, pk in zip(items, sorted(ids), strict=True):
        item.pk = pk
        item._state.adding = False
    return items


# An SQL boolean expression and its parameters (record_all's `when`).
Condition = tuple[str, list[Any]]
