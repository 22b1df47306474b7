"""What happens in the database when an attempt starts running or ends (every executor
reports through these, quotaweb/executors/base.py).  As it ends, scheduler.effects
decides what follows by the pure rules of scheduler.lifecycle (retried or final, what
becomes of its instances, docs/semantics.md 4, 6); quotaweb.scheduling.effects writes it.

Callers hold a transaction with the change lock (events.lock_changes()).
"""

from __future__ import annotations

import contextlib
from datetime import datetime

from scheduler.decisions import PoolTermination
from scheduler.effects import WarmRoom, attempt_finished, pool_ended, settle
from scheduler.events import Running
from scheduler.lifecycle import Failure, Outcome

from ..models import Attempt, Job, WarmPool
from ..models.jobs import JobStatus
from . import bulk, events
from .effects import Batch, Writer, available, ending, warm_room


class AttemptAlreadyEnded(Exception):
    """Someone else ended this attempt first (the compare-and-swap found it changed)."""


def finish_attempt(
    attempt: Attempt,
    outcome: Outcome,
    at: datetime,
    *,
    failure: Failure | None = None,
    reason: str | None = None,
    exit_code: int | None = None,
) -> Job:
    """End an open attempt as SUCCEEDED or FAILED (retried while attempts remain)."""
    job = attempt.job
    effects = attempt_finished(ending(job, attempt), at.timestamp(), outcome, warm_room(job),
                               failure=failure, reason=reason)
    Writer(at, jobs=[job], attempt=attempt, claim=AttemptAlreadyEnded,
           exit_code=exit_code).apply(effects)
    if outcome is not Outcome.SUCCEEDED:
        job.refresh_from_db()
    return job


def is_plain_end(attempt: Attempt) -> bool:
    """Whether the attempt's end leaves no warm pool whatever its outcome: its job keeps
    nothing alive and it did not run on a pool (so that the unit's warm room, which depends
    on every end before it, does not matter)."""
    return attempt.job.keep_alive_seconds == 0 and not (
        attempt.warm_start and attempt.warm_pool_id is not None)


# Nothing reads it: a plain end settles nothing (scheduler.effects.settle).
_NO_ROOM = WarmRoom(0, 0, 0.0)


def finish_attempts(
    ends: list[tuple[Attempt, Outcome, datetime, Failure | None, str | None, int | None]],
) -> set[int]:
    """End many open attempts with plain ends (`is_plain_end`), each as finish_attempt
    would (attempt, outcome, at, failure, reason, exit_code), in a few statements: the
    claims in one, each job's change grouped by the columns it sets, the events in one, in
    the order given.  The attempts must be of different jobs.  Returns the ids of the
    attempts someone else ended first (for those nothing is written)."""
    batch = Batch(ends=True)
    for attempt, outcome, at, failure, reason, exit_code in ends:
        assert is_plain_end(attempt), f"attempt {attempt.pk} may leave a warm pool"
        batch.unit = attempt.pk
        effects = attempt_finished(ending(attempt.job, attempt), at.timestamp(), outcome,
                                   _NO_ROOM, failure=failure, reason=reason)
        Writer(at, jobs=[attempt.job], attempt=attempt, claim=AttemptAlreadyEnded,
               exit_code=exit_code, batch=batch).apply(effects)
    return {int(unit) for unit in batch.write()}  # type: ignore[call-overload]


def mark_all_running(items: list[tuple[Attempt, datetime]]) -> set[int]:
    """mark_running for many attempts of different jobs, in three statements; returns the
    ids of those marked (the others' jobs were no longer STARTING)."""
    if not items:
        return set()
    started = bulk.update_rows(Job, [(attempt.job_id, [at]) for attempt, at in items],
                               ["started_at"], values={"status": JobStatus.RUNNING},
                               where={"status": JobStatus.STARTING})
    marked = [(attempt, at) for attempt, at in items if attempt.job_id in started]
    bulk.update_rows(Attempt, [(attempt.pk, [at, at]) for attempt, at in marked],
                     ["started_at", "heartbeat_at"])
    events.record_all([events.of(Running(), job=attempt.job, time=at)
                       for attempt, at in marked])
    return {attempt.pk for attempt, _ in marked}


def mark_running(attempt: Attempt, at: datetime) -> bool:
    """STARTING → RUNNING (the attempt's started_at is this moment); False when the job
    was no longer STARTING (stopped meanwhile)."""
    updated = Job.objects.filter(pk=attempt.job_id, status=JobStatus.STARTING).update(
        status=JobStatus.RUNNING, started_at=at
    )
    if not updated:
        return False
    Attempt.objects.filter(pk=attempt.pk).update(started_at=at, heartbeat_at=at)
    events.emit(Running(), job=attempt.job, time=at)
    return True


def fail_on_platform(attempt: Attempt, now: datetime, reason: str) -> None:
    """End an open attempt as a platform error (retried by the rules); one that ended
    meanwhile stays as it ended."""
    with contextlib.suppress(AttemptAlreadyEnded):
        finish_attempt(attempt, Outcome.FAILED, now, failure=Failure.PLATFORM_ERROR,
                       reason=reason)


def release(job: Job, attempt: Attempt, at: datetime, *, leaves: bool) -> None:
    """What the job's instances become as its attempt ends (docs/semantics.md 6)."""
    effects = settle(ending(job, attempt), at.timestamp(), warm_room(job), leaves=leaves)
    Writer(at, jobs=[job], attempt=attempt).apply(effects)


def end_available_pool(pool: WarmPool, reason: PoolTermination, at: datetime) -> None:
    """An Available pool ends: its owner's segment is Terminated and billed."""
    effects = pool_ended(available(pool, at), reason, at.timestamp())
    Writer(at, jobs=[pool.owner], pools=[pool]).apply(effects)


