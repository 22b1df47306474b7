"""A period of recorded history as a scenario document (docs/scenario-format.md), for the
what-if replay (quotaweb.services.what_if).

What is replayed, at its real second from the period's start (rounded up to a whole
second, as a cycle at that second would first see it):

- each job submitted in the period, as it was submitted (Job.submitted_priority and
  submitted_keep_alive_seconds: later changes are replayed as their own actions), with its
  real work: `duration_seconds` for a simulated job, the RUNNING time of its successful
  attempt (else its longest) for a command;
- PRIORITY_UPDATED, TERMINATED and WARM_POOL_UPDATED events, in event (commit) order;
- jobs still waiting or running when the period starts are submitted at its start, with
  the work they had left.

The configuration is today's: SHARE_UPDATED and CAPACITY_UPDATED events name the fields a
change set, not the values before it, so a change recorded after the period's start is
reported in `notes` rather than guessed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q

from scheduler.events import EventType
from scheduler.lifecycle import Outcome

from ..models import Attempt, CapacityUnit, Event, Job, QuotaShare
from .configuration import SHARE_DELETED_REASON
from .errors import ValidationFailed

# One request replays at most this much: a week of history and 2,000 jobs keep one
# simulation to a few seconds on one core (docs/api.md, What-if).
MAX_PERIOD = timedelta(days=7)
MAX_JOBS = 2000

MATCH_FIELDS = (
    "role", "volume_size_gb", "volume_kms_key_id", "security_group_ids", "subnets",
    "enable_network_isolation", "enable_inter_container_traffic_encryption",
)


@dataclass
class RecordedHistory:
    """The scenario document of a period, and what the replay could not reproduce."""

    start: datetime
    end: datetime
    document: dict[str, Any]
    notes: list[str] = field(default_factory=list)


def check_period(start: datetime, end: datetime) -> None:
    if end <= start:
        raise ValidationFailed({"end": ["The end of the period must come after its start."]})
    if end - start > MAX_PERIOD:
        raise ValidationFailed({"start": [f"A what-if covers at most {MAX_PERIOD.days} days."]})


def recorded_history(start: datetime, end: datetime) -> RecordedHistory:
    """The period [start, end) as a scenario; ConfigurationError when it is too long or
    holds more than MAX_JOBS jobs."""
    check_period(start, end)
    jobs = list(_jobs_in(start, end))
    if len(jobs) > MAX_JOBS:
        raise ValidationFailed({"start": [
            f"The period holds {len(jobs)} jobs; a what-if replays at most {MAX_JOBS}. "
            "Choose a shorter period."]})
    history = RecordedHistory(start, end, {})
    shares = _shares()
    names = {share["name"] for share in shares}
    replayed = [job for job in jobs if job.quota_share.name in names]
    if len(replayed) < len(jobs):
        history.notes.append(f"{len(jobs) - len(replayed)} jobs of deleted quota shares "
                             "are left out.")
    running = _attempts_running_at(start, replayed)
    actions = [_submission(job, start, running.get(job.pk), history) for job in replayed]
    actions += _changes(start, end, {job.pk: replay_name(job) for job in replayed})
    actions.sort(key=lambda action: action.pop("order"))
    history.document = {
        "name": f"recorded {start.isoformat()} to {end.isoformat()}",
        "tick_seconds": 1,
        "until": math.ceil((end - start).total_seconds()),
        "settings": {
            "preemption_grace_seconds": settings.QUOTAWEB["PREEMPTION_GRACE_SECONDS"],
            "warm_pool_max_lifetime_seconds":
                settings.QUOTAWEB["WARM_POOL_MAX_LIFETIME_SECONDS"],
        },
        "capacity": _capacity(),
        "quota_shares": shares,
        "actions": actions,
    }
    history.notes += _configuration_changes(start)
    return history


def replay_name(job: Job) -> str:
    """A job's name in the replay: live names may repeat, scenario names may not, so the
    id follows the name (which is cut to keep within 128 characters)."""
    return f"{job.name[:110]}_{job.pk}"


def _jobs_in(start: datetime, end: datetime) -> Any:
    """Jobs submitted in the period, and those submitted before it that had not ended."""
    carried = Q(created_at__lt=start) & (Q(stopped_at__isnull=True) | Q(stopped_at__gt=start))
    return (Job.objects.select_related("quota_share").prefetch_related("attempts")
            .filter(Q(created_at__gte=start, created_at__lt=end) | carried).order_by("id"))


def _second(start: datetime, moment: datetime) -> int:
    return max(0, math.ceil((moment - start).total_seconds()))


def _attempts_running_at(start: datetime, jobs: list[Job]) -> dict[int, Attempt]:
    early = [job.pk for job in jobs if job.created_at < start]
    open_at_start = Attempt.objects.filter(
        job_id__in=early, started_at__lt=start).filter(
        Q(stopped_at__isnull=True) | Q(stopped_at__gt=start))
    return {attempt.job_id: attempt for attempt in open_at_start}


def _submission(job: Job, start: datetime, running: Attempt | None,
                history: RecordedHistory) -> dict[str, Any]:
    work = _work(job, history)
    carried = job.created_at < start
    if running is not None and running.started_at is not None:
        # The work it had left; a checkpoint is not recorded, so none is assumed.
        work = max(1, work - int((start - running.started_at).total_seconds()))
    body: dict[str, Any] = {
        "name": replay_name(job), "quota_share": job.quota_share.name,
        "priority": job.priority if carried or job.submitted_priority is None
        else job.submitted_priority,
        "instance_type": job.instance_type, "instance_count": job.instance_count,
        "keep_alive_seconds": job.keep_alive_seconds
        if carried or job.submitted_keep_alive_seconds is None
        else job.submitted_keep_alive_seconds,
        "retry_attempts": job.retry_attempts,
        "max_runtime_seconds": job.max_runtime_seconds,
        "duration_seconds": work,
        **{name: getattr(job, name) for name in MATCH_FIELDS},
    }
    if job.preemption_retries_before_termination is not None:
        body["preemption_retries_before_termination"] = \
            job.preemption_retries_before_termination
    at = 0 if carried else _second(start, job.created_at)
    # Submissions come before the changes recorded in the same second: a job is named
    # after its submission, and its SUBMITTED event precedes its changes.
    return {"at": at, "submit": body, "order": (at, 0, job.pk)}


def _work(job: Job, history: RecordedHistory) -> int:
    """The job's work: its duration when simulated, its recorded runtime when a command."""
    if job.duration_seconds is not None:
        return max(1, job.duration_seconds)
    runtimes = [(a.outcome, (a.stopped_at - a.started_at).total_seconds())
                for a in job.attempts.all()  # prefetched: one query for every job
                if a.started_at is not None and a.stopped_at is not None]
    succeeded = [seconds for outcome, seconds in runtimes if outcome == Outcome.SUCCEEDED]
    if succeeded:
        return max(1, math.ceil(succeeded[-1]))
    if runtimes:
        history.notes.append(f"{replay_name(job)} never succeeded: its longest recorded "
                             "runtime is replayed as its work.")
        return max(1, math.ceil(max(seconds for _, seconds in runtimes)))
    history.notes.append(f"{replay_name(job)} never ran: its max_runtime_seconds is "
                         "replayed as its work.")
    return max(1, job.max_runtime_seconds)


