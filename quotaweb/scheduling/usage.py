"""Usage samples: each share's figures per unit (docs/semantics.md 3), written when they change.

Write them only as the cycle does, in a transaction holding the change lock
(events.lock_changes()) and, from `record_changes` on, SchedulerState's row lock: the
broadcaster follows a cursor over their ids, which must follow commit order, and writers
that hold that row until they commit draw their ids one after another.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from django.conf import settings
from django.db.models import Sum
from django.utils import timezone

from scheduler import quota
from scheduler.model import Strategy
from scheduler.past_usage import fold_samples

from ..models import (
    CapacityLimit,
    CapacityUnit,
    Job,
    QuotaShare,
    SchedulerState,
    UsageSample,
    WarmPool,
)
from ..models.jobs import ACTIVE_STATUSES, QUEUED_STATUSES
from ..models.warm_pools import PoolStatus

FIGURES = ("limit", "in_use", "own", "borrowed", "lent", "warm", "queued")


def current_figures() -> dict[tuple[int, str], dict[str, int]]:
    """(share id, unit) → figures, computed from the database in a fixed number of queries."""
    used: dict[tuple[int, str], int] = defaultdict(int)
    queued: dict[tuple[int, str], int] = defaultdict(int)
    warm: dict[tuple[int, str], int] = defaultdict(int)
    for row in Job.objects.filter(status__in=ACTIVE_STATUSES).values(
        "quota_share_id", "instance_type"
    ).annotate(n=Sum("instance_count")):
        used[row["quota_share_id"], row["instance_type"]] += row["n"]
    for row in Job.objects.filter(status__in=QUEUED_STATUSES).values(
        "quota_share_id", "instance_type"
    ).annotate(n=Sum("instance_count")):
        queued[row["quota_share_id"], row["instance_type"]] += row["n"]
    for row in WarmPool.objects.filter(status=PoolStatus.AVAILABLE).values(
        "quota_share_id", "instance_type"
    ).annotate(n=Sum("instance_count")):
        used[row["quota_share_id"], row["instance_type"]] += row["n"]
        warm[row["quota_share_id"], row["instance_type"]] += row["n"]
    shares = {s.pk: s for s in QuotaShare.live.all()}
    limits: dict[str, dict[int, int]] = defaultdict(dict)
    for limit in CapacityLimit.objects.filter(quota_share_id__in=list(shares)):
        limits[limit.capacity_unit][limit.quota_share_id] = limit.max_capacity
    capacity = dict(CapacityUnit.objects.values_list("name", "max_capacity"))
    figures: dict[tuple[int, str], dict[str, int]] = {}
    for unit, share_limits in limits.items():
        standing = {
            str(pk): (used[pk, unit], share_limits.get(pk, 0),
                      Strategy(shares[pk].sharing_strategy))
            for pk in shares
        }
        unowned = quota.unowned(capacity.get(unit, 0), (s[1] for s in standing.values()))
        lent = quota.lent(unowned, standing)
        for pk in share_limits:
            u, limit, _ = standing[str(pk)]
            figures[pk, unit] = {
                "limit": limit, "in_use": u, "own": quota.own(u, limit),
                "borrowed": quota.borrowed(u, limit), "lent": lent[str(pk)],
                "warm": warm[pk, unit], "queued": queued[pk, unit],
            }
    return figures


def record_changes(now: datetime) -> list[UsageSample]:
    """Write a sample for every share and unit whose figures differ from its last one
    (the last written figures are kept on the SchedulerState row: one read, one write)."""
    state = SchedulerState.objects.select_for_update().get_or_create(id=1)[0]
    previous: dict[str, dict[str, int]] = state.last_usage or {}
    current = {f"{share_id}|{unit}": figures
               for (share_id, unit), figures in sorted(current_figures().items())}
    samples = []
    for key, figures in current.items():
        if previous.get(key) != figures:
            share_id, unit = key.split("|", 1)
            samples.append(UsageSample(time=now, quota_share_id=int(share_id),
                                       capacity_unit=unit, **figures))
    if samples or previous.keys() != current.keys():
        SchedulerState.objects.filter(id=1).update(last_usage=current)
    return UsageSample.objects.bulk_create(samples)


def past_borrowed(now: datetime, half_life: float, shares: list[str] | None = None
                  ) -> tuple[tuple[str, str, float], ...]:
    """Each live share's decayed past borrowing per unit at `now` (docs/semantics.md 5.4),
    folded from the usage samples' borrowed counts exactly as the simulator folds the
    changes it makes (scheduler.past_usage): (share, unit, mean), means above 0 only.
    `shares` names the shares wanted (None: all).  It reads every sample of those shares:
    a cost that grows with the history, paid only with a half-life set."""
    rows = UsageSample.objects.filter(quota_share__deleted_at__isnull=True)
    if shares is not None:
        rows = rows.filter(quota_share__name__in=shares)
    rows = rows.order_by("time", "id").values_list(
        "quota_share__name", "capacity_unit", "time", "borrowed")
    samples = ((name, unit, time.timestamp(), borrowed) for name, unit, time, borrowed in rows)
    means = fold_samples(samples, half_life, now.timestamp())
    return tuple((share, unit, mean) for (share, unit), mean in sorted(means.items()))


def half_life_seconds() -> int:
    """The fair-share half-life the server is set with (0: none; docs/semantics.md 5.4)."""
    return int(settings.QUOTAWEB.get("FAIR_SHARE_HALF_LIFE_SECONDS", 0))


def past_borrowed_by_pair(shares: list[str] | None = None) -> dict[tuple[str, str], float]:
    """(share, unit) → decayed past borrowing now, for the pages, the API and /metrics;
    empty without a half-life."""
    half_life = half_life_seconds()
    if not half_life:
        return {}
    return {(share, unit): mean
            for share, unit, mean in past_borrowed(timezone.now(), half_life, shares)}
