"""Queue positions (docs/semantics.md 4), worked out in one place for the API and the pages:
1 + the RUNNABLE jobs ahead of a RUNNABLE job in its share's order.  `positions` numbers a
list of jobs in one query, `position` counts for one job; the API's tests check that the
two agree.

The order is the engine's (scheduler.ordering.queue_key: priority high first, then the
submission sequence, which the shell's snapshot sets to the job's id).  The engine's own
SetPendingReason.position is not stored: the cycle sends it only with a changed reason
(a shifted position alone is not written, see scheduler/pending.py), so a stored copy
would go stale with every dispatch ahead of the job.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connection
from django.db.models import F, Q, Window
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
    """One job's position (None unless it is RUNNABLE), by counting the jobs ahead of it:
    an index range, where the window would number the whole queue (with 20,000 jobs
    waiting in the share, about 24 ms against 70 ms)."""
    if job.status != JobStatus.RUNNABLE:
        return None
    ahead = Job.objects.filter(
        Q(priority__gt=job.priority) | Q(priority=job.priority, id__lt=job.pk),
        quota_share_id=job.quota_share_id, status=JobStatus.RUNNABLE)
    return 1 + ahead.count()
