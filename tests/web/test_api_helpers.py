"""Shared helpers and fixtures of the API tests (tests/web/test_api_*.py); no tests here.

`world`: capacity ml.g5.xlarge × 4 (warm_pool_limit 2) and three shares: QS1
LEND_AND_BORROW (limit 2, member "member"), QS2 LEND (limit 1, member "qs2_member"), QS3
RESERVE (limit 1, no members); users "admin" (staff), "member", "qs2_member" and "other"
(signed in, member of nothing).  `api` gives a bearer-token client for a role (or the
anonymous client), `session_for` a session client that enforces CSRF.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from quotaweb.models import (
    ApiToken,
    Attempt,
    CapacityLimit,
    CapacityUnit,
    Event,
    Job,
    QuotaShare,
    WarmPool,
    WarmPoolSegment,
)

UNIT = "ml.g5.xlarge"
ROLES = ("admin", "member", "qs2_member", "other", "anonymous")


@dataclass
class World:
    users: dict[str, Any]
    shares: dict[str, QuotaShare]
    unit: CapacityUnit


@pytest.fixture
def world(admin: Any, member: Any, other: Any, password_hash: str, make_share: Any) -> World:
    from django.contrib.auth.models import User

    qs2_member = User.objects.create(username="qs2_member", password=password_hash)
    unit = CapacityUnit.objects.create(name=UNIT, max_capacity=4, warm_pool_limit=2)
    shares = {
        "QS1": make_share("QS1", {UNIT: 2}, sharing_strategy="LEND_AND_BORROW",
                          borrow_limit=100, members=(member,)),
        "QS2": make_share("QS2", {UNIT: 1}, sharing_strategy="LEND", members=(qs2_member,)),
        "QS3": make_share("QS3", {UNIT: 1}, sharing_strategy="RESERVE"),
    }
    users = {"admin": admin, "member": member, "qs2_member": qs2_member, "other": other}
    return World(users, shares, unit)


class Api:
    """A client that speaks JSON: `api.post(url, body)` returns (status, parsed body)."""

    def __init__(self, client: Client, headers: dict[str, str] | None = None) -> None:
        self.client = client
        self.headers = headers or {}

    def call(self, method: str, url: str, body: Any = None, *, raw: bytes | str | None = None,
             **extra: Any) -> tuple[int, Any]:
        if method == "get":
            return self.get(url)
        data = raw if raw is not None else (json.dumps(body) if body is not None else "")
        response = getattr(self.client, method)(
            url, data=data, content_type="application/json", headers={**self.headers, **extra})
        content = response.content
        return response.status_code, json.loads(content) if content else None

    def get(self, url: str, **params: Any) -> tuple[int, Any]:
        response = self.client.get(url, params, headers=self.headers)
        return response.status_code, json.loads(response.content)

    def post(self, url: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        return self.call("post", url, body, **kw)

    def put(self, url: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        return self.call("put", url, body, **kw)

    def patch(self, url: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        return self.call("patch", url, body, **kw)

    def delete(self, url: str, **kw: Any) -> tuple[int, Any]:
        return self.call("delete", url, **kw)


def bearer(user: Any) -> Api:
    _, raw = ApiToken.issue(user, name="test")
    return Api(Client(), {"Authorization": f"Bearer {raw}"})


@pytest.fixture
def api(world: World) -> Callable[[str], Api]:
    """api(role) -> a client for that role: a bearer token, or nothing for "anonymous".
    Every role's token exists from the start, so `state()` snapshots include them."""
    made = {role: Api(Client()) if role == "anonymous" else bearer(world.users[role])
            for role in ROLES}
    return made.__getitem__


@pytest.fixture
def session_for(world: World) -> Callable[[str], Api]:
    """session_for(role) -> a signed-in session client that enforces CSRF, primed with
    the csrftoken cookie; pass `csrf=True` to Api calls via `with_csrf`."""

    def make(role: str) -> Api:
        client = Client(enforce_csrf_checks=True)
        client.force_login(world.users[role])
        client.get("/api/v1/docs")  # the docs page sets the csrftoken cookie
        return Api(client)

    return make