def _changes(start: datetime, end: datetime, names: dict[int, str]) -> list[dict[str, Any]]:
    """Priority changes, terminations and keep-alive changes of the replayed jobs."""
    kinds = (EventType.PRIORITY_UPDATED, EventType.TERMINATED, EventType.WARM_POOL_UPDATED)
    recorded = Event.objects.filter(time__gte=start, time__lt=end, type__in=kinds,
                                    job_id__in=list(names)).order_by("id")
    actions = []
    for event in recorded:
        name, at = names[event.job_id], _second(start, event.time)
        if event.type == EventType.PRIORITY_UPDATED:
            action: dict[str, Any] = {"update": {"job": name,
                                                 "priority": event.details["priority"]}}
        elif event.type == EventType.TERMINATED:
            if event.details.get("reason") == SHARE_DELETED_REASON:
                continue  # the share is not in today's configuration either
            action = {"terminate": {"job": name, "reason": event.details.get("reason") or ""}}
        else:
            action = {"update_keep_alive": {
                "job": name, "keep_alive_seconds": event.details["keep_alive_seconds"]}}
        actions.append({"at": at, **action, "order": (at, 1, event.pk)})
    return actions


def today_configuration() -> dict[str, Any]:
    """Capacity and live quota shares in the scenario format: what a replay starts from."""
    return {"capacity": _capacity(), "quota_shares": _shares()}


def _capacity() -> list[dict[str, Any]]:
    return [{"capacity_unit": unit.name, "max_capacity": unit.max_capacity,
             "warm_pool_limit": unit.warm_pool_limit,
             "cold_start_seconds": unit.cold_start_seconds,
             "warm_start_seconds": unit.warm_start_seconds}
            for unit in CapacityUnit.objects.order_by("name")]


def _shares() -> list[dict[str, Any]]:
    shares = []
    for share in QuotaShare.live.prefetch_related("capacity_limits").order_by("name"):
        row: dict[str, Any] = {
            "name": share.name, "sharing_strategy": share.sharing_strategy,
            "capacity_limits": [{"capacity_unit": limit.capacity_unit,
                                 "max_capacity": limit.max_capacity}
                                for limit in share.capacity_limits.all()],
            "in_share_preemption": share.in_share_preemption, "state": share.state,
            "max_keep_alive_seconds": share.max_keep_alive_seconds,
        }
        if share.borrow_limit is not None:
            row["borrow_limit"] = share.borrow_limit
        shares.append(row)
    return shares


def _configuration_changes(start: datetime) -> list[str]:
    changes = Event.objects.filter(
        time__gt=start, type__in=(EventType.SHARE_UPDATED, EventType.CAPACITY_UPDATED,
                                  EventType.SHARE_DELETED)).order_by("id")
    count = changes.count()
    if not count:
        return []
    first = changes.first()
    assert first is not None
    what = first.quota_share or first.details.get("capacity_unit")
    return [f"The configuration changed {count} time{'s' * (count > 1)} since the period "
            f"started (first {first.type} of {what} at {first.time.isoformat()}); the "
            "replay uses today's configuration throughout."]
