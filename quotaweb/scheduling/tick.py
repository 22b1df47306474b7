"""One scheduling cycle through the real shell: the entry point that Celery beat, the
`run_scheduler` loop and the embedded server all call."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from scheduler import CycleResult, schedule

from ..models import CycleRecord, CycleTotals, SchedulerState
from . import events, transitions, usage
from .apply import StaleSnapshot, apply_decisions
from .lock import cycle_lock
from .snapshot import load_snapshot

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CycleReport:
    started_at: datetime
    load_ms: float
    plan_ms: float
    apply_ms: float
    result: CycleResult
    to_launch: list[int]

    @property
    def total_ms(self) -> float:
        return self.load_ms + self.plan_ms + self.apply_ms


def run_cycle(
    now: datetime | None = None,
    *,
    after_commit: Callable[[], object] | None = None,
) -> CycleReport | None:
    """Run one cycle if no other is running; None when another holds the lock.

    Steps: time-driven transitions; load the snapshot; the engine plans; the decisions,
    their events and the usage samples are applied in one transaction; then
    `after_commit` (the broadcaster) runs.  A StaleSnapshot rolls everything back and the
    next cycle decides again.
    """
    with cycle_lock() as held:
        if not held:
            return None
        now = now or timezone.now()
        to_launch = transitions.advance(now)
        started = time.perf_counter()
        loaded = load_snapshot(now)
        loaded_at = time.perf_counter()
        result = schedule(loaded.snapshot)
        planned_at = time.perf_counter()
        try:
            with transaction.atomic():
                events.lock_changes()
                apply_decisions(result, now)
                usage.record_changes(now)
                applied_at = time.perf_counter()
                report = CycleReport(now, 1000 * (loaded_at - started),
                                     1000 * (planned_at - loaded_at),
                                     1000 * (applied_at - planned_at), result, to_launch)
                _record(report, loaded.job_count)
        except StaleSnapshot as stale:
            log.info("cycle at %s rolled back: %s changed meanwhile", now, stale)
            return None
    if after_commit is not None:
        after_commit()
    return report


def _record(report: CycleReport, jobs: int) -> None:
    SchedulerState.objects.update_or_create(id=1, defaults={
        "last_cycle_at": report.started_at, "last_cycle_ms": round(report.total_ms, 3),
    })
    CycleRecord.objects.create(
        started_at=report.started_at, load_ms=report.load_ms, plan_ms=report.plan_ms,
        apply_ms=report.apply_ms, decisions=len(report.result.decisions), jobs=jobs,
    )
    # total_ms sums like the SQL over the record did: (load_ms + plan_ms) + apply_ms.
    CycleTotals.add(report.total_ms)
