"""The open attempts whose jobs are in a given status: what the cycle's transitions and
the executors ask every second (the attempts due to start, to run, to end).

As one join of attempts to jobs, PostgreSQL planned these from its estimates of how many
jobs are STARTING or SCHEDULED, states a job passes through in seconds and that its
statistics almost never see: it estimated one row on each side and chose a nested loop
that scanned every job of the status once per open attempt (189 ms for 600 attempts in
bench/api.py, where 1 ms does).  Here the work is bounded by the open attempts, whatever
the estimates: their job ids (few: at most the fleet's instances), then which of those
jobs are in the status (by primary key), then the attempts of those jobs.  The callers
hold the change lock (quotaweb.scheduling.events.lock_changes), so nothing that these
queries read changes between them.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from django.db.models import Q, QuerySet

from ..models import Attempt, Job


def open_attempts(statuses: Collection[str], executors: Collection[str] | None = None,
                  *conditions: Q, **filters: Any) -> QuerySet[Attempt]:
    """The attempts with no outcome that match `conditions` and `filters` (of the attempt's
    own columns), of jobs in one of `statuses` (and, given `executors`, run by one of them),
    in the attempts' usual order."""
    candidates = Attempt.objects.filter(*conditions, outcome__isnull=True, **filters)
    job_ids = sorted(set(candidates.order_by().values_list("job_id", flat=True)))
    jobs = Job.objects.filter(pk__in=job_ids, status__in=list(statuses))
    if executors is not None:
        jobs = jobs.filter(executor__in=list(executors))
    matching = list(jobs.order_by().values_list("pk", flat=True)) if job_ids else []
    return candidates.filter(job_id__in=matching)
