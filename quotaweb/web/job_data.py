"""Reading jobs, attempts and warm pools for the pages, in stable orders."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from django.utils import timezone

from scheduler.forecast import starts_in

from ..models import Attempt, Job, QuotaShare, WarmPoolSegment
from ..models.jobs import ACTIVE_STATUSES, QUEUED_STATUSES, JobStatus
from ..read_model import logs
from ..read_model.jobs import View, job_dict
from ..read_model.positions import positions
from . import grace

# How a list of jobs is grouped: what holds capacity first, then what waits, then history.
STATUS_ORDER = (JobStatus.RUNNING, JobStatus.STARTING, JobStatus.SCHEDULED,
                JobStatus.RUNNABLE, JobStatus.SUBMITTED, JobStatus.SUCCEEDED,
                JobStatus.FAILED)
RECENT_FINISHED = 50
LOG_TAIL_LINES = 200

Row = dict[str, Any]


def job_row(job: Job, position: int | None = None, stops: Mapping[int, Row] | None = None,
            waits: Mapping[int, Row] | None = None) -> Row:
    """A job's row: the job, its position and pending reason (from the representation,
    read_model.jobs); `stops` and `waits` (grace.stopping, grace.waiting) say whether it is
    stopping in a grace period, or waiting for one to end."""
    shown = job_dict(job, View(position=position), ("position", "pending_reason",
                                                    "estimated_start_at", "estimate_basis"))
    return {"job": job, "position": shown["position"], "pending": shown["pending_reason"],
            "estimate": estimate(shown["estimated_start_at"], shown["estimate_basis"]),
            "stopping": (stops or {}).get(job.pk), "waiting": (waits or {}).get(job.pk)}


def estimate(at: datetime | None, basis: str | None, now: datetime | None = None) -> Row | None:
    """A queued job's estimated start as the pages say it: {"at", "when", "basis"}, where
    `when` is "starts in about 4 min" or "start unknown"; None before the first estimate
    (docs/semantics.md 8)."""
    if basis is None:
        return None
    if at is None:
        return {"at": None, "when": "start unknown", "basis": basis}
    return {"at": at, "when": starts_in((at - (now or timezone.now())).total_seconds()),
            "basis": basis}



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
    places = positions(listed)
    now = timezone.now()
    stops = grace.stopping(now, [job.pk for job in listed])
    waits = grace.waiting(now, listed)
    return [job_row(job, places.get(job.pk), stops, waits) for job in listed]


def share_jobs(share: QuotaShare) -> dict[str, list[Row]]:
    """A share's jobs by status: every open one, and the RECENT_FINISHED latest finished."""
    rows = open_jobs(share)
    finished = Job.objects.select_related("quota_share").filter(
        quota_share=share, status__in=(JobStatus.SUCCEEDED, JobStatus.FAILED)
    ).order_by("-id")[:RECENT_FINISHED]
    rows += [job_row(job) for job in finished]
    grouped: dict[str, list[Row]] = {status.value: [] for status in STATUS_ORDER}
    for row in rows:
        grouped[row["job"].status].append(row)
    return {status: items for status, items in grouped.items() if items}


def attempts(job: Job) -> list[Attempt]:
    return list(Attempt.objects.select_related("preempted_by__quota_share", "warm_pool")
                .filter(job=job).order_by("number"))


def segment(job: Job) -> WarmPoolSegment | None:
    return WarmPoolSegment.objects.select_related("reused_by", "pool").filter(job=job).first()


def log_tail(job: Job, lines: int = LOG_TAIL_LINES) -> list[logs.LogLine]:
    """The job's last `lines` log lines, across its attempts, oldest first."""
    return logs.log_tail(job.pk, lines)
