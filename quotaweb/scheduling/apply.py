"""The only write path for a cycle's decisions: one transaction, compare-and-swap guards.
What each decision does comes from scheduler.effects; quotaweb.scheduling.effects writes it.

Every state change is `filter(pk=…, status=old).update(…)`; zero rows means a user or an
executor changed that row after the snapshot was read, so the whole cycle's decisions are
rolled back (StaleSnapshot) and the next cycle decides again from fresh state.  Nothing is
ever half-applied.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from django.conf import settings

from scheduler import CycleResult, Dispatch, Preempt, SetPendingReason, TerminateWarmPool
from scheduler.effects import dispatched, pool_terminated, preempted

from ..models import Job, WarmPool
from ..models.jobs import ACTIVE_STATUSES, QUEUED_STATUSES, JobStatus
from ..models.warm_pools import PoolStatus
from .effects import Writer, available, ending


class StaleSnapshot(Exception):
    """A row changed between the snapshot and the apply; the cycle is rolled back."""


def apply_decisions(result: CycleResult, now: datetime) -> int:
    """Apply every decision (the caller holds the transaction and the change lock).
    Returns how many rows were changed."""
    changed = 0
    pending: dict[str, list[int]] = defaultdict(list)
    for decision in result.decisions:
        if isinstance(decision, SetPendingReason):
            pending[decision.reason.value].append(int(decision.job_id))
        elif isinstance(decision, TerminateWarmPool):
            _terminate_pool(decision, now)
        elif isinstance(decision, Preempt):
            _preempt(decision, now)
        elif isinstance(decision, Dispatch):
            _dispatch(decision, now)
        changed += 1
    for code, ids in pending.items():
        # Not a guard: a job terminated since the snapshot simply is not made RUNNABLE.
        Job.objects.filter(pk__in=ids, status__in=QUEUED_STATUSES).update(
            status=JobStatus.RUNNABLE, pending_code=code
        )
    return changed


def _terminate_pool(decision: TerminateWarmPool, now: datetime) -> None:
    pool = _available_pool(decision.pool_id)
    effects = pool_terminated(available(pool, now), decision.reason, now.timestamp(),
                              settings.QUOTAWEB["WARM_POOL_MAX_LIFETIME_SECONDS"])
    Writer(now, jobs=[pool.owner], pools=[pool], guard=StaleSnapshot).apply(effects)


def _preempt(decision: Preempt, now: datetime) -> None:
    job = Job.objects.select_related("quota_share").get(pk=int(decision.job_id))
    attempt = (job.attempts.select_related("warm_pool").filter(outcome__isnull=True)
               .order_by("-number").first())
    if attempt is None or job.status not in ACTIVE_STATUSES:
        raise StaleSnapshot(f"job {job.pk} is no longer active")
    effects = preempted(ending(job, attempt), decision, now.timestamp())
    Writer(now, jobs=[job], attempt=attempt, guard=StaleSnapshot).apply(effects)


def _dispatch(decision: Dispatch, now: datetime) -> None:
    job = Job.objects.select_related("quota_share").get(pk=int(decision.job_id))
    pool = _available_pool(decision.warm_pool_id) if decision.warm_pool_id else None
    effects = dispatched(decision, now.timestamp(), available(pool, now) if pool else None)
    pools = [pool] if pool is not None else []
    owners = [pool.owner] if pool is not None else []
    Writer(now, jobs=[job, *owners], pools=pools, guard=StaleSnapshot).apply(effects)


def _available_pool(pool_id: str) -> WarmPool:
    pool = WarmPool.objects.select_related("owner__quota_share").filter(
        pk=int(pool_id), status=PoolStatus.AVAILABLE
    ).first()
    if pool is None:
        raise StaleSnapshot(f"warm pool {pool_id} is no longer Available")
    return pool


__all__ = ["StaleSnapshot", "apply_decisions"]
