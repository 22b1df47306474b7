"""The usage report: per quota share and capacity unit, what it used, lent and borrowed over
a period, the figures an organisation's chargeback is built from (docs/semantics.md, 3
Accounting and 6 Warm pools).  The report page, its CSV, `GET /api/v1/reports/usage` and
`quotaweb report` all come from `usage_report`.

- Instance-hours (own, borrowed, lent, warm, in use) integrate the share's usage samples over
  the period as step functions: a sample's figures hold until the next sample, and the
  newest sample before the period gives the level at its start.  `warm` is the instances of
  the share's Available warm pools, so its integral is the warm pools' billable
  instance-hours in the period.
- Preemptions are the PREEMPTED events in the period: suffered by the victim's share,
  caused by the preemptor's, by kind; `reclaimed_instances` adds up the instances that
  reclaims (CROSS_SHARE) took from the share.
- Jobs: submitted in the period, run (an attempt became RUNNING in it), succeeded and failed
  (ended in it).
- Wait: from submission to first dispatch, for the jobs first dispatched in the period;
  its mean and its 95th percentile (nearest rank).

A report is cut at now: the newest sample's level holds only until now, never into the
future (a "this month" report taken mid-month counts the days so far), and a period that
lies wholly in the future has no rows.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from django.db.models import Max
from django.utils import timezone

from scheduler.events import EventType

from ..models import Attempt, Event, Job, UsageSample
from ..models.jobs import JobStatus
from ..series import integrate

INTEGRATED = ("own", "borrowed", "lent", "warm", "in_use")
HOURS = {"own": "own_instance_hours", "borrowed": "borrowed_instance_hours",
         "lent": "lent_instance_hours", "warm": "warm_pool_billable_instance_hours",
         "in_use": "in_use_instance_hours"}
KINDS = ("CROSS_SHARE", "IN_SHARE")
# The report's columns, in order: the CSV's header and the API's fields.
COLUMNS = (
    "quota_share", "capacity_unit", *HOURS.values(), "jobs_submitted", "jobs_run",
    "jobs_succeeded", "jobs_failed", "preemptions_suffered_cross_share",
    "preemptions_suffered_in_share", "preemptions_caused_cross_share",
    "preemptions_caused_in_share", "reclaimed_instances", "waits_counted",
    "wait_mean_seconds", "wait_p95_seconds",
)

Key = tuple[str, str]
Row = dict[str, Any]


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """The nearest-rank percentile: the smallest value with `fraction` of them at or below."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def _samples(start: datetime, end: datetime, share: str | None) -> dict[Key, list[Row]]:
    """Each series' samples in [start, end], led by its newest one before start."""
    rows = UsageSample.objects.all()
    if share is not None:
        rows = rows.filter(quota_share__name=share)
    baseline = rows.filter(time__lt=start).values("quota_share_id", "capacity_unit") \
        .annotate(last=Max("id")).values_list("last", flat=True)
    series: dict[Key, list[Row]] = defaultdict(list)
    chosen = UsageSample.objects.filter(id__in=list(baseline)) | rows.filter(
        time__gte=start, time__lte=end)
    for name, unit, *values in chosen.order_by("time", "id").values_list(
            "quota_share__name", "capacity_unit", "time", *INTEGRATED):
        series[name, unit].append(dict(zip(("time", *INTEGRATED), values, strict=True)))
    return series


def _preemptions(start: datetime, end: datetime) -> tuple[dict[Key, dict[str, int]], ...]:
    suffered: dict[Key, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    caused: dict[Key, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    events = list(Event.objects.filter(type=EventType.PREEMPTED, time__gte=start, time__lt=end,
                                       job__isnull=False).select_related("job"))
    preemptors = dict(Job.objects.filter(
        pk__in={e.details.get("preempted_by") for e in events}
    ).values_list("id", "quota_share__name"))
    for event in events:
        kind, unit = event.details.get("kind", ""), event.job.instance_type
        suffered[event.quota_share, unit][kind] += 1
        if kind == "CROSS_SHARE":
            suffered[event.quota_share, unit]["reclaimed_instances"] += event.job.instance_count
        by_share = preemptors.get(event.details.get("preempted_by"))
        if by_share is not None:
            caused[by_share, unit][kind] += 1
    return suffered, caused


def _count(rows: Iterable[tuple[str, str]]) -> dict[Key, int]:
    counts: dict[Key, int] = defaultdict(int)
    for key in rows:
        counts[key] += 1
    return counts


def _jobs(start: datetime, end: datetime) -> dict[str, dict[Key, int]]:
    jobs = Job.objects.values_list("quota_share__name", "instance_type")
    ran = Attempt.objects.filter(started_at__gte=start, started_at__lt=end).values_list(
        "job__quota_share__name", "job__instance_type", "job_id").distinct()
    ended = jobs.filter(stopped_at__gte=start, stopped_at__lt=end)
    return {
        "jobs_submitted": _count(jobs.filter(created_at__gte=start, created_at__lt=end)),
        "jobs_run": _count((name, unit) for name, unit, _ in ran),
        "jobs_succeeded": _count(ended.filter(status=JobStatus.SUCCEEDED)),
        "jobs_failed": _count(ended.filter(status=JobStatus.FAILED)),
    }


def _waits(start: datetime, end: datetime) -> dict[Key, list[float]]:
    waits: dict[Key, list[float]] = defaultdict(list)
    for name, unit, scheduled, created in Attempt.objects.filter(
        number=1, scheduled_at__gte=start, scheduled_at__lt=end,
    ).values_list("job__quota_share__name", "job__instance_type", "scheduled_at",
                  "job__created_at"):
        waits[name, unit].append(max(0.0, (scheduled - created).total_seconds()))
    return waits


def usage_report(start: datetime, end: datetime, quota_share: str | None = None,
                 now: datetime | None = None) -> list[Row]:
    """One row per (share, unit) with usage or activity in [start, end), by share then
    unit; its fields are COLUMNS.  Only [start, min(end, now)) is counted: what has not
    happened yet is not billed."""
    end = min(end, now or timezone.now())
    if end <= start:
        return []
    series = _samples(start, end, quota_share)
    suffered, caused = _preemptions(start, end)
    counts = _jobs(start, end)
    waits = _waits(start, end)
    keys = set(series) | set(suffered) | set(caused) | set(waits)
    keys |= {key for figure in counts.values() for key in figure}
    if quota_share is not None:
        keys = {key for key in keys if key[0] == quota_share}
    rows = []
    for key in sorted(keys):
        points = series.get(key, [])
        row: Row = {"quota_share": key[0], "capacity_unit": key[1]}
        for figure, column in HOURS.items():
            row[column] = round(integrate(points, figure, start, end) / 3600, 4)
        for column, figure_counts in counts.items():
            row[column] = figure_counts.get(key, 0)
        for kind in KINDS:
            row[f"preemptions_suffered_{kind.lower()}"] = suffered.get(key, {}).get(kind, 0)
            row[f"preemptions_caused_{kind.lower()}"] = caused.get(key, {}).get(kind, 0)
        row["reclaimed_instances"] = suffered.get(key, {}).get("reclaimed_instances", 0)
        measured = waits.get(key, [])
        row["waits_counted"] = len(measured)
        row["wait_mean_seconds"] = round(sum(measured) / len(measured), 3) if measured else None
        p95 = percentile(measured, 0.95)
        row["wait_p95_seconds"] = round(p95, 3) if p95 is not None else None
        rows.append({column: row[column] for column in COLUMNS})
    return rows
