"""Reading jobs, attempts and warm pools for the pages, in stable orders."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from ..models import Attempt, Job, LogLine, QuotaShare, WarmPool, WarmPoolSegment
from ..models.jobs import ACTIVE_STATUSES, QUEUED_STATUSES, JobStatus
from ..models.warm_pools import PoolStatus
from ..realtime.serializers import pending_reason
from ..services.billing import owner_segment, pool_billable_seconds, with_chain_billing
from . import grace

# How a list of jobs is grouped: what holds capacity first, then what waits, then history.
STATUS_ORDER = (JobStatus.RUNNING, JobStatus.STARTING, JobStatus.SCHEDULED,
                JobStatus.RUNNABLE, JobStatus.SUBMITTED, JobStatus.SUCCEEDED,
                JobStatus.FAILED)
RECENT_FINISHED = 50
LOG_TAIL_LINES = 200

Row = dict[str, Any]


def queue_positions(share_ids: Iterable[int]) -> dict[int, int]:
    """job id → position (docs/semantics.md 4): 1 + the RUNNABLE jobs ahead of it in its share's
    order (priority high first, then submission order)."""
    positions: dict[int, int] = {}
    seen: dict[int, int] = {}
    for job_id, share_id in Job.objects.filter(
        quota_share_id__in=list(share_ids), status=JobStatus.RUNNABLE
    ).order_by("quota_share_id", "-priority", "id").values_list("id", "quota_share_id"):
        seen[share_id] = seen.get(share_id, 0) + 1
        positions[job_id] = seen[share_id]
    return positions


def job_row(job: Job, positions: dict[int, int], stops: Mapping[int, Row] | None = None,
            waits: Mapping[int, Row] | None = None) -> Row:
    """A job's row; `stops` and `waits` (grace.stopping, grace.waiting) say whether it is
    stopping in a grace period, or waiting for one to end."""
    return {"job": job, "position": positions.get(job.pk),
            "pending": pending_reason(job), "stopping": (stops or {}).get(job.pk),
            "waiting": (waits or {}).get(job.pk)}


def _status_rank(job: Job) -> int:
    return STATUS_ORDER.index(JobStatus(job.status))


def sort_jobs(jobs: Iterable[Job]) -> list[Job]:
    """By status group, then priority (high first), then submission order."""
    return sorted(jobs, key=lambda job: (_status_rank(job), -job.priority, job.pk))


def open_jobs(share: QuotaShare | None = None) -> list[Row]:
    """Jobs that hold or wait for capacity (all shares, or one), grouped by status."""
    jobs = Job.objects.select_related("quota_share").filter(
        status__in=(*ACTIVE_STATUSES, *QUEUED_STATUSES))
    if share is not None:
        jobs = jobs.filter(quota_share=share)
    listed = sort_jobs(jobs.order_by("id")[:500])
    positions = queue_positions({job.quota_share_id for job in listed})
    now = timezone.now()
    stops = grace.stopping(now, [job.pk for job in listed])
    waits = grace.waiting(now, listed)
    return [job_row(job, positions, stops, waits) for job in listed]


def share_jobs(share: QuotaShare) -> dict[str, list[Row]]:
    """A share's jobs by status: every open one, and the RECENT_FINISHED latest finished."""
    rows = open_jobs(share)
    finished = Job.objects.select_related("quota_share").filter(
        quota_share=share, status__in=(JobStatus.SUCCEEDED, JobStatus.FAILED)
    ).order_by("-id")[:RECENT_FINISHED]
    rows += [job_row(job, {}) for job in finished]
    grouped: dict[str, list[Row]] = {status.value: [] for status in STATUS_ORDER}
    for row in rows:
        grouped[row["job"].status].append(row)
    return {status: items for status, items in grouped.items() if items}


def attempts(job: Job) -> list[Attempt]:
    return list(Attempt.objects.select_related("preempted_by__quota_share", "warm_pool")
                .filter(job=job).order_by("number"))


def segment(job: Job) -> WarmPoolSegment | None:
    return WarmPoolSegment.objects.select_related("reused_by", "pool").filter(job=job).first()


def log_tail(job: Job, lines: int = LOG_TAIL_LINES) -> list[LogLine]:
    """The job's last `lines` log lines, across its attempts, oldest first."""
    newest = LogLine.objects.select_related("attempt").filter(attempt__job=job).order_by(
        "-attempt__number", "-number")[:lines]
    return list(reversed(list(newest)))


def pool_rows(now: datetime, *, live: bool) -> list[Row]:
    """Warm pools with their owner's segment: live ones (Available, InUse) by expiry, or
    the latest terminated ones."""
    pools: QuerySet[WarmPool] = with_chain_billing(WarmPool.objects.select_related(
        "quota_share", "owner", "owner__warm_pool_segment"))
    if live:
        pools = pools.filter(status__in=(PoolStatus.AVAILABLE, PoolStatus.IN_USE))
        ordered = sorted(pools, key=lambda p: (p.status != PoolStatus.AVAILABLE,
                                               p.expires_at or now, p.pk))
    else:
        ordered = list(pools.filter(status=PoolStatus.TERMINATED).order_by("-id")[:50])
    return [pool_row(pool, now) for pool in ordered]


def pool_row(pool: WarmPool, now: datetime) -> Row:
    """A pool's row; its billable time is that of every job's segment along its chain
    (services.billing, as the API gives it), growing while it stands Available."""
    owned = owner_segment(pool)
    available = pool.status == PoolStatus.AVAILABLE
    since = owned.available_since if owned is not None and available else None
    return {
        "pool": pool, "segment": owned,
        "keep_alive_seconds": owned.keep_alive_seconds if owned is not None else None,
        "billable_seconds": pool_billable_seconds(pool, now), "available_since": since,
        "matching": matching_attributes(pool),
    }


def matching_attributes(pool: WarmPool | Job) -> list[tuple[str, str]]:
    """The attributes a later job must match to reuse the pool (docs/semantics.md 6, Matching)."""
    return [
        ("role", pool.role or "—"),
        ("instances", f"{pool.instance_type} × {pool.instance_count}"),
        ("volume", f"{pool.volume_size_gb} GB" + (f", KMS {pool.volume_kms_key_id}"
                                                 if pool.volume_kms_key_id else "")),
        ("security groups", ", ".join(sorted(pool.security_group_ids)) or "—"),
        ("subnets", ", ".join(sorted(pool.subnets)) or "—"),
        ("network isolation", "on" if pool.enable_network_isolation else "off"),
        ("inter-container encryption",
         "on" if pool.enable_inter_container_traffic_encryption else "off"),
    ]
