"""The only write path for a cycle's decisions: one transaction, compare-and-swap guards.
What each decision does comes from scheduler.effects; quotaweb.scheduling.effects writes it.

Every state change is guarded by the row's old state (`filter(pk=…, status=old).update(…)`,
or for many rows at once quotaweb.scheduling.bulk.update_rows); a row that does not match
means a user or an executor changed it after the snapshot was read, so the whole cycle's
decisions are rolled back (StaleSnapshot) and the next cycle decides again from fresh
state.  Nothing is ever half-applied.

The writes are grouped: the dispatched jobs are read in one query, and their updates, their
new attempts and every event of the cycle are collected (effects.Batch) and written in a
statement each, in decision order, so ids come out as if written one by one.  Preemptions,
warm-pool ends and a dispatch's reuse of a warm pool still write their rows one by one (few
a cycle), their events collected with the rest.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings

from scheduler import CycleResult, Dispatch, Preempt, SetPendingReason, TerminateWarmPool
from scheduler.effects import dispatched, pool_terminated, preempted

from ..models import Job, WarmPool
from ..models.jobs import ACTIVE_STATUSES, QUEUED_STATUSES, JobStatus
from ..models.warm_pools import PoolStatus
from . import bulk
from .effects import Batch, Writer, available, ending


class StaleSnapshot(Exception):
    """A row changed between the snapshot and the apply; the cycle is rolled back."""


def apply_decisions(result: CycleResult, now: datetime) -> int:
    """Apply every decision (the caller holds the transaction and the change lock).
    Returns how many rows were changed."""
    changed = 0
    pending: dict[int, str] = {}
    batch = Batch()
    dispatched = _dispatched_jobs(result)
    for decision in result.decisions:
        if isinstance(decision, SetPendingReason):
            pending[int(decision.job_id)] = decision.reason.value
        elif isinstance(decision, TerminateWarmPool):
            _terminate_pool(decision, now, batch)
        elif isinstance(decision, Preempt):
            _preempt(decision, now, batch)
        elif isinstance(decision, Dispatch):
            _dispatch(decision, now, batch, dispatched)
        changed += 1
    batch.write(StaleSnapshot)
    # Not a guard: a job terminated since the snapshot simply is not made RUNNABLE.
    bulk.update_rows(Job, [(pk, [code]) for pk, code in pending.items()], ["pending_code"],
                     values={"status": JobStatus.RUNNABLE},
                     where={"status__in": QUEUED_STATUSES})
    return changed


def _dispatched_jobs(result: CycleResult) -> dict[str, Job]:
    """The jobs the cycle dispatches, with their shares, in one query."""
    ids = [int(d.job_id) for d in result.decisions if isinstance(d, Dispatch)]
    if not ids:
        return {}
    jobs = Job.objects.select_related("quota_share").in_bulk(ids)
    return {str(pk): job for pk, job in jobs.items()}


def _terminate_pool(decision: TerminateWarmPool, now: datetime, batch: Batch) -> None:
    pool = _available_pool(decision.pool_id)
    effects = pool_terminated(available(pool, now), decision.reason, now.timestamp(),
                              settings.QUOTAWEB["WARM_POOL_MAX_LIFETIME_SECONDS"])
    Writer(now, jobs=[pool.owner], pools=[pool], guard=StaleSnapshot,
           batch=batch).apply(effects)


def _preempt(decision: Preempt, now: datetime, batch: Batch) -> None:
    job = Job.objects.select_related("quota_share").get(pk=int(decision.job_id))
    attempt = (job.attempts.select_related("warm_pool").filter(outcome__isnull=True)
               .order_by("-number").first())
    if attempt is None or job.status not in ACTIVE_STATUSES:
        raise StaleSnapshot(f"job {job.pk} is no longer active")
    effects = preempted(ending(job, attempt), decision, now.timestamp())
    Writer(now, jobs=[job], attempt=attempt, guard=StaleSnapshot, batch=batch).apply(effects)


def _dispatch(decision: Dispatch, now: datetime, batch: Batch, jobs: dict[str, Job]) -> None:
    job = jobs.get(decision.job_id)
    if job is None:
        raise StaleSnapshot(f"job {decision.job_id} is gone")
    pool = _available_pool(decision.warm_pool_id) if decision.warm_pool_id else None
    effects = dispatched(decision, now.timestamp(), available(pool, now) if pool else None)
    pools = [pool] if pool is not None else []
    owners = [pool.owner] if pool is not None else []
    Writer(now, jobs=[job, *owners], pools=pools, guard=StaleSnapshot,
           batch=batch).apply(effects)


def _available_pool(pool_id: str) -> WarmPool:
    pool = WarmPool.objects.select_related("owner__quota_share").filter(
        pk=int(pool_id), status=PoolStatus.AVAILABLE
    ).first()
    if pool is None:
        raise StaleSnapshot(f"warm pool {pool_id} is no longer Available")
    return pool


__all__ = ["StaleSnapshot", "apply_decisions"]
