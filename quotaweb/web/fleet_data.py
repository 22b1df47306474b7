"""The fleet's history as Gantt bars: which instance held what, and when.

An attempt holds its instances from dispatch (scheduled_at) to its end (stopped_at; open
while it has no outcome).  A warm-pool segment holds its pool's instances from when it
became Available to its reuse or termination, read from the job's next warm-pool event
(a segment still Available is open).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q

from scheduler.events import EventType
from scheduler.lifecycle import Outcome

from ..models import Attempt, CapacityUnit, Event, WarmPoolSegment
from ..models.warm_pools import PoolStatus
from . import gantt, grace
from .ranges import TimeRange
from .usage_data import share_colours

HISTORY = timedelta(hours=2)
MAX_ATTEMPTS = 2_000
MAX_LONG_ATTEMPTS = 50_000  # a chosen range's attempts, before merging
BUCKETS = 600  # a long range's time resolution: about one pixel column
POOL_ENDS = (EventType.WARM_POOL_REUSED.value, EventType.WARM_POOL_TERMINATED.value)

Bar = dict[str, Any]


def attempt_bars(now: datetime, since: datetime | None = None,
                 limit: int = MAX_ATTEMPTS) -> list[Bar]:
    """A bar per instance of every attempt that held instances since `since` (the last
    HISTORY by default)."""
    attempts = (
        Attempt.objects.select_related("job__quota_share")
        .filter(scheduled_at__lte=now)
        .filter(Q(outcome__isnull=True) | Q(stopped_at__gte=since or now - HISTORY))
        .order_by("-scheduled_at", "-id")[:limit]
    )
    return [{
        "capacity_unit": attempt.job.instance_type, "instance": int(number),
        "quota_share": attempt.job.quota_share.name, "kind": "run",
        "start": attempt.scheduled_at,
        "end": attempt.stopped_at if attempt.outcome else None,
        "job_id": attempt.job_id, "job_name": attempt.job.name, "attempt": attempt.number,
        "outcome": attempt.outcome, "borrowed_instances": attempt.borrowed_instances,
        "instance_count": attempt.job.instance_count, "warm_start": attempt.warm_start,
    } for attempt in attempts for number in attempt.instances]


def warm_bars(now: datetime, since: datetime | None = None,
              limit: int = MAX_ATTEMPTS) -> list[Bar]:
    """A bar per instance of every warm-pool segment Available since `since` (the last
    HISTORY by default)."""
    since = since or now - HISTORY
    segments = list(
        WarmPoolSegment.objects.select_related("job__quota_share", "pool")
        .filter(available_since__isnull=False, available_since__lte=now)
        # A segment stands Available for at most the keep-alive cap (an hour) before it
        # ends, so older ones ended before the window.
        .filter(Q(status=PoolStatus.AVAILABLE)
                | Q(available_since__gte=since - timedelta(hours=1)))
        .order_by("-available_since", "-id")[:limit]
    )
    ends: dict[int, list[datetime]] = {}
    for job_id, time in Event.objects.filter(
        type__in=POOL_ENDS, job_id__in=[s.job_id for s in segments]
    ).order_by("time", "id").values_list("job_id", "time"):
        ends.setdefault(job_id, []).append(time)
    bars = []
    for segment in segments:
        start = segment.available_since
        assert start is not None
        end = None
        if segment.status != PoolStatus.AVAILABLE:
            later = [t for t in ends.get(segment.job_id, []) if t >= start]
            end = later[0] if later else (segment.expires_at or start)
            if end < since:
                continue
        instances = segment.pool.instances if segment.pool is not None else []
        bars += [{
            "capacity_unit": segment.job.instance_type, "instance": int(number),
            "quota_share": segment.job.quota_share.name, "kind": "warm",
            "start": start, "end": end, "job_id": segment.job_id,
            "job_name": segment.job.name, "outcome": segment.termination_reason
            or segment.status,
        } for number in instances]
    return bars


def stopping_bars(now: datetime, since: datetime | None = None) -> list[Bar]:
    """A thin bar per instance of every victim's grace period since `since` (the last
    HISTORY by default): its process was sent SIGTERM at the preemption and is killed at
    the end."""
    return [{
        "capacity_unit": stop["capacity_unit"], "instance": int(number),
        "quota_share": stop["quota_share"], "kind": "stopping", "start": stop["since"],
        "end": stop["until"], "job_id": stop["job_id"], "job_name": stop["job_name"],
        "preempted_by_name": stop["preempted_by_name"], "outcome": Outcome.PREEMPTED.value,
    } for stop in grace.grace_periods(now, since or now - HISTORY)
        for number in stop["instances"]]


def fleet(now: datetime, period: TimeRange | None = None) -> dict[str, Any]:
    """The fleet Gantt figure of the last HISTORY (showing the last 30 minutes), or of a
    chosen `period` (web.ranges), downsampled: bars closer than a pixel column's worth of
    time on one instance, of one share and kind, are drawn as one (gantt.merge_bars)."""
    units = list(CapacityUnit.objects.order_by("name").values("name", "max_capacity"))
    if period is None:
        bars = attempt_bars(now) + warm_bars(now) + stopping_bars(now)
        return gantt.fleet_figure(units, bars, colours=share_colours(), now=now)
    until, since = period.end, period.start
    bars = (attempt_bars(until, since, MAX_LONG_ATTEMPTS)
            + warm_bars(until, since, MAX_LONG_ATTEMPTS) + stopping_bars(until, since))
    bars = gantt.merge_bars(bars, period.seconds / BUCKETS)
    return gantt.fleet_figure(units, bars, colours=share_colours(), now=until,
                                window_seconds=period.seconds, fixed_start=since,
                                follow_now=period.follows_now)
