"""Capacity and the QuotaShare of docs/api.md, with its read-only `usage`: the figures of the
share's latest usage sample on each unit it has a limit for (zeros before any cycle)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db.models import QuerySet

from ..models import CapacityUnit, QuotaShare
from ..read_model.usage import FIGURES, latest_usage_rows
from ..scheduling.usage import half_life_seconds, past_borrowed_by_pair


def capacity_dict() -> dict[str, Any]:
    return {"capacity_limits": [unit_dict(unit) for unit in CapacityUnit.objects.order_by("name")]}


def unit_dict(unit: CapacityUnit) -> dict[str, Any]:
    return {
        "capacity_unit": unit.name,
        "max_capacity": unit.max_capacity,
        "warm_pool_limit": unit.warm_pool_limit,
        "cold_start_seconds": unit.cold_start_seconds,
        "warm_start_seconds": unit.warm_start_seconds,
        "fair_sharing": unit.fair_sharing,
        "memory_mib_per_instance": unit.memory_mib_per_instance,
        "cpus_per_instance": unit.cpus_per_instance,
        "run_dir_mib_per_instance": unit.run_dir_mib_per_instance,
    }


def share_rows() -> QuerySet[QuotaShare]:
    return QuotaShare.live.prefetch_related("capacity_limits", "members").order_by("name")


def share_dicts(shares: Sequence[QuotaShare]) -> list[dict[str, Any]]:
    """Shares with their usage: one query for the usage of all of them."""
    latest: dict[tuple[int, str], dict[str, int]] = {}
    for sample in latest_usage_rows().filter(quota_share_id__in=[s.pk for s in shares]):
        latest[(sample.quota_share_id, sample.capacity_unit)] = {
            figure: getattr(sample, figure) for figure in FIGURES}
    past = past_borrowed_by_pair([share.name for share in shares]) if shares else {}
    return [share_dict(share, latest, past) for share in shares]


def share_dict(share: QuotaShare, latest: dict[tuple[int, str], dict[str, int]],
               past: dict[tuple[str, str], float] | None = None) -> dict[str, Any]:
    """`past`: decayed past borrowing per (share, unit), given only with a half-life set;
    each unit's usage then carries `past_borrowed` (docs/semantics.md 5.4)."""
    limits = list(share.capacity_limits.all())
    usage = {}
    for limit in limits:
        figures = latest.get((share.pk, limit.capacity_unit))
        if figures is None:
            figures = dict.fromkeys(FIGURES, 0)
        # The limit is the configuration's, even when no cycle has sampled it yet.
        usage[limit.capacity_unit] = {**figures, "limit": limit.max_capacity}
        if past is not None and half_life_seconds():
            usage[limit.capacity_unit]["past_borrowed"] = round(
                past.get((share.name, limit.capacity_unit), 0.0), 6)
    return {
        "name": share.name,
        "capacity_limits": [{"capacity_unit": limit.capacity_unit,
                             "max_capacity": limit.max_capacity} for limit in limits],
        "sharing_strategy": share.sharing_strategy,
        "borrow_limit": share.borrow_limit,
        "in_share_preemption": share.in_share_preemption,
        "state": share.state,
        "max_keep_alive_seconds": share.max_keep_alive_seconds,
        "fair_share_weight": share.fair_share_weight,
        "min_runtime_seconds": share.min_runtime_seconds,
        "max_queued_jobs": share.max_queued_jobs,
        "max_submissions_per_minute": share.max_submissions_per_minute,
        "members": sorted(member.get_username() for member in share.members.all()),
        "usage": usage,
    }


def live_share(name: str) -> QuotaShare | None:
    return share_rows().filter(name=name).first()
