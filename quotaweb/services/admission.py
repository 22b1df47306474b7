"""Admitting new jobs: the checks that must see every earlier submission (the share still
ENABLED, its queue limits) and the jobs' SUBMITTED events, in one statement.

A submission holds the admission lock of each share it goes to from its insert to its
commit (quotaweb.scheduling.events.lock_shares), so that no two submissions to a share slip
past a limit together (a share's per-user rate limit is counted per share too), and a change
of the share's state or limits comes wholly before or after it.  Every round trip under
that lock is paid by every other submission to the share waiting for it, so on PostgreSQL
outside a transaction (`write_at_once`) the section is within one round trip: the locks,
the announcement of the events, one statement that inserts the jobs and, if the shares take
them, their events (raising when they do not: quotaweb_whole_submission), and the commit,
all sent together; PostgreSQL releases the locks at the commit.  Elsewhere (`admit`)
three: the locks and the announcement sent with the job insert (or the batch's one
insert), then the statement that inserts the events if the shares take them, then the
commit.  The statement's snapshot is taken after the locks, so it sees every submission
committed before; its counts include this transaction's own new jobs (added to them when
the statement inserts them itself).

When the statement inserts no event the submission is refused: the transaction rolls back
and `explain` finds which rule refused it, with the figures its message gives.
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from operator import attrgetter
from typing import Any

from django.db import connection
from django.db.models.signals import post_save, pre_save
from django.utils import timezone

from scheduler.events import Submitted

from ..models import Job, QuotaShare
from ..models.jobs import QUEUED_STATUSES
from ..models.shares import ShareState
from ..postgresql import prepared
from ..scheduling import events
from .errors import Conflict
from .limits import WINDOW, check_submission_limits, lifted

# The SQLSTATEs of quotaweb_whole_submission (migration 0014).
TOKEN_TAKEN = "QW409"
REFUSED = "QW403"


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


def can_write_at_once() -> bool:
    """Whether `write_at_once` can run here: PostgreSQL, outside any transaction, and
    nothing listens to a Job's save (its rows are not saved through the model)."""
    return (connection.vendor == "postgresql" and not connection.in_atomic_block
            and connection.get_autocommit()
            and not (pre_save.has_listeners(Job) or post_save.has_listeners(Job)))


def write_at_once(user: Any, jobs: Sequence[Job], *, token: bool,
                  now: datetime | None = None) -> bool:
    """Submit unsaved jobs (one, or a batch's) in one transaction sent in one round trip
    (PostgreSQL, outside a transaction): BEGIN, the admission lock of every share they go
    to (in id order), the announcement of their events (quotaweb.scheduling.events), one
    statement that inserts the jobs (with `token`, none whose client_token is taken:
    one_job_per_client_token) and, if every share is ENABLED and within its limits with
    the jobs counted, their SUBMITTED events in the jobs' order, then COMMIT.  The
    statement ends with quotaweb_whole_submission (migration 0014), which raises when a
    job or an event is missing: the transaction is then aborted, the COMMIT behind it
    commits nothing, and it is rolled back.

    True: written (the jobs have their ids).  False: a client_token was taken, nothing
    written.  Raises Refused, having written nothing."""
    now = now or timezone.now()
    submitted = events.of(Submitted(), job=jobs[0], time=jobs[0].created_at)
    insert, insert_params = _insert(jobs, ignore_conflicts=token)
    conditions, condition_params = _conditions(user, jobs, now, unseen=True)
    shares = sorted({job.quota_share_id for job in jobs})
    locks = ", ".join([f"pg_advisory_xact_lock({events.SHARE_LOCK_SPACE}, %s)"] * len(shares))
    write = (f"WITH new_job AS ({insert} RETURNING id, created_at, quota_share_id), "
             f"new_event AS (INSERT INTO {events.EVENT_TABLE} "
             "(time, type, job_id, quota_share, details) "
             "SELECT new_job.created_at, %s, new_job.id, s.name, %s::jsonb "
             f"FROM new_job JOIN {SHARE_TABLE} s ON s.id = new_job.quota_share_id "
             f"WHERE {' AND '.join(conditions)} ORDER BY new_job.id RETURNING id) "
             "SELECT (SELECT array_agg(id ORDER BY id) FROM new_job), "
             "quotaweb_whole_submission(%s, (SELECT count(*)::integer FROM new_job), "
             "(SELECT count(*)::integer FROM new_event))")
    params = [*insert_params, str(submitted.type), json.dumps(submitted.details),
              *condition_params, len(jobs)]
    with prepared.cursor() as cursor:
        raw = cursor.connection
        try:
            # Sent together, in one round trip (psycopg's pipeline mode), each a prepared
            # statement whose plan PostgreSQL keeps (planning the insert cost more than
            # running it).  The write's snapshot is taken after the locks; PostgreSQL
            # releases them at the COMMIT, without waiting for this process to read the
            # answer (under load the thread that holds a lock may wait for a CPU, and with
            # it every submission to the share).
            with raw.pipeline():
                cursor.execute("BEGIN")
                prepared.execute(cursor, f"SELECT {locks}", shares)
                prepared.execute(cursor, events.ANNOUNCE_SQL)
                prepared.execute(cursor, write, params)
                raw.execute("COMMIT")
            (ids, _written) = cursor.fetchone()
        except BaseException as error:
            raw.execute("ROLLBACK")
            refusal = getattr(error, "sqlstate", None)  # quotaweb_whole_submission's
            if refusal == TOKEN_TAKEN:
                return False
            if refusal == REFUSED:
                raise Refused() from None
            raise
    for job, pk in zip(jobs, ids, strict=True):
        job.pk = pk
        job._state.adding = False
        job._state.db = connection.alias
    return True


