"""Capacity and quota shares (docs/api.md, Capacity and Quota shares)."""

from __future__ import annotations

from ninja import Schema
from pydantic import Field

from scheduler.model import ShareState as EngineShareState
from scheduler.model import Strategy as EngineStrategy

from ...models.shares import DEFAULT_MAX_QUEUED_JOBS, DEFAULT_MAX_SUBMISSIONS_PER_MINUTE
from ...services.configuration import (
    MAX_BORROW_LIMIT,
    MAX_FAIR_SHARE_WEIGHT,
    MAX_KEEP_ALIVE_SECONDS,
    MAX_LIMITS,
    MAX_MIN_RUNTIME_SECONDS,
)
from ...services.values import MAX_INT
from .common import RequestBody, UnitName, Username, literal_of

Strategy = literal_of(EngineStrategy)
ShareState = literal_of(EngineShareState)
NATURAL = {"minimum": 0, "maximum": MAX_INT}
POSITIVE = {"minimum": 1, "maximum": MAX_INT}
BORROW_LIMIT = {"minimum": -1, "maximum": MAX_BORROW_LIMIT,
                "description": "LEND_AND_BORROW only: percent of each limit that may be "
                               "borrowed on top; -1 unlimited (the default)."}
KEEP_ALIVE_CAP = {"minimum": 0, "maximum": MAX_KEEP_ALIVE_SECONDS}
FAIR_SHARE_WEIGHT = {"minimum": 1, "maximum": MAX_FAIR_SHARE_WEIGHT,
                     "description": "Where fair sharing is on, idle capacity goes to the "
                                    "borrowing share with the fewest borrowed instances per "
                                    "unit of weight (docs/semantics.md 5.4)."}
MIN_RUNTIME = {"minimum": 0, "maximum": MAX_MIN_RUNTIME_SECONDS,
               "description": "Seconds a RUNNING job of the share runs before in-share "
                              "preemption may take it; a reclaim takes it only when nothing "
                              "else frees the instances (docs/semantics.md 5.8). 0: at once."}
FAIR_SHARING = ("Whether the unit's borrowers take its idle capacity by weight "
                "(docs/semantics.md 5.4); off: first come, first served.")
QUEUED_JOBS = {"minimum": 1, "maximum": MAX_INT,
               "description": "Jobs the share may have waiting (SUBMITTED or RUNNABLE) at "
                              "once; a submission beyond it is a 409 QUEUE_FULL.  2147483647 "
                              "lifts it (not counted)."}
SUBMISSIONS_PER_MINUTE = {"minimum": 1, "maximum": MAX_INT,
                          "description": "Jobs one user may submit to the share in any "
                                         "minute; beyond it a 429 TOO_MANY_SUBMISSIONS.  "
                                         "2147483647 lifts it (not counted)."}


# Capacity -----------------------------------------------------------------------------


class CapacityUnitIn(RequestBody):
    capacity_unit: UnitName
    max_capacity: int = Field(json_schema_extra=NATURAL)
    warm_pool_limit: int = Field(0, json_schema_extra=NATURAL)
    cold_start_seconds: int = Field(60, json_schema_extra=NATURAL)
    warm_start_seconds: int = Field(5, json_schema_extra=NATURAL)
    fair_sharing: bool = Field(False, description=FAIR_SHARING)
    memory_mib_per_instance: int = Field(4096, json_schema_extra=POSITIVE)
    cpus_per_instance: int = Field(1, json_schema_extra=POSITIVE)
    run_dir_mib_per_instance: int = Field(1024, json_schema_extra=POSITIVE)


class CapacityIn(RequestBody):
    """The whole capacity: units left out are removed."""

    capacity_limits: list[CapacityUnitIn]


class CapacityUnitOut(Schema):
    capacity_unit: str
    max_capacity: int
    warm_pool_limit: int
    cold_start_seconds: int
    warm_start_seconds: int
    fair_sharing: bool
    memory_mib_per_instance: int
    cpus_per_instance: int
    run_dir_mib_per_instance: int


