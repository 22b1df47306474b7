"""What happens in the database when an attempt ends, by the pure rules of
scheduler.lifecycle: retried or final, and what becomes of its instances (docs/semantics.md 4, 6).

Callers hold a transaction with the event lock (events.lock_events()).
"""

from __future__ import annotations

import shutil
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import transaction

from scheduler.decisions import PoolTermination
from scheduler.lifecycle import Failure, Outcome, leaves_warm_pool, retries_left, settle_warm_pool
from scheduler.lifecycle import PoolStatus as EnginePoolStatus

from ..models import Attempt, CapacityUnit, Job, WarmPool, WarmPoolSegment
from ..models.jobs import JobStatus
from ..models.warm_pools import PoolStatus
from . import events


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
    claimed = Attempt.objects.filter(pk=attempt.pk, outcome__isnull=True).update(
        outcome=outcome.value, stopped_at=at, status_reason=reason,
        failure=failure.value if failure else None, exit_code=exit_code,
    )
    if not claimed:
        raise AttemptAlreadyEnded(attempt.pk)
    if outcome is Outcome.SUCCEEDED:
        events.record("SUCCEEDED", job=job, time=at)
        settle(job, attempt, at, leaves=True)
        _close(job, JobStatus.SUCCEEDED, None, at)
        return job
    failed = job.failed_count + 1
    retrying = retries_left(failed, job.retry_attempts)
    if retrying:
        events.record("ATTEMPT_FAILED", job=job, time=at,
                      details={"failure": failure.value if failure else None, "retrying": True})
        settle(job, attempt, at, leaves=False)
        Job.objects.filter(pk=job.pk).update(
            status=JobStatus.RUNNABLE, failed_count=failed, instances=[], pending_code=None,
            stopped_at=at,
        )
    else:
        events.record("FAILED", job=job, time=at, details={"reason": reason})
        settle(job, attempt, at, leaves=leaves_warm_pool(outcome, failure, False, True))
        Job.objects.filter(pk=job.pk).update(failed_count=failed)
        _close(job, JobStatus.FAILED, reason, at)
    job.refresh_from_db()
    return job


def _close(job: Job, status: JobStatus, reason: str | None, at: datetime) -> None:
    Job.objects.filter(pk=job.pk).update(
        status=status, status_reason=reason, instances=[], pending_code=None, stopped_at=at,
    )


def settle(job: Job, attempt: Attempt, at: datetime, *, leaves: bool) -> None:
    """What the job's instances become as its attempt ends (docs/semantics.md 6)."""
    reused = attempt.warm_pool if attempt.warm_start else None
    if reused is None and not (leaves and job.keep_alive_seconds > 0):
        return
    unit = CapacityUnit.objects.filter(name=job.instance_type).first()
    available = sum(WarmPool.objects.filter(
        instance_type=job.instance_type, status=PoolStatus.AVAILABLE
    ).values_list("instance_count", flat=True))
    chain_start = reused.chain_started_at if reused else (attempt.started_at or at)
    settlement = settle_warm_pool(
        keep_alive_seconds=job.keep_alive_seconds,
        leaves_pool=leaves,
        reused_pool=reused is not None,
        ended_at=at.timestamp(),
        chain_started_at=chain_start.timestamp(),
        max_lifetime_seconds=settings.QUOTAWEB["WARM_POOL_MAX_LIFETIME_SECONDS"],
        available_on_unit=available,
        instance_count=job.instance_count,
        warm_pool_limit=unit.warm_pool_limit if unit else 0,
    )
    if settlement.status is EnginePoolStatus.AVAILABLE:
        pool = reused or _new_pool(job, attempt, chain_start)
        expires_at = at + timedelta(seconds=job.keep_alive_seconds)
        WarmPool.objects.filter(pk=pool.pk).update(
            status=PoolStatus.AVAILABLE, owner=job, available_since=at, expires_at=expires_at,
        )
        WarmPoolSegment.objects.update_or_create(job=job, defaults={
            "pool": pool, "status": PoolStatus.AVAILABLE,
            "keep_alive_seconds": job.keep_alive_seconds, "available_since": at,
            "expires_at": expires_at, "termination_reason": None,
        })
        events.record("WARM_POOL_AVAILABLE", job=job, time=at,
                      details={"expires_at": _iso(expires_at)})
    elif settlement.status is EnginePoolStatus.TERMINATED:
        reason = settlement.reason or PoolTermination.EXPIRED
        if reused is not None:
            end_pool_instances(reused, reason, at)
        WarmPoolSegment.objects.update_or_create(job=job, defaults={
            "pool": reused, "status": PoolStatus.TERMINATED,
            "keep_alive_seconds": job.keep_alive_seconds, "termination_reason": reason.value,
        })
        events.record("WARM_POOL_TERMINATED", job=job, time=at,
                      details={"reason": reason.value})


def _new_pool(job: Job, attempt: Attempt, chain_start: datetime) -> WarmPool:
    return WarmPool.objects.create(
        quota_share_id=job.quota_share_id, owner=job, instance_type=job.instance_type,
        instance_count=job.instance_count, instances=attempt.instances, role=job.role,
        volume_size_gb=job.volume_size_gb, volume_kms_key_id=job.volume_kms_key_id,
        security_group_ids=job.security_group_ids, subnets=job.subnets,
        enable_network_isolation=job.enable_network_isolation,
        enable_inter_container_traffic_encryption=job.enable_inter_container_traffic_encryption,
        status=PoolStatus.AVAILABLE, chain_started_at=chain_start, host=attempt.host,
        cache_directory=_cache_directory_for(attempt),
    )


def _cache_directory_for(attempt: Attempt) -> str:
    """The cache directory the attempt ran with (the local executor made it), if any."""
    from ..executors.paths import attempt_cache_directory

    path = attempt_cache_directory(attempt)
    return str(path) if path is not None else ""


def end_pool_instances(pool: WarmPool, reason: PoolTermination, at: datetime) -> None:
    """The physical pool is gone: Terminated, and its cache directory deleted after commit."""
    WarmPool.objects.filter(pk=pool.pk).update(
        status=PoolStatus.TERMINATED, termination_reason=reason.value,
    )
    if pool.cache_directory:
        directory = Path(pool.cache_directory)
        transaction.on_commit(lambda: shutil.rmtree(directory, ignore_errors=True))


def end_available_pool(pool: WarmPool, reason: PoolTermination, at: datetime) -> None:
    """An Available pool ends: its owner's segment is Terminated and billed."""
    end_pool_instances(pool, reason, at)
    segment = WarmPoolSegment.objects.filter(job_id=pool.owner_id).first()
    if segment is not None:
        billed = (at - (segment.available_since or at)).total_seconds()
        WarmPoolSegment.objects.filter(pk=segment.pk).update(
            status=PoolStatus.TERMINATED, termination_reason=reason.value,
            retained_billable_seconds=segment.retained_billable_seconds + max(0.0, billed),
        )
    events.record("WARM_POOL_TERMINATED", job=pool.owner, time=at,
                  details={"reason": reason.value})


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")
