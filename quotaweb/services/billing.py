"""Billable warm-pool time (docs/semantics.md, Warm pools: Charging), computed here once
for the pages, the API and so the CLI.

Two figures, both in seconds (× the pool's instance count for instance-seconds):

- a job's **segment**: the time the pool stood Available after that job, retained when
  the segment ended, plus, while it stands Available now, the time since it became so;
- a **pool**: the sum of its segments along the whole chain, the figure a pool listing
  shows (what the pool has cost its share so far).

The open part uses scheduler.lifecycle.billable_seconds, the rule the simulator bills
by, so the live system and a scenario agree.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import QuerySet, Sum

from scheduler import lifecycle

from ..models import WarmPool, WarmPoolSegment
from ..models.warm_pools import PoolStatus


def open_seconds(available_since: datetime | None, now: datetime) -> float:
    """The time an Available segment has stood Available so far (0 without a start)."""
    if available_since is None:
        return 0.0
    return lifecycle.billable_seconds(available_since.timestamp(), now.timestamp())


def segment_billable_seconds(segment: WarmPoolSegment, now: datetime) -> float:
    """A job's segment: retained seconds, plus its open Available time."""
    seconds = float(segment.retained_billable_seconds)
    if segment.status == PoolStatus.AVAILABLE:
        seconds += open_seconds(segment.available_since, now)
    return seconds


def with_chain_billing(pools: QuerySet[WarmPool]) -> QuerySet[WarmPool]:
    """The pools annotated with `billed`: their segments' retained seconds, summed."""
    return pools.annotate(billed=Sum("segments__retained_billable_seconds"))


def owner_segment(pool: WarmPool) -> WarmPoolSegment | None:
    try:
        return pool.owner.warm_pool_segment
    except WarmPoolSegment.DoesNotExist:
        return None


def pool_billable_seconds(pool: WarmPool, now: datetime) -> float:
    """A pool's whole chain: every segment's retained seconds (annotated by
    with_chain_billing, else summed here), plus the open time of its owner's segment
    while the pool stands Available."""
    if hasattr(pool, "billed"):  # annotated: None when the pool has no segment yet
        retained = pool.billed
    else:
        retained = pool.segments.aggregate(total=Sum("retained_billable_seconds"))["total"]
    seconds = float(retained or 0.0)
    segment = owner_segment(pool)
    if pool.status == PoolStatus.AVAILABLE and segment is not None \
            and segment.status == PoolStatus.AVAILABLE:
        seconds += open_seconds(segment.available_since, now)
    return seconds
