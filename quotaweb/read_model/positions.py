"""Queue positions (docs/semantics.md 4), worked out in one place for the API, the pages and
the websocket: 1 + the RUNNABLE jobs ahead of a RUNNABLE job in its share's order.

The order is the engine's (scheduler.ordering.queue_key: priority high first, then the
submission sequence, which the shell's snapshot sets to the job's id).  The engine's own
SetPendingReason.position is not stored: the cycle sends it only with a changed reason
(a shifted position alone is not written, see scheduler/pending.py), so a stored copy
would go stale with every dispatch ahead of the job.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connection
from django.db.models import F, Window
from django.db.models.functions import RowNumber

from ..models import Job
from ..models.jobs import JobStatus


def positions(jobs: Sequence[Job]) -> dict[int, int]:
    """job id → position, for the RUNNABLE jobs among `jobs`, in one query (none when
    none is RUNNABLE): a window over the RUNNABLE jobs of their shares, then the wanted
    rows picked from it (picking them in the same WHERE would rank them among themselves
    only)."""
    wanted = [job.pk for job in jobs if job.status == JobStatus.RUNNABLE]
    if not wanted:
        return {}
    shares = sorted({job.quota_share_id for job in jobs if job.status == JobStatus.RUNNABLE})
    ranked = Job.objects.filter(status=JobStatus.RUNNABLE, quota_share_id__in=shares).annotate(
        queue_position=Window(RowNumber(), partition_by=[F("quota_share_id")],
                              order_by=[F("priority").desc(), F("id").asc()])
    ).values("id", "queue_position")
    sql, params = ranked.query.sql_with_params()
    marks = ", ".join(["%s"] * len(wanted))
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT "id", "queue_position" FROM ({sql}) ranked WHERE "id" IN ({marks})',
                       [*params, *wanted])
        return {row[0]: row[1] for row in cursor.fetchall()}


def position(job: Job) -> int | None:
    """One job's position (None unless it is RUNNABLE)."""
    return positions([job]).get(job.pk)
