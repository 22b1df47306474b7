"""Warm pools, usage samples and events through the API (docs/api.md, Warm pools, Usage and
events)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from quotaweb.models import Event, QuotaShare, UsageSample, WarmPool, WarmPoolSegment

from . import test_api_helpers as helpers
from .test_api_helpers import (
    UNIT,
    Api,
    World,
    assert_error,
    available_pool,
    job,
    submission,
)

pytestmark = pytest.mark.django_db

# The helpers' fixtures, made available to this module's tests.
api, world = helpers.api, helpers.world

ApiFor = Callable[[str], Api]

POOL_FIELDS = {"id", "quota_share", "instance_type", "instance_count", "status", "job",
               "job_name", "keep_alive_seconds", "expires_at", "created_at",
               "retained_billable_seconds", "cache_directory", "termination_reason"}


# Warm pools ---------------------------------------------------------------------------


def in_use_pool(share: str) -> WarmPool:
    owner = job(share, status="RUNNING", keep_alive_seconds=60)
    pool = WarmPool.objects.create(
        quota_share=owner.quota_share, owner=owner, instance_type=UNIT, instance_count=1,
        status="InUse", chain_started_at=timezone.now())
    WarmPoolSegment.objects.create(job=owner, pool=pool, status="InUse", keep_alive_seconds=60)
    return pool


def test_warm_pools_are_listed_with_their_cache_directory_and_billing(api: ApiFor) -> None:
    available = available_pool(job("QS1", name="left"), since_seconds_ago=20, keep_alive=300)
    status, body = api("member").get("/api/v1/warm-pools")  # a member of QS1
    assert status == 200 and body["next_cursor"] is None
    [pool] = body["warm_pools"]
    assert set(pool) == POOL_FIELDS
    assert (pool["id"], pool["quota_share"], pool["status"], pool["job_name"]) == (
        available.id, "QS1", "Available", "left")
    assert (pool["keep_alive_seconds"], pool["cache_directory"]) == (300, "/tmp/cache-x")
    assert 20.0 <= pool["retained_billable_seconds"] < 25.0
    assert pool["expires_at"].endswith("Z") and pool["created_at"].endswith("Z")


def test_warm_pools_filter_by_status_and_share(api: ApiFor) -> None:
    available = available_pool(job("QS1"))
    busy = in_use_pool("QS2")
    ended = available_pool(job("QS1"))
    WarmPool.objects.filter(pk=ended.pk).update(status="Terminated", termination_reason="USER")

    def ids(**params: Any) -> list[int]:
        status, body = api("other").get("/api/v1/warm-pools", **params)
        assert status == 200, body
        return [pool["id"] for pool in body["warm_pools"]]

    assert ids() == [ended.id, busy.id, available.id]
    assert ids(status="Available") == [available.id]
    assert ids(status=["Available", "InUse"]) == [busy.id, available.id]
    assert ids(quota_share="QS1") == [ended.id, available.id]
    assert ids(quota_share="QS1", status="Terminated") == [ended.id]


def test_warm_pools_page_with_cursors(api: ApiFor) -> None:
    made = [available_pool(job("QS1")).id for _ in range(3)]
    _, first = api("other").get("/api/v1/warm-pools", limit=2)
    _, second = api("other").get("/api/v1/warm-pools", limit=2, cursor=first["next_cursor"])
    assert [p["id"] for p in first["warm_pools"] + second["warm_pools"]] == made[::-1]
    assert second["next_cursor"] is None


@pytest.mark.parametrize("params", [{"status": "Gone"}, {"limit": 0}, {"cursor": "x"},
                                    {"quota_share": "a b"}])
def test_bad_warm_pool_parameters_are_422(api: ApiFor, params: dict[str, Any]) -> None:
    assert_error(*api("other").get("/api/v1/warm-pools", **params), 422)


# Usage --------------------------------------------------------------------------------


def samples(world: World) -> list[UsageSample]:
    start = timezone.now() - timedelta(minutes=10)
    rows = []
    for minute, (share, in_use) in enumerate([("QS1", 1), ("QS2", 1), ("QS1", 2),
                                              ("QS1", 0)]):
        rows.append(UsageSample.objects.create(
            time=start + timedelta(minutes=minute), quota_share=world.shares[share],
            capacity_unit=UNIT, limit=1, in_use=in_use, own=in_use, borrowed=0, lent=0,
            warm=0, queued=0))
    return rows


def test_usage_samples_in_order_with_their_figures(world: World, api: ApiFor) -> None:
    rows = samples(world)
    status, body = api("other").get("/api/v1/usage")
    assert status == 200 and body["next_after"] is None
    assert [s["id"] for s in body["samples"]] == [r.id for r in rows]
    first = body["samples"][0]
    assert set(first) >= {"time", "quota_share", "capacity_unit", "in_use", "own", "borrowed",
                          "lent", "warm", "queued"}
    assert (first["quota_share"], first["capacity_unit"], first["in_use"]) == ("QS1", UNIT, 1)


def test_usage_filters(world: World, api: ApiFor) -> None:
    rows = samples(world)

    def ids(**params: Any) -> list[int]:
        status, body = api("other").get("/api/v1/usage", **params)
        assert status == 200, body
        return [s["id"] for s in body["samples"]]

    assert ids(quota_share="QS2") == [rows[1].id]
    assert ids(since=rows[2].time.isoformat()) == [rows[2].id, rows[3].id]
    assert ids(since=rows[2].time.replace(tzinfo=None).isoformat()) == [rows[2].id, rows[3].id]
    assert ids(capacity_unit="ml.other") == []
    assert ids(since="0001-01-01T00:00:00+05:00") == [r.id for r in rows]  # before UTC's year 1
    assert ids(since="9999-12-31T23:00:00-05:00") == []  # after UTC's year 9999
    assert ids(after=rows[1].id, quota_share="QS1") == [rows[2].id, rows[3].id]
    _, page = api("other").get("/api/v1/usage", limit=3)
    assert page["next_after"] == rows[2].id


@pytest.mark.parametrize("params", [{"since": "yesterday"}, {"since": "12345"},
                                    {"limit": 10_001}, {"after": -1},
                                    {"capacity_unit": "no spaces"}])
def test_bad_usage_parameters_are_422(api: ApiFor, params: dict[str, Any]) -> None:
    assert_error(*api("other").get("/api/v1/usage", **params), 422)


# Events -------------------------------------------------------------------------------


def test_events_after_an_id_in_commit_order(api: ApiFor) -> None:
    target = job("QS1", name="evented")
    now = timezone.now()
    made = [Event.objects.create(time=now, type=kind, job=target, quota_share="QS1",
                                 details=details)
            for kind, details in (("SUBMITTED", {}), ("PRIORITY_UPDATED", {"priority": 3}),
                                  ("RUNNING", {}))]
    status, body = api("other").get("/api/v1/events")
    assert status == 200
    assert [e["id"] for e in body["events"]] == [e.id for e in made]
    assert body["events"][1] == {
        "id": made[1].id, "time": body["events"][1]["time"], "type": "PRIORITY_UPDATED",
        "job": target.id, "job_name": "evented", "quota_share": "QS1",
        "details": {"priority": 3}}
    assert [e["id"] for e in api("other").get("/api/v1/events", after=made[0].id)[1][
        "events"]] == [made[1].id, made[2].id]
    assert [e["id"] for e in api("other").get("/api/v1/events", limit=1)[1]["events"]] == [
        made[0].id]


def test_submit_rejected_never_appears(api: ApiFor) -> None:
    Event.objects.create(time=timezone.now(), type="SUBMIT_REJECTED", quota_share="QS1",
                         details={"reason": "DISABLED"})
    shown = Event.objects.create(time=timezone.now(), type="SHARE_UPDATED", quota_share="QS1")
    assert [e["id"] for e in api("other").get("/api/v1/events")[1]["events"]] == [shown.id]


def test_a_refused_submission_answers_with_its_error_and_writes_no_event(
        api: ApiFor) -> None:
    QuotaShare.objects.filter(name="QS1").update(state="DISABLED")
    status, body = api("member").post("/api/v1/jobs", submission())
    assert_error(status, body, 409, "SHARE_DISABLED")
    assert api("other").get("/api/v1/events")[1]["events"] == []


@pytest.mark.parametrize("params", [{"limit": 501}, {"limit": 0}, {"after": "x"}])
def test_bad_event_parameters_are_422(api: ApiFor, params: dict[str, Any]) -> None:
    assert_error(*api("other").get("/api/v1/events", **params), 422)


# Cache directories are for members (issue 11, item 8) ----------------------------------


@pytest.mark.parametrize(("role", "sees"), [
    ("admin", True), ("member", True), ("qs2_member", False), ("other", False),
])
def test_a_pools_cache_directory_is_shown_to_its_members_and_administrators_only(
        api: ApiFor, role: str, sees: bool) -> None:
    pool = available_pool(job("QS1"))
    status, body = api(role).get("/api/v1/warm-pools")
    assert status == 200
    [listed] = [p for p in body["warm_pools"] if p["id"] == pool.id]
    assert listed["cache_directory"] == ("/tmp/cache-x" if sees else None)
    assert "/tmp/cache-x" in str(body) if sees else "/tmp/cache-x" not in str(body)


def test_the_websocket_snapshot_shows_a_cache_directory_to_members_only(
        world: World) -> None:
    from quotaweb.realtime import feed

    pool = available_pool(job("QS1"))
    for role, sees in (("admin", True), ("member", True), ("qs2_member", False),
                       ("other", False), (None, False)):
        viewer = world.users[role] if role else None
        [snapshot] = feed.on_connect(None, viewer)
        [shown] = [p for p in snapshot["warm_pools"] if p["id"] == pool.id]
        assert shown["cache_directory"] == ("/tmp/cache-x" if sees else None), role
