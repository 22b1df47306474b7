"""Reading usage for the pages: the share cards, the fleet at a glance, the timelines'
samples and preemption markers, and a share's borrowed/lent totals.  Plain dicts out,
so the figure builders stay pure; each function costs a fixed number of queries."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Max, OuterRef, Q, Subquery

from scheduler.events import EventType

from ..models import CapacityLimit, CapacityUnit, Event, Job, QuotaShare, UsageSample
from ..models.jobs import QUEUED_STATUSES
from ..read_model.times import iso
from ..read_model.usage import FIGURES, latest_usage_rows, usage_dict, usage_rows
from ..scheduling.events import readable
from ..series import integrate
from . import figures, grace
from .downsampling import downsampled_rows
from .ranges import TimeRange

HISTORY = timedelta(hours=2)  # what a timeline holds; it shows the last 30 minutes
MAX_SAMPLES = 20_000
MAX_MARKERS = 2_000
POINTS_PER_SERIES = 600  # a long range's points per series (about one per pixel column)

Row = dict[str, Any]


def share_colours() -> dict[str, str]:
    """Every share name ever used (deleted ones too: their history stays readable)."""
    return figures.share_colours(QuotaShare.objects.values_list("name", flat=True))


def last_ids() -> dict[str, int]:
    """Where the page's live updates start: the newest event and usage sample it shows."""
    return {
        # Final events only: the page's live updates start after it, and miss none.
        "last_event_id": readable(Event.objects.all()).aggregate(last=Max("id"))["last"] or 0,
        "last_sample_id": UsageSample.objects.aggregate(last=Max("id"))["last"] or 0,
    }


def limit_rows(share: QuotaShare | None = None) -> list[Row]:
    """One timeline row per (live share, unit it has a limit on), by share then unit."""
    limits = CapacityLimit.objects.filter(quota_share__deleted_at__isnull=True)
    if share is not None:
        limits = limits.filter(quota_share=share)
    return [{"quota_share": name, "capacity_unit": unit, "limit": limit}
            for name, unit, limit in limits.order_by("quota_share__name", "capacity_unit")
            .values_list("quota_share__name", "capacity_unit", "max_capacity")]


def latest_figures() -> dict[str, dict[str, int]]:
    """series key → the figures of its newest sample."""
    return {figures.series_key(s.quota_share.name, s.capacity_unit):
            {figure: getattr(s, figure) for figure in FIGURES}
            for s in latest_usage_rows()}


def queued_jobs() -> dict[str, int]:
    """series key → jobs waiting (SUBMITTED or RUNNABLE): the usage figure `queued`
    counts their instances, which says little without the number of jobs beside it."""
    return {figures.series_key(share, unit): count for share, unit, count in
            Job.objects.filter(status__in=QUEUED_STATUSES)
            .values_list("quota_share__name", "instance_type")
            .annotate(count=Count("id")).values_list("quota_share__name", "instance_type",
                                                     "count")}


def share_cards(shares: list[QuotaShare]) -> list[Row]:
    """A card per share: its settings and, per unit, its latest figures (zeros with the
    configured limit before any cycle has recorded a sample) and its queued jobs."""
    latest = latest_figures()
    waiting = queued_jobs()
    colours = share_colours()
    limits: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for share_id, unit, limit in CapacityLimit.objects.filter(
        quota_share__in=shares
    ).order_by("capacity_unit").values_list("quota_share_id", "capacity_unit", "max_capacity"):
        limits[share_id].append((unit, limit))
    cards = []
    for share in shares:
        units = []
        for unit, limit in limits[share.pk]:
            key = figures.series_key(share.name, unit)
            values = latest.get(key) or {**{f: 0 for f in FIGURES}, "limit": limit}
            units.append({"unit": unit, "key": key, **values,
                          "queued_jobs": waiting.get(key, 0)})
        cards.append({"share": share, "colour": colours.get(share.name), "units": units})
    return cards


def fleet_glance() -> list[Row]:
    """Per capacity unit: capacity, instances in use (warm pools included), warm, idle
    (nobody holds them), queued instances and queued jobs, and Σ share limits."""
    totals: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for key, values in latest_figures().items():
        unit = key.split("|", 1)[1]
        for figure in ("in_use", "warm", "queued", "limit"):
            totals[unit][figure] += values[figure]
    for key, count in queued_jobs().items():
        totals[key.split("|", 1)[1]]["queued_jobs"] += count
    rows = []
    for unit in CapacityUnit.objects.order_by("name"):
        used = totals[unit.name]
        rows.append({
            "name": unit.name, "capacity": unit.max_capacity, "in_use": used["in_use"],
            "warm": used["warm"], "idle": max(0, unit.max_capacity - used["in_use"]),
            "queued": used["queued"], "queued_jobs": used["queued_jobs"],
            "limits": used["limit"],
            "warm_pool_limit": unit.warm_pool_limit,
        })
    return rows


def timeline_samples(
    now: datetime, share: QuotaShare | None = None, upto: int | None = None,
    period: TimeRange | None = None,
) -> list[Row]:
    """Usage samples of the last HISTORY (the newest MAX_SAMPLES), or of `period`
    (downsampled: long_range_samples), plus, per series, the newest one before it, moved
    to the start so that each line begins at its level then.  With `upto`, only samples
    up to that id: the page's script adds the later ones."""
    since, now = (period.start, period.end) if period is not None else (now - HISTORY, now)
    before = UsageSample.objects.filter(
        quota_share_id=OuterRef("quota_share_id"), capacity_unit=OuterRef("capacity_unit"),
        time__lt=since,
    ).order_by("-time", "-id").values("id")[:1]
    limits = CapacityLimit.objects.filter(quota_share__deleted_at__isnull=True)
    if share is not None:
        limits = limits.filter(quota_share=share)
    baseline = limits.annotate(sample=Subquery(before)).values("sample")
    rows = usage_rows().filter(quota_share__deleted_at__isnull=True).filter(
        Q(id__in=baseline) | Q(time__gte=since, time__lte=now))
    if share is not None:
        rows = rows.filter(quota_share=share)
    if upto is not None:
        rows = rows.filter(id__lte=upto)
    if period is not None:
        samples = long_range_samples(rows, since, now)
    else:
        newest = list(rows.order_by("-id")[:MAX_SAMPLES])
        samples = [usage_dict(sample) for sample in reversed(newest)]
    for sample in samples:
        if sample["time"] < iso(since):
            sample["time"] = iso(since)
    return samples