class CapacityOut(Schema):
    capacity_limits: list[CapacityUnitOut]


# Quota shares -------------------------------------------------------------------------


class LimitIn(RequestBody):
    capacity_unit: UnitName
    max_capacity: int = Field(json_schema_extra=NATURAL)


LIMITS = {"minItems": 1, "maxItems": MAX_LIMITS,
          "description": "On distinct units; for every unit the shares' limits add up to at "
                         "most its max_capacity."}


class QuotaShareIn(RequestBody):
    name: str = Field(json_schema_extra={"pattern": r"^[A-Za-z0-9_-]{1,128}$"})
    capacity_limits: list[LimitIn] = Field(json_schema_extra=LIMITS)
    sharing_strategy: Strategy
    borrow_limit: int | None = Field(None, json_schema_extra=BORROW_LIMIT)
    in_share_preemption: bool = False
    state: ShareState = "ENABLED"
    max_keep_alive_seconds: int = Field(MAX_KEEP_ALIVE_SECONDS, json_schema_extra=KEEP_ALIVE_CAP)
    fair_share_weight: int = Field(1, json_schema_extra=FAIR_SHARE_WEIGHT)
    min_runtime_seconds: int = Field(0, json_schema_extra=MIN_RUNTIME)
    max_queued_jobs: int = Field(DEFAULT_MAX_QUEUED_JOBS, json_schema_extra=QUEUED_JOBS)
    max_submissions_per_minute: int = Field(DEFAULT_MAX_SUBMISSIONS_PER_MINUTE,
                                            json_schema_extra=SUBMISSIONS_PER_MINUTE)
    members: list[Username] = Field(default_factory=list, description="Usernames.")


class QuotaSharePatch(RequestBody):
    """Any writable field; the name cannot change.

    A field left out is not changed.  The None defaults only mark "not given" (the view
    passes model_fields_set on); an explicit null is refused, as the types say.
    """

    capacity_limits: list[LimitIn] = Field(None, json_schema_extra=LIMITS)
    sharing_strategy: Strategy = None
    borrow_limit: int | None = Field(None, json_schema_extra=BORROW_LIMIT)
    in_share_preemption: bool = None
    state: ShareState = None
    max_keep_alive_seconds: int = Field(None,
                                        json_schema_extra=KEEP_ALIVE_CAP)
    fair_share_weight: int = Field(None, json_schema_extra=FAIR_SHARE_WEIGHT)
    min_runtime_seconds: int = Field(None, json_schema_extra=MIN_RUNTIME)
    max_queued_jobs: int = Field(None, json_schema_extra=QUEUED_JOBS)
    max_submissions_per_minute: int = Field(None, json_schema_extra=SUBMISSIONS_PER_MINUTE)
    members: list[Username] = Field(None, description="Usernames.")


class LimitOut(Schema):
    capacity_unit: str
    max_capacity: int


class UsageFiguresOut(Schema):
    limit: int
    in_use: int
    own: int
    borrowed: int
    lent: int
    warm: int
    queued: int
    past_borrowed: float | None = Field(
        None, description="The share's decayed past borrowing on the unit, in instances "
        "(docs/semantics.md 5.4); only with a fair-share half-life set, else null.")


class QuotaShareOut(Schema):
    name: str
    capacity_limits: list[LimitOut]
    sharing_strategy: Strategy
    borrow_limit: int | None
    in_share_preemption: bool
    state: ShareState
    max_keep_alive_seconds: int
    fair_share_weight: int
    min_runtime_seconds: int
    max_queued_jobs: int
    max_submissions_per_minute: int
    members: list[str]
    usage: dict[str, UsageFiguresOut] = Field(
        description="Per capacity unit: the share's figures after the latest cycle.")


class QuotaShareListOut(Schema):
    quota_shares: list[QuotaShareOut]
