"""The one representation of a job (docs/api.md, Job), from which every reader takes what
it shows: the API the whole of it, the websocket its summary (SUMMARY_FIELDS), the
pages its position and pending reason.

A representation is built field by field from FIELDS, and only the fields asked for are
read, so a consumer that loads a row with `.only(...)` (the websocket's summary) never
touches a deferred column.  A list of any length costs a fixed number of queries: the
jobs with their share, submitter and warm-pool segment (one), their attempts (one), the
positions of the RUNNABLE ones (one), and the shares the reader belongs to (one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Prefetch, QuerySet
from django.utils import timezone

from scheduler.decisions import PendingReason

from ..models import Attempt, Job
from ..models.jobs import ACTIVE_STATUSES, JobStatus, Outcome
from ..models.warm_pools import WarmPoolSegment
from ..services.billing import segment_billable_seconds
from ..services.permissions import is_admin
from .positions import position, positions
from .times import with_iso_times

RECENT_PREEMPTIONS = 5


def job_rows() -> QuerySet[Job]:
    """Jobs as the whole representation reads them."""
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

    def sees_secrets(self, job: Job) -> bool:
        return self.admin or job.quota_share_id in self.shares


@dataclass(frozen=True, slots=True)
class View:
    """What a representation depends on besides the row: whether the reader sees the
    job's secrets, its queue position (read_model.positions), the time an Available warm
    pool is billed up to, and whether the job was just created (no attempt, no pool, so
    nothing more to read)."""

    secrets: bool = False
    position: int | None = None
    now: datetime = field(default_factory=lambda: timezone.now())
    fresh: bool = False


# The fields ---------------------------------------------------------------------------


def pending_reason(job: Job) -> dict[str, str] | None:
    """Why a RUNNABLE job waits, as {code, message}; None for any other job."""
    if job.status != JobStatus.RUNNABLE or not job.pending_code:
        return None
    try:
        message = PendingReason(job.pending_code).message
    except ValueError:  # a code this version does not know: show it, without a sentence
        message = job.pending_code
    return {"code": job.pending_code, "message": message}


# An attempt's fields as stored, in docs/api.md's order; `preempted_by` (the preemptor's id)
# comes last.
ATTEMPT_COLUMNS = ("number", "scheduled_at", "started_at", "stopped_at", "outcome",
                   "borrowed_instances", "warm_start", "status_reason", "failure", "kind")


def attempt_dict(attempt: Attempt) -> dict[str, Any]:
    return {**{name: getattr(attempt, name) for name in ATTEMPT_COLUMNS},
            "preempted_by": attempt.preempted_by_id}


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


def segment_dict(segment: WarmPoolSegment | None, now: datetime) -> dict[str, Any] | None:
    """A job's segment of a warm pool (docs/semantics.md 6); an Available one is billed up
    to now (services.billing)."""
    if segment is None:
        return None
    return {
        "status": segment.status,
        "keep_alive_seconds": segment.keep_alive_seconds,
        "expires_at": segment.expires_at,
        "retained_billable_seconds": segment_billable_seconds(segment, now),
        "reused_by": segment.reused_by_id,
        "termination_reason": segment.termination_reason,
    }


def _segment(job: Job) -> WarmPoolSegment | None:
    try:
        return job.warm_pool_segment
    except WarmPoolSegment.DoesNotExist:
        return None


def _attempts(job: Job, view: View) -> list[Attempt]:
    return [] if view.fresh else list(job.attempts.all())


def _queued(job: Job) -> bool:
    return job.status in (JobStatus.SUBMITTED, JobStatus.RUNNABLE)


def _secret(name: str) -> Callable[[Job, View], Any]:
    return lambda job, view: getattr(job, name) if view.secrets else None


def _plain(name: str) -> Callable[[Job, View], Any]:
    return lambda job, view: getattr(job, name)


# Every field of docs/api.md's Job, in its order, and how each is read.
FIELDS: dict[str, Callable[[Job, View], Any]] = {
    "id": _plain("id"),
    "name": _plain("name"),
    "quota_share": lambda job, view: job.quota_share.name,
    "priority": _plain("priority"),
    "status": _plain("status"),
    "status_reason": _plain("status_reason"),
    "pending_reason": lambda job, view: pending_reason(job),
    "position": lambda job, view: view.position if job.status == JobStatus.RUNNABLE else None,
    "estimated_start_at": lambda job, view: job.estimated_start_at if _queued(job) else None,
    "estimate_basis": lambda job, view: (job.estimate_basis or None) if _queued(job) else None,
    "instance_type": _plain("instance_type"),
    "instance_count": _plain("instance_count"),
    "created_at": _plain("created_at"),
    "scheduled_at": _plain("scheduled_at"),
    "started_at": _plain("started_at"),
    "stopped_at": _plain("stopped_at"),
    "attempts": lambda job, view: [attempt_dict(a) for a in _attempts(job, view)],
    "preemption_summary": lambda job, view: preemption_summary(job, _attempts(job, view)),
    "warm_pool": lambda job, view: None if view.fresh else segment_dict(_segment(job), view.now),
    "keep_alive_seconds": _plain("keep_alive_seconds"),
    "role": _plain("role"),
    "volume_size_gb": _plain("volume_size_gb"),
    "volume_kms_key_id": _plain("volume_kms_key_id"),
    "security_group_ids": _plain("security_group_ids"),
    "subnets": _plain("subnets"),
    "enable_network_isolation": _plain("enable_network_isolation"),
    "enable_inter_container_traffic_encryption":
        _plain("enable_inter_container_traffic_encryption"),
    "retry_attempts": _plain("retry_attempts"),
    "preemption_retries_before_termination": _plain("preemption_retries_before_termination"),
    "max_runtime_seconds": _plain("max_runtime_seconds"),
    "min_runtime_seconds": _plain("min_runtime_seconds"),
    "executor": _plain("executor"),
    # A command is shown only to those who may see the job's secrets, for whichever
    # executor runs it (simulated jobs have none).
    "command": lambda job, view: (job.command or None) if view.secrets else None,
    "environment": _secret("environment"),
    "duration_seconds": _plain("duration_seconds"),
    "client_token": _secret("client_token"),
    "submitted_by": lambda job, view: job.submitted_by.get_username()
    if job.submitted_by else None,
    "preempted_count": _plain("preempted_count"),
    "failed_count": _plain("failed_count"),
}
JOB_FIELDS = tuple(FIELDS)


def job_dict(job: Job, view: View, fields: Iterable[str] = JOB_FIELDS) -> dict[str, Any]:
    """The job's representation, or the `fields` of it (in the order given)."""
    return {name: FIELDS[name](job, view) for name in fields}


