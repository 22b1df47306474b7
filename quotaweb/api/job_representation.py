"""The Job of docs/api.md, built for any number of jobs in a fixed number of queries: the jobs
with their share, submitter and warm-pool segment (one query), their attempts (one),
the positions of the RUNNABLE ones (one), and the shares the reader belongs to (one)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import F, Prefetch, Q, QuerySet, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from ..models import Attempt, Job
from ..models.jobs import Executor, JobStatus, Outcome
from ..models.warm_pools import WarmPoolSegment
from ..realtime.serializers import pending_reason
from ..services.billing import segment_billable_seconds
from ..services.permissions import is_admin

RECENT_PREEMPTIONS = 5


def job_rows() -> QuerySet[Job]:
    return (
        Job.objects.select_related("quota_share", "submitted_by", "warm_pool_segment")
        .prefetch_related(Prefetch("attempts", queryset=Attempt.objects.order_by("number")))
    )


class Reader:
    """Who reads: administrators and the members of a job's share see its secrets."""

    def __init__(self, user: Any) -> None:
        self.admin = is_admin(user)
        self.shares: set[int] = set() if self.admin else set(
            user.quota_shares.values_list("id", flat=True))

    @classmethod
    def of_share(cls, share_id: int) -> Reader:
        """A reader known to belong to `share_id` (or to administer it), without a query."""
        reader = cls.__new__(cls)
        reader.admin = False
        reader.shares = {share_id}
        return reader

    def sees_secrets(self, job: Job) -> bool:
        return self.admin or job.quota_share_id in self.shares


# Positions ----------------------------------------------------------------------------


def position_of(job: Job) -> int | None:
    """1 + the RUNNABLE jobs of its share ahead of it in (priority desc, id asc) order."""
    if job.status != JobStatus.RUNNABLE:
        return None
    ahead = Job.objects.filter(
        Q(priority__gt=job.priority) | Q(priority=job.priority, id__lt=job.id),
        quota_share_id=job.quota_share_id, status=JobStatus.RUNNABLE)
    return 1 + ahead.count()


def positions(jobs: Sequence[Job]) -> dict[int, int]:
    """Positions of the RUNNABLE jobs among `jobs`, in one query: a window over the
    RUNNABLE jobs of their shares, then the wanted rows picked from it (picking them in
    the same WHERE would rank them among themselves only)."""
    wanted = [job.id for job in jobs if job.status == JobStatus.RUNNABLE]
    if not wanted:
        return {}
    shares = sorted({job.quota_share_id for job in jobs if job.status == JobStatus.RUNNABLE})
    ranked = Job.objects.filter(status=JobStatus.RUNNABLE, quota_share_id__in=shares).annotate(
        queue_position=Window(RowNumber(), partition_by=[F("quota_share_id")],
                              order_by=[F("priority").desc(), F("id").asc()])
    ).values("id", "queue_position")
    sql, params = ranked.query.sql_with_params()
    marks = ", ".join(["%s"] * len(wanted))
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT "id", "queue_position" FROM ({sql}) ranked WHERE "id" IN ({marks})',
                       [*params, *wanted])
        return {row[0]: row[1] for row in cursor.fetchall()}


# The representation -------------------------------------------------------------------


def job_dicts(jobs: Sequence[Job], reader: Reader) -> list[dict[str, Any]]:
    now = timezone.now()
    places = positions(jobs)
    return [job_dict(job, reader, places.get(job.id), now) for job in jobs]


def single_job_dict(job: Job, reader: Reader) -> dict[str, Any]:
    return job_dict(job, reader, position_of(job), timezone.now())


def new_job_dict(job: Job) -> dict[str, Any]:
    """A job its submitter has just created, written without reading it back: a member or
    an administrator (who alone may submit) sees its secrets, and it has no attempt and
    no warm pool yet.  One query, for its position."""
    return job_dict(job, Reader.of_share(job.quota_share_id), position_of(job),
                    timezone.now(), fresh=True)


