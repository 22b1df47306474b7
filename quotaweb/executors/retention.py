"""How long logs are kept: a job's lines are deleted LOG_RETENTION_DAYS after they were
shipped, by a periodic task (Celery beat's `quotaweb.tasks.prune_logs` in the distributed
mode, the runtime's LogPruner thread in the embedded mode and `run_scheduler`).

Rows go in small batches, each its own short transaction, so a prune of millions of old
lines never holds the database (SQLite's one writer lock above all) against the cycle."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from ..models import LogChunk

log = logging.getLogger(__name__)

PRUNE_BATCH = 200  # chunks per delete: at most ~13 MB of text


def retention() -> timedelta:
    return timedelta(days=settings.QUOTAWEB["LOG_RETENTION_DAYS"])


def prune_logs(now: datetime | None = None) -> int:
    """Delete the log chunks shipped before `now` minus the retention; returns how many."""
    cutoff = (now or timezone.now()) - retention()
    deleted = 0
    while True:
        batch = list(LogChunk.objects.filter(time__lt=cutoff).order_by().values_list(
            "pk", flat=True)[:PRUNE_BATCH])
        if not batch:
            break
        deleted += LogChunk.objects.filter(pk__in=batch).delete()[0]
    if deleted:
        log.info("deleted %d log chunks shipped before %s", deleted, cutoff.isoformat())
    return deleted
