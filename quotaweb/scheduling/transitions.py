"""Time-driven transitions of attempts, applied before each cycle: SCHEDULED → STARTING
when the victims' grace ends, then what every executor reports (quotaweb/executors/base.py:
the simulated executor's runs and ends, the local executor's lost hosts and unclaimed
attempts, a cluster engine's states), and the attempts due to be launched."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction

from scheduler.lifecycle import start_delay

from ..executors.backends import all_executors, launched_kinds
from ..executors.reports import apply_report, apply_reports
from ..models import Attempt, CapacityUnit, Job
from ..models.jobs import JobStatus
from . import bulk, events
from .open_attempts import open_attempts


def advance(now: datetime) -> list[int]:
    """Apply every transition due by `now`; returns the attempts to launch (STARTING,
    start delay over, not yet claimed, of an executor that is launched)."""
    with transaction.atomic():
        events.lock_changes()
        _start_scheduled(now)
        for executor in all_executors():
            steps = getattr(executor, "poll_steps", None)
            if steps is not None:  # reports in steps, each applied whole (simulated)
                for step in steps(now):
                    apply_reports(step)
                continue
            for report in executor.poll(now):
                apply_report(report)
        return list(open_attempts([JobStatus.STARTING], launched_kinds(), running_at__lte=now,
                                  pid__isnull=True).values_list("id", flat=True))


def _units() -> dict[str, CapacityUnit]:
    return {unit.name: unit for unit in CapacityUnit.objects.all()}


def _start_scheduled(now: datetime) -> None:
    """SCHEDULED → STARTING for every attempt whose victims' grace is over, in two
    statements: the jobs (still SCHEDULED), then their attempts' running_at."""
    due = list(open_attempts([JobStatus.SCHEDULED], starting_at__lte=now
                             ).select_related("job"))
    if not due:
        return
    units = _units()
    started = bulk.update_rows(Job, [(attempt.job_id, []) for attempt in due], [],
                               values={"status": JobStatus.STARTING},
                               where={"status": JobStatus.SCHEDULED})
    rows = []
    for attempt in due:
        if attempt.job_id not in started:
            continue
        unit = units.get(attempt.job.instance_type)
        delay = start_delay(unit, attempt.warm_start) if unit else 0
        rows.append((attempt.pk, [attempt.starting_at + timedelta(seconds=delay)]))
    bulk.update_rows(Attempt, rows, ["running_at"])
