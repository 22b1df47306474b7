"""What happens in the database when an attempt ends: scheduler.effects decides it by the
pure rules of scheduler.lifecycle (retried or final, what becomes of its instances,
docs/semantics.md 4, 6); quotaweb.scheduling.effects writes it.

Callers hold a transaction with the event lock (events.lock_events()).
"""

from __future__ import annotations

from datetime import datetime

from scheduler.decisions import PoolTermination
from scheduler.effects import attempt_finished, pool_ended, settle
from scheduler.lifecycle import Failure, Outcome

from ..models import Attempt, Job, WarmPool
from .effects import Writer, available, ending, warm_room


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


def release(job: Job, attempt: Attempt, at: datetime, *, leaves: bool) -> None:
    """What the job's instances become as its attempt ends (docs/semantics.md 6)."""
    effects = settle(ending(job, attempt), at.timestamp(), warm_room(job), leaves=leaves)
    Writer(at, jobs=[job], attempt=attempt).apply(effects)


def end_available_pool(pool: WarmPool, reason: PoolTermination, at: datetime) -> None:
    """An Available pool ends: its owner's segment is Terminated and billed."""
    effects = pool_ended(available(pool, at), reason, at.timestamp())
    Writer(at, jobs=[pool.owner], pools=[pool]).apply(effects)


