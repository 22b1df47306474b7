"""Writing events to the outbox so that their ids follow commit order.

docs/api.md promises that `GET /events?after=<id>` never misses an event.  Ids come from a
sequence at insert time, so two transactions could commit out of id order and a reader
could see id 12 before id 11 exists.  Every writer therefore takes the event lock first
and holds it until it commits: on PostgreSQL a transaction-scoped advisory lock; SQLite
already serialises writers (transactions start IMMEDIATE).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from scheduler.events import EventType, Payload, details

from ..models import Event, Job
from ..read_model.times import iso
from .clock import from_engine

EVENT_LOCK_KEY = 0x51_57_45_56  # "QWEV"


def lock_events() -> None:
    """Take the event lock for the rest of the current transaction."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("events are written inside a transaction")
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [EVENT_LOCK_KEY])


@contextmanager
def lock_events_with_next_statement() -> Iterator[None]:
    """Take the event lock in the same round trip as the next statement run inside the
    block: on PostgreSQL both are sent together (psycopg's pipeline mode), so the lock is
    held one round trip less.  The statement runs only once the lock is held."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("events are written inside a transaction")
    if connection.vendor != "postgresql" or connection.connection is None:
        lock_events()
        yield
        return
    raw = connection.connection
    with raw.pipeline():
        raw.execute("SELECT pg_advisory_xact_lock(%s)", [EVENT_LOCK_KEY])
        yield


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
    """Write one event (the caller's transaction must hold the event lock)."""
    item = event(event_type, **fields)
    item.save()
    return item


def of(payload: Payload, **fields: Any) -> Event:
    """An unsaved Event carrying a typed payload (write it with `record_all`)."""
    return event(payload.type, details=rendered(payload), **fields)


def emit(payload: Payload, **fields: Any) -> Event:
    """Write one event carrying a typed payload (the caller holds the event lock)."""
    return record(payload.type, details=rendered(payload), **fields)


def rendered(payload: Payload) -> dict[str, Any]:
    """docs/api.md's event details: jobs by id, times in ISO 8601 UTC with a Z."""
    return details(payload, job=int, time=lambda seconds: iso(from_engine(seconds), "auto"))


def record_all(items: list[Event], *, when: Condition | None = None) -> list[Event]:
    """Write events in order, ids ascending (the caller holds the event lock).

    `when`: an SQL condition and its parameters, checked in the same statement, after the
    lock (the statement's snapshot sees every transaction committed before): the events
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
