"""What-if (docs/api.md, What-if): replay a period of recorded history with a changed
configuration, beside the replay with the configuration as it was.  Administrators only;
nothing is changed."""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any

from django.http import HttpRequest
from django.utils import timezone
from ninja import Router, Schema
from pydantic import Field

from scheduler.simulate.scenario import MAX_FAIR_SHARE_HALF_LIFE_SECONDS

from ...services.errors import Conflict
from ...services.what_if import MAX_JOBS, MAX_PERIOD, REPLAY_BUDGET_SECONDS, what_if
from ..auth import administrators_only
from ..errors import WRITE_ERRORS, error_responses
from ..schemas.common import IsoTime, RequestBody, ShareName, UnitName
from ..schemas.configuration import (
    BORROW_LIMIT,
    FAIR_SHARE_WEIGHT,
    FAIR_SHARING,
    MIN_RUNTIME,
    NATURAL,
    LimitIn,
    Strategy,
)
from .activity import as_utc
from .reports import DEFAULT_PERIOD

router = Router(tags=["what-if"])

# One what-if at a time per process: a replay holds a core for up to a few seconds, and
# a second one waiting behind it would hold a worker too.
_running = threading.Lock()


DESCRIPTION = f"""Replays the jobs of [start, end) (their submissions, priority changes,
terminations and keep-alive changes at their real times, with their real work) through the
engine with the configuration as it was (as it stood at start, with the changes recorded
in the period at their real times) and with the changes, which hold for the whole period
and replace recorded changes of the same fields, and compares them per share.  A
period covers at most {MAX_PERIOD.days} days and {MAX_JOBS} jobs (422 beyond); both replays
stop after {REPLAY_BUDGET_SECONDS} s of work (422 WHAT_IF_TOO_LARGE); one what-if runs at a
time per server process (409 WHAT_IF_BUSY).  Nothing is changed."""


class CapacityChange(RequestBody):
    """A unit of the capacity and the fields to set; fields left out keep their recorded
    values."""

    capacity_unit: UnitName
    max_capacity: int = Field(None, json_schema_extra=NATURAL)
    warm_pool_limit: int = Field(None, json_schema_extra=NATURAL)
    cold_start_seconds: int = Field(None, json_schema_extra=NATURAL)
    warm_start_seconds: int = Field(None, json_schema_extra=NATURAL)
    fair_sharing: bool = Field(None, description=FAIR_SHARING)


class ShareChange(RequestBody):
    """A quota share and the fields to set, for the whole period; fields left out keep their
    recorded values."""

    name: ShareName
    capacity_limits: list[LimitIn] = Field(None, json_schema_extra={"minItems": 1,
                                                                    "maxItems": 5})
    sharing_strategy: Strategy = None
    borrow_limit: int | None = Field(None, json_schema_extra=BORROW_LIMIT)
    in_share_preemption: bool = None
    fair_share_weight: int = Field(None, json_schema_extra=FAIR_SHARE_WEIGHT)
    min_runtime_seconds: int = Field(None, json_schema_extra=MIN_RUNTIME)


class WhatIfIn(RequestBody):
    # Not strict: JSON spells a time as a string (the body is otherwise strict).
    start: IsoTime = Field(None, strict=False, description="Start of the period (ISO "
                           "8601); 24 hours before `end` when absent.")
    end: IsoTime = Field(None, strict=False, description="End of the period; now when "
                         "absent.")
    capacity: list[CapacityChange] = Field(default_factory=list, max_length=50)
    quota_shares: list[ShareChange] = Field(default_factory=list, max_length=200)
    fair_sharing: bool = Field(None, description="Fair sharing of idle capacity on every "
                               "unit for the whole period (docs/semantics.md 5.4); absent: "
                               "as the server is set (FAIR_SHARING) and each unit says.")
    fair_share_half_life_seconds: int = Field(
        None, json_schema_extra={"minimum": 0, "maximum": MAX_FAIR_SHARE_HALF_LIFE_SECONDS},
        description="Fair sharing's half-life for past borrowing for the whole period "
                    "(docs/semantics.md 5.4; 0: none); absent: as the server is set "
                    "(FAIR_SHARE_HALF_LIFE_SECONDS).  Both replays start with no past.")


class ShareFiguresOut(Schema):
    jobs: int
    mean_wait_seconds: float | None
    p95_wait_seconds: float | None
    instance_hours: float
    borrowed_instance_hours: float
    lent_instance_hours: float
    preemptions: dict[str, int] = Field(description="Suffered, by kind.")
    lost_work_instance_hours: float = Field(
        description="RUNNING time of preempted attempts × instances.")
    limit_utilization: float | None = Field(
        description="Instance-hours used / (Σ the share's limits × the period).")


class ShareComparisonOut(Schema):
    quota_share: str
    recorded: ShareFiguresOut
    changed: ShareFiguresOut


class WhatIfOut(Schema):
    start: Any
    end: Any
    jobs: int = Field(description="Jobs replayed.")
    notes: list[str] = Field(description="What the replay could not reproduce exactly.")
    configuration: dict[str, Any]
    changed_configuration: dict[str, Any]
    utilization: dict[str, float]
    fair_sharing: dict[str, bool] = Field(
        description="Whether fair sharing was on for every unit in the `recorded` and the "
                    "`changed` replay (a unit may also turn it on alone: see configuration).")
    fair_share_half_life_seconds: dict[str, int] = Field(
        description="The fair-share half-life of the `recorded` and the `changed` replay "
                    "(0: none).")
    shares: list[ShareComparisonOut]
    timelines: dict[str, list[dict[str, Any]]] = Field(
        description="The usage rows of both replays (docs/scenario-format.md, Output): "
                    "`recorded` and `changed`, t in seconds from `start`.")


def period_of(payload: WhatIfIn) -> tuple[datetime, datetime]:
    """[start, end), by default the last 24 hours; the service checks its order and cap."""
    end = as_utc(payload.end) if payload.end is not None else timezone.now()
    start = as_utc(payload.start) if payload.start is not None else end - DEFAULT_PERIOD
    return start, end


@router.post("/what-if", response={200: WhatIfOut, **error_responses((*WRITE_ERRORS,))},
             auth=administrators_only("run a what-if"), operation_id="what_if",
             summary="Replay a period with a changed configuration (administrators)",
             description=DESCRIPTION)
def run_what_if(request: HttpRequest, payload: WhatIfIn) -> dict[str, Any]:
    start, end = period_of(payload)
    capacity = [change.model_dump(exclude_unset=True) for change in payload.capacity]
    shares = [_share_change(change) for change in payload.quota_shares]
    if not _running.acquire(blocking=False):
        raise Conflict("WHAT_IF_BUSY", "Another what-if is running; try again in a moment.")
    try:
        result = what_if(start, end, capacity=capacity, quota_shares=shares,
                         fair_sharing=payload.fair_sharing,
                         fair_share_half_life_seconds=payload.fair_share_half_life_seconds)
    finally:
        _running.release()
    return {**result.as_dict(), "timelines": {"recorded": result.recorded["usage"],
                                              "changed": result.changed["usage"]}}


def _share_change(change: ShareChange) -> dict[str, Any]:
    fields = change.model_dump(exclude_unset=True)
    if "capacity_limits" in fields:
        fields["capacity_limits"] = [dict(limit) for limit in fields["capacity_limits"]]
    return fields
