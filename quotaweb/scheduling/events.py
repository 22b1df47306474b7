"""Writing events to the outbox so that their ids follow commit order.

docs/api.md promises that `GET /events?after=<id>` never misses an event.  Ids come from a
sequence at insert time, so two transactions could commit out of id order and a reader
could see id 12 before id 11 exists.  Every writer therefore takes the event lock first
and holds it until it commits: on PostgreSQL a transaction-scoped advisory lock; SQLite
already serialises writers (transactions start IMMEDIATE).
"""

from __future__ import annotations

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


def record_all(items: list[Event]) -> list[Event]:
    """Write events in order, ids ascending (the caller holds the event lock)."""
    if not items:
        return []
    return Event.objects.bulk_create(items)