def job_dict(job: Job, reader: Reader, position: int | None, now: datetime, *,
             fresh: bool = False) -> dict[str, Any]:
    secrets = reader.sees_secrets(job)
    attempts = [] if fresh else list(job.attempts.all())
    runnable = job.status == JobStatus.RUNNABLE
    return {
        "id": job.id,
        "name": job.name,
        "quota_share": job.quota_share.name,
        "priority": job.priority,
        "status": job.status,
        "status_reason": job.status_reason,
        "pending_reason": pending_reason(job),
        "position": position if runnable else None,
        "instance_type": job.instance_type,
        "instance_count": job.instance_count,
        "created_at": job.created_at,
        "scheduled_at": job.scheduled_at,
        "started_at": job.started_at,
        "stopped_at": job.stopped_at,
        "attempts": [attempt_dict(attempt) for attempt in attempts],
        "preemption_summary": preemption_summary(job, attempts),
        "warm_pool": None if fresh else warm_pool_dict(_segment(job), now),
        **submitted_fields(job, secrets),
    }


def submitted_fields(job: Job, secrets: bool) -> dict[str, Any]:
    local = job.executor == Executor.LOCAL
    return {
        "keep_alive_seconds": job.keep_alive_seconds,
        "role": job.role,
        "volume_size_gb": job.volume_size_gb,
        "volume_kms_key_id": job.volume_kms_key_id,
        "security_group_ids": job.security_group_ids,
        "subnets": job.subnets,
        "enable_network_isolation": job.enable_network_isolation,
        "enable_inter_container_traffic_encryption": job.enable_inter_container_traffic_encryption,
        "retry_attempts": job.retry_attempts,
        "preemption_retries_before_termination": job.preemption_retries_before_termination,
        "max_runtime_seconds": job.max_runtime_seconds,
        "executor": job.executor,
        "command": job.command if secrets and local else None,
        "environment": job.environment if secrets else None,
        "duration_seconds": job.duration_seconds,
        "client_token": job.client_token if secrets else None,
        "submitted_by": job.submitted_by.get_username() if job.submitted_by else None,
        "preempted_count": job.preempted_count,
        "failed_count": job.failed_count,
    }


def attempt_dict(attempt: Attempt) -> dict[str, Any]:
    return {
        "number": attempt.number,
        "scheduled_at": attempt.scheduled_at,
        "started_at": attempt.started_at,
        "stopped_at": attempt.stopped_at,
        "outcome": attempt.outcome,
        "borrowed_instances": attempt.borrowed_instances,
        "warm_start": attempt.warm_start,
        "status_reason": attempt.status_reason,
        "failure": attempt.failure,
        "kind": attempt.kind,
        "preempted_by": attempt.preempted_by_id,
    }


def preemption_summary(job: Job, attempts: Iterable[Attempt]) -> dict[str, Any]:
    preempted = [a for a in attempts if a.outcome == Outcome.PREEMPTED]
    recent = sorted(preempted, key=lambda a: a.number, reverse=True)[:RECENT_PREEMPTIONS]
    return {
        "preempted_attempt_count": max(job.preempted_count, len(preempted)),
        "recent_preempted_attempts": [
            {"started_at": a.started_at, "stopped_at": a.stopped_at, "kind": a.kind,
             "preempted_by": a.preempted_by_id, "status_reason": a.status_reason}
            for a in recent
        ],
    }


def warm_pool_dict(segment: WarmPoolSegment | None, now: datetime) -> dict[str, Any] | None:
    """A job's segment of a warm pool (docs/semantics.md 6); an Available one is billed up
    to now."""
    if segment is None:
        return None
    return {
        "status": segment.status,
        "keep_alive_seconds": segment.keep_alive_seconds,
        "expires_at": segment.expires_at,
        "retained_billable_seconds": billable_seconds(segment, now),
        "reused_by": segment.reused_by_id,
        "termination_reason": segment.termination_reason,
    }


def billable_seconds(segment: WarmPoolSegment, now: datetime) -> float:
    """The job's segment (services.billing, the one computation)."""
    return segment_billable_seconds(segment, now)


def _segment(job: Job) -> WarmPoolSegment | None:
    try:
        return job.warm_pool_segment
    except WarmPoolSegment.DoesNotExist:
        return None