# The API's reads ----------------------------------------------------------------------


def job_dicts(jobs: Sequence[Job], reader: Reader) -> list[dict[str, Any]]:
    now = timezone.now()
    places = positions(jobs)
    return [job_dict(job, View(reader.sees_secrets(job), places.get(job.pk), now))
            for job in jobs]


def single_job_dict(job: Job, reader: Reader) -> dict[str, Any]:
    return job_dict(job, View(reader.sees_secrets(job), position(job)))


def new_job_dict(job: Job) -> dict[str, Any]:
    """A job its submitter has just created, written without reading it back: a member or
    an administrator (who alone may submit) sees its secrets, and it has no attempt and
    no warm pool yet."""
    return job_dict(job, View(secrets=True, position=position(job), fresh=True))


def submitted_job_dicts(results: Sequence[tuple[Job, bool]], reader: Callable[[], Reader]
                        ) -> list[dict[str, Any]]:
    """A batch's answer, in its order: each job it created as `new_job_dict` says it, each
    repeat (created False) as `single_job_dict` does, in a fixed number of queries
    whatever the batch's length: the positions of the new RUNNABLE jobs (one, none when
    none is), and for the repeats, their rows, positions and the reader's shares
    (`reader` is asked only then)."""
    now = timezone.now()
    new = [job for job, created in results if created]
    places = positions(new)
    repeated = [job.pk for job, created in results if not created]
    again: dict[int, dict[str, Any]] = {}
    if repeated:
        rows = {job.pk: job for job in job_rows().filter(pk__in=repeated)}
        listed = [rows[pk] for pk in dict.fromkeys(repeated)]
        again = {job.pk: shown for job, shown in zip(listed, job_dicts(listed, reader()),
                                                     strict=True)}
    unplaced = View(secrets=True, now=now, fresh=True)  # most new jobs: not RUNNABLE yet
    return [(job_dict(job, unplaced if job.pk not in places else View(
        secrets=True, position=places[job.pk], now=now, fresh=True)))
            if created else again[job.pk] for job, created in results]


# The websocket's summary --------------------------------------------------------------

SUMMARY_FIELDS = ("id", "name", "quota_share", "priority", "status", "pending_reason",
                  "instance_type", "instance_count", "scheduled_at", "started_at")
# The columns the summary reads, so that its rows load nothing else.
SUMMARY_COLUMNS = ("id", "name", "quota_share__name", "priority", "status", "pending_code",
                   "instance_type", "instance_count", "scheduled_at", "started_at")


def active_job_rows() -> QuerySet[Job]:
    """Jobs that hold capacity (SCHEDULED, STARTING, RUNNING), oldest first: as many as
    the fleet has instances at most, however long the queues are."""
    return (
        Job.objects.filter(status__in=ACTIVE_STATUSES)
        .select_related("quota_share")
        .only(*SUMMARY_COLUMNS)
        .order_by("id")
    )


def job_summary_dict(job: Job) -> dict[str, Any]:
    """The light summary the websocket's snapshot carries, its times as strings."""
    return with_iso_times(job_dict(job, View(), SUMMARY_FIELDS))
