"""Time-driven transitions of attempts, applied before each cycle: SCHEDULED → STARTING
when the victims' grace ends, STARTING → RUNNING after the start delay (the simulated
executor; the local executor is launched instead), the simulated executor's work ending,
and attempts whose supervisor stopped heartbeating (a platform failure)."""

from __future__ import annotations

import contextlib
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction

from scheduler.events import Running
from scheduler.lifecycle import Failure, Outcome, simulated_work_end, start_delay

from ..models import Attempt, CapacityUnit, Job
from ..models.jobs import Executor, JobStatus
from . import events
from .attempts import AttemptAlreadyEnded, finish_attempt
from .clock import to_engine

LOST_HEARTBEAT = "Lost contact with the executor (no heartbeat within the lease)."


def advance(now: datetime) -> list[int]:
    """Apply every transition due by `now`; returns the attempts the local executor should
    launch (STARTING, start delay over, not yet running)."""
    with transaction.atomic():
        events.lock_events()
        _start_scheduled(now)
        _run_simulated(now)
        _finish_simulated(now)
        _expire_leases(now)
        _expire_unclaimed(now)
        _expire_ranks(now)
        return list(
            Attempt.objects.filter(
                outcome__isnull=True, job__status=JobStatus.STARTING,
                job__executor=Executor.LOCAL, running_at__lte=now, pid__isnull=True,
            ).values_list("id", flat=True)
        )


def _units() -> dict[str, CapacityUnit]:
    return {unit.name: unit for unit in CapacityUnit.objects.all()}


def _start_scheduled(now: datetime) -> None:
    units = _units()
    due = Attempt.objects.select_related("job").filter(
        outcome__isnull=True, job__status=JobStatus.SCHEDULED, starting_at__lte=now
    )
    for attempt in due:
        unit = units.get(attempt.job.instance_type)
        delay = start_delay(unit, attempt.warm_start) if unit else 0
        running_at = attempt.starting_at + timedelta(seconds=delay)
        updated = Job.objects.filter(pk=attempt.job_id, status=JobStatus.SCHEDULED).update(
            status=JobStatus.STARTING
        )
        if updated:
            Attempt.objects.filter(pk=attempt.pk).update(running_at=running_at)


def _run_simulated(now: datetime) -> None:
    due = Attempt.objects.select_related("job__quota_share").filter(
        outcome__isnull=True, job__status=JobStatus.STARTING,
        job__executor=Executor.SIMULATED, running_at__lte=now,
    )
    for attempt in due:
        mark_running(attempt, attempt.running_at or now)


def mark_running(attempt: Attempt, at: datetime) -> bool:
    """STARTING → RUNNING (the attempt's started_at is this moment)."""
    updated = Job.objects.filter(pk=attempt.job_id, status=JobStatus.STARTING).update(
        status=JobStatus.RUNNING, started_at=at
    )
    if not updated:
        return False
    Attempt.objects.filter(pk=attempt.pk).update(started_at=at, heartbeat_at=at)
    events.emit(Running(), job=attempt.job, time=at)
    return True


def _finish_simulated(now: datetime) -> None:
    running = Attempt.objects.select_related("job__quota_share", "warm_pool").filter(
        outcome__isnull=True, job__status=JobStatus.RUNNING, job__executor=Executor.SIMULATED,
    )
    for attempt in running:
        job = attempt.job
        started = to_engine(attempt.started_at) or now.timestamp()
        end = simulated_work_end(started, job.duration_seconds or 0, job.max_runtime_seconds)
        if end.at > now.timestamp():
            continue
        at = datetime.fromtimestamp(end.at, now.tzinfo)
        try:
            finish_attempt(attempt, end.outcome, at, failure=end.failure, reason=end.reason)
        except AttemptAlreadyEnded:
            continue


def _expire_leases(now: datetime) -> None:
    """A supervisor that stopped heartbeating lost its attempts: a platform failure, so a
    vanished host frees its capacity."""
    lease = timedelta(seconds=settings.QUOTAWEB["HEARTBEAT_LEASE_SECONDS"])
    # Claimed attempts heartbeat from the claim on, so one whose host vanished while it was
    # still STARTING is caught too.
    lost = Attempt.objects.select_related("job__quota_share", "warm_pool").filter(
        outcome__isnull=True, job__status__in=[JobStatus.STARTING, JobStatus.RUNNING],
        job__executor=Executor.LOCAL, pid__isnull=False, heartbeat_at__lt=now - lease,
    )
    for attempt in lost:
        fail_on_platform(attempt, now, LOST_HEARTBEAT)


def fail_on_platform(attempt: Attempt, now: datetime, reason: str) -> None:
    """End an open attempt as a platform error (retried by the rules); one that ended
    meanwhile stays as it ended."""
    with contextlib.suppress(AttemptAlreadyEnded):
        finish_attempt(attempt, Outcome.FAILED, now, failure=Failure.PLATFORM_ERROR,
                       reason=reason)


def _expire_unclaimed(now: datetime) -> None:
    """A command attempt that no executor started within CLAIM_TIMEOUT_SECONDS of being
    due (no host declares its instances, the host is gone, or cannot isolate commands)
    fails as a platform error with the reason, instead of holding its capacity forever."""
    from ..executors.registry import why_unclaimed

    timeout = timedelta(seconds=settings.QUOTAWEB["CLAIM_TIMEOUT_SECONDS"])
    stuck = Attempt.objects.select_related("job__quota_share", "warm_pool").filter(
        outcome__isnull=True, job__status=JobStatus.STARTING, job__executor=Executor.LOCAL,
        pid__isnull=True, running_at__lt=now - timeout,
    )
    for attempt in stuck:
        seconds = int(timeout.total_seconds())
        fail_on_platform(attempt, now, f"No executor started it within {seconds} s: "
                                       f"{why_unclaimed(attempt, now)}")


def _expire_ranks(now: datetime) -> None:
    from ..executors import ranks

    ranks.expire(now)
