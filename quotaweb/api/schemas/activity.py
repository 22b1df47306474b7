"""Warm pools, usage samples, events and API tokens."""

from __future__ import annotations

from typing import Any

from ninja import Schema
from pydantic import Field

from .common import IsoTime, RequestBody, UtcTime
from .jobs import PoolStatus


class WarmPoolOut(Schema):
    id: int
    quota_share: str
    instance_type: str
    instance_count: int
    status: PoolStatus
    job: int = Field(description="The job whose segment the pool currently is.")
    job_name: str
    keep_alive_seconds: int | None
    expires_at: UtcTime | None
    created_at: UtcTime
    retained_billable_seconds: float
    cache_directory: str | None = Field(
        description="The pool's cache directory on its host: for the share's members and "
                    "administrators; null for everyone else.")
    termination_reason: str | None


class WarmPoolListOut(Schema):
    warm_pools: list[WarmPoolOut]
    next_cursor: str | None


class UsageSampleOut(Schema):
    id: int
    time: UtcTime
    quota_share: str
    capacity_unit: str
    limit: int
    in_use: int
    own: int
    borrowed: int
    lent: int
    warm: int
    queued: int


class UsageOut(Schema):
    samples: list[UsageSampleOut]
    next_after: int | None = Field(
        description="More samples follow: pass as `after` for the next page.")


class EventOut(Schema):
    id: int
    time: UtcTime
    type: str
    job: int | None
    job_name: str | None
    quota_share: str | None
    details: dict[str, Any]


class EventListOut(Schema):
    events: list[EventOut]


class TokenIn(RequestBody):
    name: str = Field("", json_schema_extra={"maxLength": 128},
                      description="A label to recognise the token by.")
    expires_at: IsoTime | None = Field(
        None, strict=False, description="Refused from this time on (ISO 8601, in the "
                                        "future); null or absent: never expires.")


class TokenOut(Schema):
    id: int
    name: str
    prefix: str = Field(description="The token's first characters, to recognise it.")
    created_at: UtcTime
    last_used_at: UtcTime | None
    revoked_at: UtcTime | None
    expires_at: UtcTime | None = Field(description="null: never expires.")


class RevokedOut(Schema):
    revoked: int = Field(description="How many tokens were revoked.")


class NewTokenOut(TokenOut):
    token: str = Field(description="The raw token: shown this once, never stored.")


class TokenListOut(Schema):
    tokens: list[TokenOut]
