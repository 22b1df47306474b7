"""The only write path for a cycle's decisions: one transaction, compare-and-swap guards.

Every state change is `filter(pk=…, status=old).update(…)`; zero rows means a user or an
executor changed that row after the snapshot was read, so the whole cycle's decisions are
rolled back (StaleSnapshot) and the next cycle decides again from fresh state.  Nothing is
ever half-applied.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from django.conf import settings
from django.db.models import F

from scheduler import CycleResult, Dispatch, Preempt, SetPendingReason, TerminateWarmPool
from scheduler.decisions import PoolTermination as EnginePoolTermination
from scheduler.lifecycle import PREEMPTION_RETRIES_EXHAUSTED, pool_end, preemption_fails_job

from ..models import Attempt, Job, WarmPool, WarmPoolSegment
from ..models.jobs import ACTIVE_STATUSES, QUEUED_STATUSES, JobStatus
from ..models.warm_pools import PoolStatus, PoolTermination
from . import events
from .attempts import end_available_pool, end_pool_instances
from .clock import from_engine


class StaleSnapshot(Exception):
    """A row changed between the snapshot and the apply; the cycle is rolled back."""


def apply_decisions(result: CycleResult, now: datetime) -> int:
    """Apply every decision (the caller holds the transaction and the event lock).
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


def _guarded(updated: int, what: str) -> None:
    if updated != 1:
        raise StaleSnapshot(what)


def _terminate_pool(decision: TerminateWarmPool, now: datetime) -> None:
    pool = WarmPool.objects.select_related("owner__quota_share").filter(
        pk=int(decision.pool_id), status=PoolStatus.AVAILABLE
    ).first()
    if pool is None:
        raise StaleSnapshot(f"warm pool {decision.pool_id} is no longer Available")
    ended_at = now
    if decision.reason is not EnginePoolTermination.EVICTED:
        # Expired by time: it ended when it fell due, however late the cycle came, so it
        # is stamped and billed as the simulator does.
        due, _ = pool_end(pool.expires_at.timestamp() if pool.expires_at else now.timestamp(),
                          pool.chain_started_at.timestamp(),
                          settings.QUOTAWEB["WARM_POOL_MAX_LIFETIME_SECONDS"])
        ended_at = min(now, from_engine(due))
    end_available_pool(pool, PoolTermination(decision.reason.value), ended_at)


def _preempt(decision: Preempt, now: datetime) -> None:
    job = Job.objects.select_related("quota_share").get(pk=int(decision.job_id))
    attempt = job.attempts.filter(outcome__isnull=True).order_by("-number").first()
    if attempt is None or job.status not in ACTIVE_STATUSES:
        raise StaleSnapshot(f"job {job.pk} is no longer active")
    grace_until = from_engine(decision.grace_until)
    _guarded(Attempt.objects.filter(pk=attempt.pk, outcome__isnull=True).update(
        outcome="PREEMPTED", stopped_at=now, kind=decision.kind.value,
        preempted_by_id=int(decision.preempted_by), stop_requested_at=now,
        kill_at=grace_until, status_reason=f"Preempted ({decision.kind.value}) by job "
                                          f"{decision.preempted_by}",
    ), f"attempt {attempt.pk}")
    events.record("PREEMPTED", job=job, time=now, details={
        "kind": decision.kind.value, "preempted_by": int(decision.preempted_by),
    })
    if attempt.warm_start and attempt.warm_pool_id is not None:
        # The segment's instances go to the preemptor.
        end_pool_instances(attempt.warm_pool, PoolTermination.EVICTED, now)  # type: ignore[arg-type]
        WarmPoolSegment.objects.filter(job=job).update(
            status=PoolStatus.TERMINATED, termination_reason=PoolTermination.EVICTED
        )
        events.record("WARM_POOL_TERMINATED", job=job, time=now,
                      details={"reason": PoolTermination.EVICTED.value})
    count = job.preempted_count + 1
    if preemption_fails_job(count, job.preemption_retries_before_termination):
        update = {"status": JobStatus.FAILED, "status_reason": PREEMPTION_RETRIES_EXHAUSTED,
                  "stopped_at": now}
        events.record("FAILED", job=job, time=now,
                      details={"reason": PREEMPTION_RETRIES_EXHAUSTED})
    else:
        update = {"status": JobStatus.RUNNABLE, "not_before": grace_until, "stopped_at": now}
    _guarded(Job.objects.filter(pk=job.pk, status=job.status).update(
        preempted_count=F("preempted_count") + 1, instances=[], pending_code=None, **update,
    ), f"job {job.pk}")


def _dispatch(decision: Dispatch, now: datetime) -> None:
    job = Job.objects.select_related("quota_share").get(pk=int(decision.job_id))
    _guarded(Job.objects.filter(pk=job.pk, status__in=QUEUED_STATUSES).update(
        status=JobStatus.SCHEDULED, scheduled_at=now, started_at=None, stopped_at=None,
        instances=list(decision.instances), pending_code=None, not_before=None,
    ), f"job {job.pk} is no longer queued")
    number = job.attempts.count() + 1
    pool = None
    if decision.warm_pool_id is not None:
        pool = _reuse(int(decision.warm_pool_id), job, now)
    Attempt.objects.create(
        job=job, number=number, instances=list(decision.instances),
        borrowed_instances=decision.borrowed_instances, warm_start=decision.warm_start,
        warm_pool=pool, scheduled_at=now, starting_at=from_engine(decision.starting_at),
    )
    events.record("DISPATCHED", job=job, time=now, details={
        "borrowed_instances": decision.borrowed_instances, "warm_start": decision.warm_start,
    })
    if pool is not None:
        events.record("WARM_POOL_REUSED", job=pool.owner, time=now,
                      details={"reused_by": job.pk})
        _guarded(WarmPool.objects.filter(pk=pool.pk, status=PoolStatus.AVAILABLE).update(
            status=PoolStatus.IN_USE, owner=job,
        ), f"warm pool {pool.pk}")
        WarmPoolSegment.objects.update_or_create(job=job, defaults={
            "pool": pool, "status": PoolStatus.IN_USE,
            "keep_alive_seconds": job.keep_alive_seconds, "available_since": None,
            "expires_at": None, "termination_reason": None,
        })


def _reuse(pool_id: int, job: Job, now: datetime) -> WarmPool:
    pool = WarmPool.objects.select_related("owner__quota_share").filter(
        pk=pool_id, status=PoolStatus.AVAILABLE
    ).first()
    if pool is None:
        raise StaleSnapshot(f"warm pool {pool_id} is no longer Available")
    segment = WarmPoolSegment.objects.filter(job_id=pool.owner_id).first()
    if segment is not None:
        billed = (now - (segment.available_since or now)).total_seconds()
        WarmPoolSegment.objects.filter(pk=segment.pk).update(
            status=PoolStatus.REUSED, reused_by=job,
            retained_billable_seconds=segment.retained_billable_seconds + max(0.0, billed),
        )
    return pool


__all__ = ["StaleSnapshot", "apply_decisions"]
