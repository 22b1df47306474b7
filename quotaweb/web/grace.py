"""The preemption grace period, as the pages show it (docs/semantics.md, Grace).

A victim preempted while RUNNING is sent SIGTERM at its preemption and killed at the end
of its grace period: its attempt is PREEMPTED from the preemption on (the capacity is the
preemptor's), but its process is still stopping until `kill_at`.  Meanwhile the
preemptor stays SCHEDULED, its attempt's `starting_at` at the end of that grace.  These
helpers read both sides so that the job pages, the job tables, the fleet Gantt and the
timelines can say who is stopping, who waits for whom, and until when.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from ..models import Attempt, Job
from ..models.jobs import JobStatus, Outcome

Row = dict[str, Any]
HISTORY = timedelta(hours=2)
MAX_PERIODS = 2_000


def _graced() -> Any:
    """Preempted attempts that were given a grace period (a victim that was not RUNNING
    stops at once: its kill_at is its preemption)."""
    return (Attempt.objects.select_related("job__quota_share", "preempted_by")
            .filter(outcome=Outcome.PREEMPTED, kill_at__isnull=False,
                    stopped_at__isnull=False))


def _seconds_left(until: datetime | None, now: datetime | None) -> int | None:
    if until is None or now is None:
        return None
    return max(0, round((until - now).total_seconds()))


def stopping_row(attempt: Attempt, now: datetime | None = None) -> Row:
    """A victim's stop: SIGTERM at `since`, SIGKILL at `until`, for `preempted_by`."""
    return {
        "seconds_left": _seconds_left(attempt.kill_at, now),
        "job_id": attempt.job_id, "job_name": attempt.job.name,
        "quota_share": attempt.job.quota_share.name,
        "capacity_unit": attempt.job.instance_type, "instances": list(attempt.instances),
        "since": attempt.stopped_at, "until": attempt.kill_at, "kind": attempt.kind,
        "preempted_by_id": attempt.preempted_by_id,
        "preempted_by_name": attempt.preempted_by.name if attempt.preempted_by else "?",
    }


def stopping(now: datetime, job_ids: Iterable[int] | None = None) -> dict[int, Row]:
    """job id → its stop, for the victims still in their grace period at `now`."""
    attempts = _graced().filter(kill_at__gt=now)
    if job_ids is not None:
        attempts = attempts.filter(job_id__in=list(job_ids))
    return {a.job_id: stopping_row(a, now) for a in attempts.order_by("kill_at", "id")}


def grace_periods(now: datetime, since: datetime | None = None) -> list[Row]:
    """Every grace period that overlaps [since, now] (the last HISTORY by default),
    oldest first: what the timelines and the Gantt draw as "stopping"."""
    start = since or now - HISTORY
    attempts = [a for a in _graced().filter(kill_at__gt=start, stopped_at__lte=now)
                .order_by("-stopped_at", "-id")[:MAX_PERIODS] if a.kill_at > a.stopped_at]
    return [stopping_row(a) for a in reversed(attempts)]


def waiting(now: datetime, jobs: Iterable[Job]) -> dict[int, Row]:
    """job id → what a SCHEDULED preemptor waits for: the victims still stopping, and
    when their grace ends (its attempt's starting_at)."""
    scheduled = [job.pk for job in jobs if job.status == JobStatus.SCHEDULED]
    if not scheduled:
        return {}
    starts = dict(Attempt.objects.filter(
        job_id__in=scheduled, outcome__isnull=True, starting_at__gt=now,
    ).values_list("job_id", "starting_at"))
    if not starts:
        return {}
    victims: dict[int, list[Row]] = defaultdict(list)
    for attempt in _graced().filter(preempted_by_id__in=list(starts), kill_at__gt=now
                                    ).order_by("job__name", "job_id"):
        victims[attempt.preempted_by_id].append(stopping_row(attempt))
    return {job_id: {"until": until, "seconds_left": _seconds_left(until, now),
                     "victims": victims.get(job_id, [])}
            for job_id, until in starts.items()}