def _insert(jobs: Sequence[Job], *, ignore_conflicts: bool) -> tuple[str, list[Any]]:
    """An INSERT of the jobs' rows from one JSON parameter (jsonb_to_recordset, in their
    order): each column's value as saving the job would write it (its pre_save: the
    creation time is set here), without preparing some 40,000 parameters one by one."""
    for job in jobs:
        for field in _STAMPED:
            field.pre_save(job, True)  # sets the creation time on the job, as saving does
    # Every other column's pre_save is the attribute's value: read them all at once.
    rows = [dict(zip(_COLUMNS, _VALUES(job), strict=True)) for job in jobs]
    return (_insert_sql(ignore_conflicts),
            [json.dumps(rows, default=_json_value, separators=(",", ":"))])


@functools.cache
def _insert_sql(ignore_conflicts: bool) -> str:
    """The INSERT's text, the same for every submission: built once per process (its 39
    columns' quoting and types cost more than the rest of a submission's SQL)."""
    quote = connection.ops.quote_name
    columns = ", ".join(quote(field.column) for field in _INSERTED)
    types = ", ".join(f"{quote(field.column)} {field.db_type(connection)}"
                      for field in _INSERTED)
    conflict = " ON CONFLICT DO NOTHING" if ignore_conflicts else ""
    return (f"INSERT INTO {JOB_TABLE} ({columns}) SELECT {columns} FROM ROWS FROM "
            f"(jsonb_to_recordset(%s::jsonb) AS ({types})) WITH ORDINALITY AS r "
            f"ORDER BY r.ordinality{conflict}")


def _json_value(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"a job's column holds {type(value).__name__}, not written as JSON")


def _conditions(user: Any, jobs: Sequence[Job], now: datetime, *, unseen: bool = False
                ) -> tuple[list[str], list[Any]]:
    """Per share: ENABLED, and (for a user) its queued jobs and this user's submissions in
    the last minute, counted up to one past the limit, within the limits.  `unseen`: the
    statement does not see `jobs` yet (they are inserted by the same statement), so they
    are added to the counts."""
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
        pending = per_share[share_id] if unseen else 0
        if not lifted(share.max_queued_jobs):
            conditions.append(
                f"(SELECT count(*) FROM (SELECT 1 FROM {JOB_TABLE} j "
                f"WHERE j.quota_share_id = %s "
                f"AND j.status IN ({', '.join(['%s'] * len(QUEUED_STATUSES))}) LIMIT %s) q) "
                "<= %s")
            params += [share_id, *(str(status) for status in QUEUED_STATUSES),
                       share.max_queued_jobs + 1, share.max_queued_jobs - pending]
        if not lifted(share.max_submissions_per_minute):
            conditions.append(
                f"(SELECT count(*) FROM (SELECT 1 FROM {JOB_TABLE} j "
                "WHERE j.quota_share_id = %s "
                "AND j.submitted_by_id = %s AND j.created_at > %s LIMIT %s) r) <= %s")
            params += [share_id, user.pk, now - WINDOW, share.max_submissions_per_minute + 1,
                       share.max_submissions_per_minute - pending]
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
_INSERTED = [field for field in Job._meta.concrete_fields if not field.primary_key]
_COLUMNS = [field.column for field in _INSERTED]
_VALUES = attrgetter(*(field.attname for field in _INSERTED))
# The columns whose value saving sets (auto_now, auto_now_add): their pre_save is called.
_STAMPED = [field for field in _INSERTED
            if getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False)]
SHARE_TABLE = QuotaShare._meta.db_table
