"""Warm pools, usage samples and events (docs/api.md): read by every signed-in user."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from django.http import HttpRequest
from django.utils import timezone
from ninja import Query, Router, Schema
from pydantic import Field, StringConstraints

from scheduler.events import EventType as EngineEventType

from ...read_model import pools
from ...read_model.events import event_dict, event_rows
from ...read_model.usage import usage_dict, usage_rows
from ...scheduling.events import readable
from ...services.permissions import share_ids_with_secrets
from ...services.search import filter_events
from ..auth import current_user
from ..errors import READ_ERRORS, error_responses
from ..pagination import decode_cursor, encode_cursor
from ..schemas.activity import EventListOut, UsageOut, WarmPoolListOut
from ..schemas.common import MAX_ID, IsoTime, ShareName, UnitName, literal_of_values
from ..schemas.jobs import PoolStatus

router = Router(tags=["activity"])

MAX_SAMPLES = 10_000
# The simulator's refusal event; the API answers a refused submission with its error.
HIDDEN_EVENTS = ("SUBMIT_REJECTED",)
# The event types a reader can ask for: the engine's, but the simulator's own refusal.
EventType = literal_of_values(
    tuple(kind.value for kind in EngineEventType if kind.value not in HIDDEN_EVENTS)
)
JobNameFilter = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{0,128}\*?$")]
UserFilter = Annotated[str, StringConstraints(min_length=1, max_length=150)]


class PoolFilters(Schema):
    status: list[PoolStatus] = Field(None, description="Repeat to combine; all when "
                                                               "absent.")
    quota_share: ShareName = None
    limit: int = Field(500, ge=1, le=500)
    cursor: str = Field(None, max_length=200)


class UsageFilters(Schema):
    since: IsoTime = Field(None, description="Samples at or after this time "
                                                     "(ISO 8601; UTC when no offset).")
    quota_share: ShareName = None
    capacity_unit: UnitName = None
    after: int = Field(None, ge=0, le=MAX_ID,
                              description="Samples with a larger id (next_after of the "
                                          "previous page).")
    limit: int = Field(MAX_SAMPLES, ge=1, le=MAX_SAMPLES)


class EventFilters(Schema):
    after: int = Field(None, ge=0, le=MAX_ID,
                              description="Events with a larger id (ids follow commit order).")
    limit: int = Field(500, ge=1, le=500)
    quota_share: ShareName = Field(None, description="Only this share's events.")
    type: list[EventType] = Field(None, description="Repeat to combine; all when absent.")
    job: int = Field(None, ge=1, le=MAX_ID, description="Only this job's events.")
    job_name: JobNameFilter = Field(None, description="Events of jobs with this name, or "
                                                      "this prefix when it ends with *.")
    user: UserFilter = Field(None, description="Events of the jobs this user submitted.")
    since: IsoTime = Field(None, description="At or after this time.")
    until: IsoTime = Field(None, description="Before this time.")


@router.get("/warm-pools", response={200: WarmPoolListOut, **error_responses(READ_ERRORS)},
            operation_id="list_warm_pools", summary="List warm pools, newest first")
def list_warm_pools(request: HttpRequest, filters: Query[PoolFilters]) -> dict[str, Any]:
    rows = pools.pool_rows().order_by("-id")
    if filters.status:
        rows = rows.filter(status__in=filters.status)
    if filters.quota_share is not None:
        rows = rows.filter(quota_share__name=filters.quota_share)
    if filters.cursor is not None:
        rows = rows.filter(id__lt=decode_cursor(filters.cursor))
    page = list(rows[: filters.limit + 1])
    more = len(page) > filters.limit
    page = page[: filters.limit]
    view = pools.View(timezone.now(), share_ids_with_secrets(current_user(request)))
    return {"warm_pools": [pools.pool_dict(pool, view) for pool in page],
            "next_cursor": encode_cursor(page[-1].id) if more else None}


@router.get("/usage", response={200: UsageOut, **error_responses(READ_ERRORS)},
            operation_id="list_usage", summary="Usage samples, the dashboard's timelines")
def list_usage(request: HttpRequest, filters: Query[UsageFilters]) -> dict[str, Any]:
    """A sample for a share and unit whenever one of its figures changed, oldest first."""
    rows = usage_rows()
    if filters.since is not None:
        rows = rows.filter(time__gte=as_utc(filters.since))
    if filters.quota_share is not None:
        rows = rows.filter(quota_share__name=filters.quota_share)
    if filters.capacity_unit is not None:
        rows = rows.filter(capacity_unit=filters.capacity_unit)
    if filters.after is not None:
        rows = rows.filter(id__gt=filters.after)
    page = list(rows[: filters.limit + 1])
    more = len(page) > filters.limit
    page = page[: filters.limit]
    return {"samples": [{**usage_dict(sample), "time": sample.time} for sample in page],
            "next_after": page[-1].id if more else None}


def as_utc(moment: datetime) -> datetime:
    """An aware UTC time (UTC when no offset is given).  A time at the very edge of the
    calendar whose UTC value does not exist (year 1 with a positive offset, year 9999
    with a negative one) is the earliest or the latest time."""
    if timezone.is_naive(moment):
        moment = moment.replace(tzinfo=UTC)
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        edge = datetime.min if moment.year == datetime.min.year else datetime.max
        return edge.replace(tzinfo=UTC)


@router.get("/events", response={200: EventListOut, **error_responses(READ_ERRORS)},
            operation_id="list_events", summary="Events in commit order")
def list_events(request: HttpRequest, filters: Query[EventFilters]) -> dict[str, Any]:
    # Only final events (quotaweb.scheduling.events.readable): a later page with `after`
    # never misses one that commits after this read with a smaller id.
    rows = filter_events(
        readable(event_rows()).exclude(type__in=HIDDEN_EVENTS), quota_share=filters.quota_share,
        types=filters.type or (), job=filters.job, job_name=filters.job_name,
        user=filters.user,
        since=as_utc(filters.since) if filters.since is not None else None,
        until=as_utc(filters.until) if filters.until is not None else None)
    if filters.after is not None:
        rows = rows.filter(id__gt=filters.after)
    # Times as datetimes: the response schema writes them (schemas.common.UtcTime).
    return {"events": [{**event_dict(e), "time": e.time} for e in rows[: filters.limit]]}
