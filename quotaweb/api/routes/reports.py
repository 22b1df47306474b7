"""The usage report (docs/api.md, Reports): per share and unit, what it used, lent,
borrowed and waited for over a period; the same figures as the report page and its CSV."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.http import HttpRequest
from django.utils import timezone
from ninja import Query, Router, Schema
from pydantic import Field

from ...models import QuotaShare
from ...services.reports import usage_report
from ..errors import READ_ERRORS, ApiError, error_responses
from ..schemas.common import IsoTime, ShareName
from .activity import as_utc

router = Router(tags=["reports"])

DEFAULT_PERIOD = timedelta(hours=24)
LONGEST_PERIOD = timedelta(days=366)


class ReportFilters(Schema):
    start: IsoTime = Field(None, description="Start of the period (ISO 8601; UTC when no "
                                             "offset); 24 hours before `end` when absent.")
    end: IsoTime = Field(None, description="End of the period; now when absent.")
    quota_share: ShareName = Field(None, description="Only this share (a deleted one too).")


class ReportRowOut(Schema):
    quota_share: str
    capacity_unit: str
    in_use_instance_hours: float
    own_instance_hours: float = Field(description="Used within the share's limit.")
    borrowed_instance_hours: float = Field(description="Used above the share's limit.")
    lent_instance_hours: float = Field(description="Idle capacity of the share others used.")
    warm_pool_billable_instance_hours: float = Field(
        description="Its warm pools' Available time × their instances.")
    jobs_submitted: int
    jobs_run: int = Field(description="Jobs with an attempt that became RUNNING in the period.")
    jobs_succeeded: int
    jobs_failed: int
    preemptions_suffered_cross_share: int = Field(description="Reclaims of its jobs.")
    preemptions_suffered_in_share: int
    preemptions_caused_cross_share: int = Field(description="Reclaims by its jobs.")
    preemptions_caused_in_share: int
    reclaimed_instances: int = Field(description="Instances reclaims took from the share.")
    waits_counted: int = Field(description="Jobs first dispatched in the period.")
    wait_mean_seconds: float | None = Field(description="From submission to first dispatch.")
    wait_p95_seconds: float | None = Field(description="Nearest-rank 95th percentile.")


class ReportOut(Schema):
    start: datetime
    end: datetime
    rows: list[ReportRowOut]


def report_period(filters: ReportFilters) -> tuple[datetime, datetime]:
    end = as_utc(filters.end) if filters.end is not None else timezone.now()
    start = as_utc(filters.start) if filters.start is not None else end - DEFAULT_PERIOD
    if end <= start:
        raise ApiError(422, "VALIDATION_ERROR", "The end of the period must come after its "
                       "start.", {"end": ["must be after start"]})
    if end - start > LONGEST_PERIOD:
        raise ApiError(422, "VALIDATION_ERROR", "A report covers at most 366 days.",
                       {"start": ["at most 366 days before end"]})
    return start, end


@router.get("/reports/usage", response={200: ReportOut, **error_responses(READ_ERRORS)},
            operation_id="usage_report", summary="Usage report per share and unit")
def get_usage_report(request: HttpRequest, filters: Query[ReportFilters]) -> dict[str, Any]:
    """Per share and capacity unit, over [start, end): instance-hours used within the
    limit, borrowed, lent and held by warm pools; jobs; preemptions suffered and caused
    by kind; the wait to first dispatch.  404 for a share that never existed."""
    start, end = report_period(filters)
    if filters.quota_share is not None and not QuotaShare.objects.filter(
            name=filters.quota_share).exists():
        raise ApiError(404, "SHARE_NOT_FOUND",
                       f"Quota share {filters.quota_share} does not exist.")
    return {"start": start, "end": end,
            "rows": usage_report(start, end, filters.quota_share)}
