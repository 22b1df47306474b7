"""Admitting new jobs: the checks that must see every earlier submission (the share still
ENABLED, its queue limits) and the jobs' SUBMITTED events, in one statement.

A submission holds the admission lock of each share it goes to from its insert to its
commit (quotaweb.scheduling.events.lock_shares), so that no two submissions to a share slip
past a limit together (a share's per-user rate limit is counted per share too), and a change
of the share's state or limits comes wholly before or after it.  Every round trip under
that lock is paid by every other submission to the share waiting for it, so the section is
kept to three: the locks and the announcement of the events sent with the job insert (or
the batch's one insert), then this statement, which counts what the limits count and
inserts the events only if the share takes them, and the commit.  The statement's snapshot
is taken after the lock, so it sees every submission committed before, and its counts
include this transaction's own new jobs.

When the statement inserts nothing the submission is refused: the caller rolls back and
`explain` finds which rule refused it, with the figures its message gives.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connection
from django.utils import timezone

from scheduler.events import Submitted

from ..models import Job, QuotaShare
from ..models.jobs import QUEUED_STATUSES
from ..models.shares import ShareState
from ..scheduling import events
from .errors import Conflict
from .limits import WINDOW, check_submission_limits


class Refused(Exception):
    """The share no longer takes these jobs (DISABLED, or a limit): nothing was written."""


def admit(user: Any, jobs: Sequence[Job], now: datetime | None = None) -> None:
    """Write the SUBMITTED events of `jobs` (inserted in this transaction, in their order)
    if every share they go to is ENABLED and within its queue limits for `user` (None: the
    system, whose jobs the limits do not count).  Raises Refused, having written nothing.
    The caller holds the shares' admission locks and has announced."""
    if not jobs:
        return
    now = now or timezone.now()
    submitted = [events.of(Submitted(), job=job, time=job.created_at) for job in jobs]
    if connection.vendor != "postgresql":
        # The ORM's checks, raising the refusal itself (SQLite serialises writers anyway).
        _check(user, jobs, now, exclude=[job.pk for job in jobs], batch=len(jobs) > 1)
        events.record_all(submitted)
        return
    conditions, params = _conditions(user, jobs, now)
    if not events.record_all(submitted, when=(" AND ".join(conditions), params)):
        raise Refused()


def _conditions(user: Any, jobs: Sequence[Job], now: datetime) -> tuple[list[str], list[Any]]:
    """Per share: ENABLED, and (for a user) its queued jobs and this user's submissions in
    the last minute, counted up to one past the limit, within the limits."""
    per_share = Counter(job.quota_share_id for job in jobs)
    shares = {job.quota_share_id: job.quota_share for job in jobs}
    conditions: list[str] = []
    params: list[Any] = []
    for share_id in sorted(per_share):
        share = shares[share_id]
        conditions.append(f"EXISTS (SELECT 1 FROM {SHARE_TABLE} s WHERE s.id = %s "
                          "AND s.state <> %s)")
        params += [share_id, str(ShareState.DISABLED)]
        if user is None:
            continue
        conditions.append(
            f"(SELECT count(*) FROM (SELECT 1 FROM {JOB_TABLE} j WHERE j.quota_share_id = %s "
            f"AND j.status IN ({', '.join(['%s'] * len(QUEUED_STATUSES))}) LIMIT %s) q) <= %s")
        params += [share_id, *(str(status) for status in QUEUED_STATUSES),
                   share.max_queued_jobs + 1, share.max_queued_jobs]
        conditions.append(
            f"(SELECT count(*) FROM (SELECT 1 FROM {JOB_TABLE} j WHERE j.quota_share_id = %s "
            "AND j.submitted_by_id = %s AND j.created_at > %s LIMIT %s) r) <= %s")
        params += [share_id, user.pk, now - WINDOW, share.max_submissions_per_minute + 1,
                   share.max_submissions_per_minute]
    return conditions, params


def explain(user: Any, jobs: Sequence[Job], now: datetime | None = None, *,
            batch: bool = False) -> None:
    """Raise the refusal of `jobs` as `admit` found it (SHARE_DISABLED, QUEUE_FULL,
    TOO_MANY_SUBMISSIONS), counted as if they were not written yet.  The caller holds the
    shares' admission locks in a transaction where they are not written (or excludes them)."""
    _check(user, jobs, now or timezone.now(), exclude=[], batch=batch)


def _check(user: Any, jobs: Sequence[Job], now: datetime, exclude: list[int],
           batch: bool = False) -> None:
    per_share = Counter(job.quota_share_id for job in jobs)
    states = dict(QuotaShare.objects.filter(pk__in=per_share).values_list("pk", "state"))
    shares = {job.quota_share_id: job.quota_share for job in jobs}
    for share_id in sorted(per_share):
        if states.get(share_id) == ShareState.DISABLED:
            said = "; nothing was submitted" if batch else ""
            raise Conflict("SHARE_DISABLED", f"Quota share {shares[share_id].name} is DISABLED "
                                             f"and accepts no new jobs{said}.")
    if user is None:
        return
    for share_id in sorted(per_share):
        check_submission_limits(user, shares[share_id], now, count=per_share[share_id],
                                exclude=exclude)


JOB_TABLE = Job._meta.db_table
SHARE_TABLE = QuotaShare._meta.db_table