def long_range_samples(rows: Any, since: datetime, until: datetime) -> list[Row]:
    """A long range's samples downsampled per series to at most POINTS_PER_SERIES points,
    in the database (web.downsampling keeps each bucket's peaks), so a week reads and
    draws as fast as half an hour."""
    samples = downsampled_rows(rows, FIGURES, since, until, POINTS_PER_SERIES)
    return [{**row, "time": iso(row["time"])} for row in samples]


def preemption_markers(
    now: datetime, share: QuotaShare | None = None, upto: int | None = None,
    since: datetime | None = None,
) -> list[Row]:
    """PREEMPTED events of the last HISTORY (up to event id `upto`) as timeline markers,
    naming who preempted whom: on the row of the victim's share and unit (kind
    CROSS_SHARE or IN_SHARE), and, for a reclaim, also on the row of the share whose
    capacity came back, the preemptor's (kind RECLAIM_RETURNED)."""
    events = Event.objects.filter(type=EventType.PREEMPTED, time__gte=since or now - HISTORY,
                                  time__lte=now)
    if upto is not None:
        events = events.filter(id__lte=upto)
    rows = list(events.select_related("job").order_by("-id")[:MAX_MARKERS])
    preemptors = {
        job_id: (name, share_name) for job_id, name, share_name in Job.objects.filter(
            pk__in={e.details.get("preempted_by") for e in rows}
        ).values_list("id", "name", "quota_share__name")
    }
    markers = []
    for event in reversed(rows):
        kind = event.details.get("kind", "")
        by_name, by_share = preemptors.get(event.details.get("preempted_by"), ("?", None))
        marker = {
            "time": iso(event.time), "quota_share": event.quota_share,
            "capacity_unit": event.job.instance_type if event.job else "", "kind": kind,
            "job_name": event.job.name if event.job else "?", "preempted_by_name": by_name,
        }
        if share is None or event.quota_share == share.name:
            markers.append(marker)
        if kind == "CROSS_SHARE" and by_share and (share is None or by_share == share.name):
            markers.append({**marker, "quota_share": by_share, "kind": "RECLAIM_RETURNED"})
    return markers


def timeline(
    now: datetime, share: QuotaShare | None = None, upto: dict[str, int] | None = None,
    period: TimeRange | None = None,
) -> dict[str, Any]:
    """The timeline figure of every live share (or of one): the last 30 minutes following
    the clock, or the chosen `period` (web.ranges).  `upto` (a page's live configuration)
    leaves out the samples and events after its ids: the page's script adds those, so
    none is drawn twice."""
    upto = upto or {}
    since, until = (period.start, period.end) if period is not None else (None, now)
    extra: dict[str, Any] = {}
    if period is not None:
        extra = {"window_seconds": period.seconds, "fixed_start": period.start,
                 "follow_now": period.follows_now}
    return figures.timeline_figure(
        limit_rows(share), timeline_samples(now, share, upto.get("last_sample_id"), period),
        preemption_markers(until, share, upto.get("last_event_id"), since),
        colours=share_colours(), now=until, stops=stopping_periods(until, share, since),
        **extra,
    )


def stopping_periods(now: datetime, share: QuotaShare | None = None,
                     since: datetime | None = None) -> list[Row]:
    """Grace periods since `since` (the last HISTORY by default; of one share's victims,
    or all), as the timelines draw them (figures.timeline_figure's `stops`)."""
    return [{**stop, "since": iso(stop["since"]),
             "until": iso(stop["until"])}
            for stop in grace.grace_periods(now, since or now - HISTORY)
            if share is None or stop["quota_share"] == share.name]


def lending_totals(share: QuotaShare, now: datetime) -> list[Row]:
    """Per unit, instance-seconds borrowed and lent over the last hour and the last day,
    integrating the share's usage samples as step functions."""
    day_ago = now - timedelta(days=1)
    before = UsageSample.objects.filter(
        quota_share=share, capacity_unit=OuterRef("capacity_unit"), time__lt=day_ago
    ).order_by("-time", "-id").values("id")[:1]
    baseline = share.capacity_limits.annotate(sample=Subquery(before)).values("sample")
    samples: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for unit, time, borrowed, lent in UsageSample.objects.filter(quota_share=share).filter(
        Q(id__in=baseline) | Q(time__gte=day_ago, time__lte=now)
    ).order_by("time", "id").values_list("capacity_unit", "time", "borrowed", "lent"):
        samples[unit].append({"time": time, "borrowed": borrowed, "lent": lent})
    rows = []
    for unit in share.capacity_limits.order_by("capacity_unit").values_list(
            "capacity_unit", flat=True):
        series = samples.get(unit, [])
        rows.append({"unit": unit, **{
            f"{figure}_{span}": integrate(series, figure, now - delta, now)
            for figure in ("borrowed", "lent")
            for span, delta in (("hour", timedelta(hours=1)), ("day", timedelta(days=1)))
        }})
    return rows
