"""Usage samples (docs/api.md, Usage) as the API, the websocket and the pages read them.

Each `*_rows` function is the queryset a reader uses: it selects the related rows the
dict needs in the same query, so a list of any length costs one query.
"""

from __future__ import annotations

from typing import Any

from django.db.models import OuterRef, QuerySet, Subquery

from ..models import CapacityLimit, UsageSample
from .times import iso

FIGURES = ("limit", "in_use", "own", "borrowed", "lent", "warm", "queued")


def usage_rows() -> QuerySet[UsageSample]:
    """Usage samples with their share's name, in id (= commit) order."""
    return UsageSample.objects.select_related("quota_share").only(
        "id", "time", "quota_share__name", "capacity_unit", *FIGURES
    ).order_by("id")


def latest_usage_rows() -> QuerySet[UsageSample]:
    """The latest sample of every live share on every unit it has a limit for.

    A unit removed from a share's limits gets no more samples, so its last one is stale
    and left out; so are deleted shares.  One query: for each limit, the newest sample of
    its series is found through the (share, unit, time) index, never by scanning history.
    """
    newest = UsageSample.objects.filter(
        quota_share_id=OuterRef("quota_share_id"), capacity_unit=OuterRef("capacity_unit")
    ).order_by("-time", "-id").values("id")[:1]
    latest = CapacityLimit.objects.filter(quota_share__deleted_at__isnull=True).annotate(
        sample=Subquery(newest)
    ).values("sample")
    return usage_rows().filter(id__in=latest).order_by("quota_share__name", "capacity_unit")


def usage_dict(sample: UsageSample) -> dict[str, Any]:
    return usage_row_dict((sample.id, sample.time, sample.quota_share.name,
                           sample.capacity_unit, *(getattr(sample, f) for f in FIGURES)))


# A sample's columns as `usage_row_dict` takes them (usage_values()).
USAGE_COLUMNS = ("id", "time", "quota_share__name", "capacity_unit", *FIGURES)


def usage_values() -> QuerySet[UsageSample]:
    """usage_rows() as tuples of USAGE_COLUMNS, for the broadcaster."""
    return UsageSample.objects.order_by("id").values_list(  # type: ignore[return-value]
        *USAGE_COLUMNS)


def usage_row_dict(row: tuple[Any, ...]) -> dict[str, Any]:
    # The id lets a client drop a sample it already has (broadcasting is at-least-once).
    sample_id, time, share, unit, *figures = row
    return {"id": sample_id, "time": iso(time), "quota_share": share, "capacity_unit": unit,
            **dict(zip(FIGURES, figures, strict=True))}
