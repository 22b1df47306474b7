"""Plain-dict views of stored rows, as the websocket (and the API) show them.

Each `*_rows` function is the queryset a view reads: it selects the related rows the
dict needs in the same query, so a list of any length costs one query.  Each `*_dict`
function turns one row of that queryset into JSON-ready values.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db.models import OuterRef, QuerySet, Subquery
from django.utils import timezone

from scheduler.decisions import PendingReason

from ..models import CapacityLimit, Event, Job, UsageSample, WarmPool
from ..models.jobs import ACTIVE_STATUSES, JobStatus
from ..models.warm_pools import PoolStatus, WarmPoolSegment
from ..services.billing import pool_billable_seconds, with_chain_billing

FIGURES = ("limit", "in_use", "own", "borrowed", "lent", "warm", "queued")


def iso(moment: datetime | None) -> str | None:
    """ISO 8601 in UTC with a `Z`, always with microseconds so every time reads alike."""
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


# Events ---------------------------------------------------------------------------------


def event_rows() -> QuerySet[Event]:
    """Events with their job's name, in id (= commit) order."""
    return (
        Event.objects.select_related("job")
        .only("id", "time", "type", "job_id", "job__name", "quota_share", "details")
        .order_by("id")
    )


def event_dict(event: Event) -> dict[str, Any]:
    return {
        "id": event.id,
        "time": iso(event.time),
        "type": event.type,
        "job": event.job_id,
        "job_name": event.job.name if event.job is not None else None,
        "quota_share": event.quota_share,
        "details": event.details,
    }


# Usage samples --------------------------------------------------------------------------


def usage_rows() -> QuerySet[UsageSample]:
    """Usage samples with their share's name, in id (= commit) order."""
    return UsageSample.objects.select_related("quota_share").only(
        "id", "time", "quota_share__name", "capacity_unit", *FIGURES
    ).order_by("id")


def latest_usage_rows() -> QuerySet[UsageSample]:
    """The latest sample of every live share on every unit it has a limit for.

    A unit removed from a share's limits gets no more samples, so its last one is stale
    and left out; so are deleted shares.  One query: for each limit, the newest sample of
    its series is found through the (share, unit, time) index, never by scanning history.
    """
    newest = UsageSample.objects.filter(
        quota_share_id=OuterRef("quota_share_id"), capacity_unit=OuterRef("capacity_unit")
    ).order_by("-time", "-id").values("id")[:1]
    latest = CapacityLimit.objects.filter(quota_share__deleted_at__isnull=True).annotate(
        sample=Subquery(newest)
    ).values("sample")
    return usage_rows().filter(id__in=latest).order_by("quota_share__name", "capacity_unit")


def usage_dict(sample: UsageSample) -> dict[str, Any]:
    # The id lets a client drop a sample it already has (broadcasting is at-least-once).
    return {
        "id": sample.id,
        "time": iso(sample.time),
        "quota_share": sample.quota_share.name,
        "capacity_unit": sample.capacity_unit,
        **{figure: getattr(sample, figure) for figure in FIGURES},
    }


# Jobs (the light summary of the snapshot) -----------------------------------------------

JOB_SUMMARY_FIELDS = (
    "id", "name", "quota_share__name", "priority", "status", "pending_code",
    "instance_type", "instance_count", "scheduled_at", "started_at",
)


def active_job_rows() -> QuerySet[Job]:
    """Jobs that hold capacity (SCHEDULED, STARTING, RUNNING), oldest first: as many as
    the fleet has instances at most, however long the queues are."""
    return (
        Job.objects.filter(status__in=ACTIVE_STATUSES)
        .select_related("quota_share")
        .only(*JOB_SUMMARY_FIELDS)
        .order_by("id")
    )


def pending_reason(job: Job) -> dict[str, str] | None:
    """Why a RUNNABLE job waits, as {code, message}; None for any other job."""
    if job.status != JobStatus.RUNNABLE or not job.pending_code:
        return None
    try:
        message = PendingReason(job.pending_code).message
    except ValueError:  # a code this version does not know: show it, without a sentence
        message = job.pending_code
    return {"code": job.pending_code, "message": message}


def job_summary_dict(job: Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "name": job.name,
        "quota_share": job.quota_share.name,
        "priority": job.priority,
        "status": job.status,
        "pending_reason": pending_reason(job),
        "instance_type": job.instance_type,
        "instance_count": job.instance_count,
        "scheduled_at": iso(job.scheduled_at),
        "started_at": iso(job.started_at),
    }


# Warm pools -----------------------------------------------------------------------------


def live_pool_rows() -> QuerySet[WarmPool]:
    """Pools that hold instances (Available or InUse), with the owner's segment and the
    chain's billed seconds (services.billing)."""
    return (
        with_chain_billing(WarmPool.objects.filter(
            status__in=(PoolStatus.AVAILABLE, PoolStatus.IN_USE)))
        .select_related("quota_share", "owner", "owner__warm_pool_segment")
        .only(
            "id", "quota_share__name", "owner__id", "owner__name", "instance_type",
            "instance_count", "status", "expires_at", "created_at", "cache_directory",
            "owner__warm_pool_segment__keep_alive_seconds",
            "owner__warm_pool_segment__retained_billable_seconds",
            "owner__warm_pool_segment__status", "owner__warm_pool_segment__available_since",
        )
        .order_by("id")
    )


def warm_pool_dict(pool: WarmPool, *, reveal_cache: bool = False) -> dict[str, Any]:
    """A live pool; its cache directory, an absolute path on its host, only for the
    share's members and administrators (`reveal_cache`), else null."""
    segment = _segment(pool.owner)
    return {
        "id": pool.id,
        "quota_share": pool.quota_share.name,
        "instance_type": pool.instance_type,
        "instance_count": pool.instance_count,
        "status": pool.status,
        "job": pool.owner.id,
        "job_name": pool.owner.name,
        "keep_alive_seconds": segment.keep_alive_seconds if segment else None,
        "expires_at": iso(pool.expires_at),
        "created_at": iso(pool.created_at),
        # The pool's whole chain, as the API and the warm-pools page give it.
        "retained_billable_seconds": pool_billable_seconds(pool, timezone.now()),
        "cache_directory": pool.cache_directory if reveal_cache else None,
    }


def _segment(job: Job) -> WarmPoolSegment | None:
    try:
        return job.warm_pool_segment
    except WarmPoolSegment.DoesNotExist:
        return None