def with_csrf(api: Api) -> dict[str, str]:
    return {"X-CSRFToken": api.client.cookies["csrftoken"].value}


# Building state as the cycle would ----------------------------------------------------


def job(share: str = "QS1", *, name: str = "train", status: str = "SUBMITTED",
        priority: int = 0, user: Any = None, **fields: Any) -> Job:
    """A job row, written straight to the table (as if submitted and moved on by cycles)."""
    values: dict[str, Any] = {"instance_type": UNIT, "executor": "simulated",
                              "duration_seconds": 60, **fields}
    if status == "RUNNABLE":
        values.setdefault("pending_code", "WAITING_FOR_CAPACITY")
    return Job.objects.create(name=name, quota_share=QuotaShare.live.get(name=share),
                              status=status, priority=priority, submitted_by=user, **values)


def attempt(j: Job, number: int = 1, *, outcome: str | None = None,
            seconds_ago: float = 60, **fields: Any) -> Attempt:
    now = timezone.now()
    started = now - timedelta(seconds=seconds_ago)
    return Attempt.objects.create(
        job=j, number=number, instances=[0], scheduled_at=started, starting_at=started,
        running_at=started, started_at=started,
        stopped_at=now if outcome else None, outcome=outcome, **fields)


def available_pool(j: Job, *, since_seconds_ago: float = 10, keep_alive: int = 300,
                   retained: float = 0.0) -> WarmPool:
    """An Available pool left by a finished job, as the lifecycle writes it."""
    since = timezone.now() - timedelta(seconds=since_seconds_ago)
    Job.objects.filter(pk=j.pk).update(status="SUCCEEDED", keep_alive_seconds=keep_alive,
                                       stopped_at=since)
    pool = WarmPool.objects.create(
        quota_share=j.quota_share, owner=j, instance_type=j.instance_type,
        instance_count=j.instance_count, instances=[0], status="Available",
        chain_started_at=since - timedelta(seconds=60), available_since=since,
        expires_at=since + timedelta(seconds=keep_alive), cache_directory="/tmp/cache-x")
    WarmPoolSegment.objects.create(job=j, pool=pool, status="Available",
                                   keep_alive_seconds=keep_alive, available_since=since,
                                   expires_at=since + timedelta(seconds=keep_alive),
                                   retained_billable_seconds=retained)
    return pool


def submission(**overrides: Any) -> dict[str, Any]:
    return {"name": "train", "quota_share": "QS1", "instance_type": UNIT,
            "duration_seconds": 60, **overrides}


# "A rejected request changes nothing" --------------------------------------------------


def state() -> dict[str, Any]:
    """Everything a request could change, as comparable values."""
    return {
        "jobs": list(Job.objects.order_by("id").values()),
        "attempts": list(Attempt.objects.order_by("id").values()),
        "events": list(Event.objects.order_by("id").values_list("id", "type")),
        "shares": list(QuotaShare.objects.order_by("id").values()),
        "limits": list(CapacityLimit.objects.order_by("id").values()),
        "members": sorted(QuotaShare.members.through.objects.values_list(
            "quotashare_id", "user_id")),
        "units": list(CapacityUnit.objects.order_by("id").values()),
        "pools": list(WarmPool.objects.order_by("id").values()),
        "segments": list(WarmPoolSegment.objects.order_by("id").values()),
        "tokens": list(ApiToken.objects.order_by("id").values_list("id", "revoked_at")),
    }


def assert_error(status: int, body: Any, expected_status: int, code: str | None = None,
                 field: str | None = None) -> None:
    assert status == expected_status, body
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "fields"}
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    if code is not None:
        assert body["error"]["code"] == code, body
    if field is not None:
        assert field in body["error"]["fields"], body
