"""Capacity and quota shares through the API (docs/api.md, Capacity and Quota shares): reads,
replacing the capacity, creating, changing and deleting shares, members by username, and
each share's usage figures."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.utils import timezone

from quotaweb.models import Event, Job, QuotaShare, UsageSample

from . import test_api_helpers as helpers
from .test_api_helpers import UNIT, Api, World, assert_error, job, state

pytestmark = pytest.mark.django_db

# The helpers' fixtures, made available to this module's tests.
api, world = helpers.api, helpers.world

ApiFor = Callable[[str], Api]
OTHER_UNIT = "ml.p4d.24xlarge"


def unit(name: str = UNIT, max_capacity: int = 4, **figures: int) -> dict[str, Any]:
    return {"capacity_unit": name, "max_capacity": max_capacity, **figures}


def new_share(**overrides: Any) -> dict[str, Any]:
    return {"name": "QS4", "sharing_strategy": "LEND",
            "capacity_limits": [{"capacity_unit": UNIT, "max_capacity": 0}], **overrides}


# Capacity -----------------------------------------------------------------------------


# A command's resource limits per instance, by default (docs/executors.md).
LIMIT_DEFAULTS = {"memory_mib_per_instance": 4096, "cpus_per_instance": 1,
                  "run_dir_mib_per_instance": 1024}


def test_get_capacity(api: ApiFor) -> None:
    assert api("other").get("/api/v1/capacity") == (200, {"capacity_limits": [
        {"capacity_unit": UNIT, "max_capacity": 4, "warm_pool_limit": 2,
         "cold_start_seconds": 60, "warm_start_seconds": 5,
         "fair_sharing": False, **LIMIT_DEFAULTS}]})


def test_put_capacity_replaces_it_and_answers_the_new_capacity(api: ApiFor) -> None:
    status, body = api("admin").put("/api/v1/capacity", {"capacity_limits": [
        unit(max_capacity=6, warm_pool_limit=1, cold_start_seconds=30,
             memory_mib_per_instance=16384, cpus_per_instance=4),
        unit(OTHER_UNIT, 2)]})
    assert status == 200, body
    assert body == {"capacity_limits": [
        {"capacity_unit": UNIT, "max_capacity": 6, "warm_pool_limit": 1,
         "cold_start_seconds": 30, "warm_start_seconds": 5,
         "fair_sharing": False, "memory_mib_per_instance": 16384,
         "cpus_per_instance": 4, "run_dir_mib_per_instance": 1024},
        {"capacity_unit": OTHER_UNIT, "max_capacity": 2, "warm_pool_limit": 0,
         "cold_start_seconds": 60, "warm_start_seconds": 5,
         "fair_sharing": False, **LIMIT_DEFAULTS}]}
    assert sorted(e.details["capacity_unit"] for e in Event.objects.filter(
        type="CAPACITY_UPDATED")) == [UNIT, OTHER_UNIT]
    status, body = api("admin").put("/api/v1/capacity", {"capacity_limits": [unit()]})
    assert status == 200 and [u["capacity_unit"] for u in body["capacity_limits"]] == [UNIT]


@pytest.mark.parametrize(("units", "problem"), [
    ([unit(max_capacity=3)], "add up to 4"),  # Σ limits = 2 + 1 + 1
    ([unit(OTHER_UNIT, 9)], "lower the limits first"),  # removes a unit shares limit
    ([unit(), unit()], "listed twice"),
    ([unit(max_capacity=-1)], "at least 0"),
    ([unit(memory_mib_per_instance=0)], "at least 1"),  # a command gets some memory
])
def test_a_capacity_that_breaks_the_limits_or_the_rules_is_422(
        api: ApiFor, units: list[dict[str, Any]], problem: str) -> None:
    before = state()
    status, body = api("admin").put("/api/v1/capacity", {"capacity_limits": units})
    assert_error(status, body, 422)
    assert problem in str(body["error"]["fields"]), body
    assert state() == before


# Reading shares -----------------------------------------------------------------------


def test_list_and_get_quota_shares(api: ApiFor) -> None:
    status, body = api("other").get("/api/v1/quota-shares")
    assert status == 200
    assert [s["name"] for s in body["quota_shares"]] == ["QS1", "QS2", "QS3"]
    qs1 = body["quota_shares"][0]
    assert qs1 == api("other").get("/api/v1/quota-shares/QS1")[1]
    assert qs1 == {
        "name": "QS1", "capacity_limits": [{"capacity_unit": UNIT, "max_capacity": 2}],
        "sharing_strategy": "LEND_AND_BORROW", "borrow_limit": 100,
        "in_share_preemption": False, "state": "ENABLED", "max_keep_alive_seconds": 3600,
        "fair_share_weight": 1, "min_runtime_seconds": 0,
        "max_queued_jobs": 1000, "max_submissions_per_minute": 120, "members": ["member"],
        "usage": {UNIT: {"limit": 2, "in_use": 0, "own": 0, "borrowed": 0, "lent": 0,
                         "warm": 0, "queued": 0, "past_borrowed": None}},
    }


def test_a_shares_usage_is_its_latest_sample(world: World, api: ApiFor) -> None:
    qs1 = world.shares["QS1"]
    now = timezone.now()
    for in_use, queued in ((1, 3), (3, 1)):
        UsageSample.objects.create(time=now, quota_share=qs1, capacity_unit=UNIT, limit=2,
                                   in_use=in_use, own=2, borrowed=1, lent=0, warm=0,
                                   queued=queued)
    usage = api("other").get("/api/v1/quota-shares/QS1")[1]["usage"]
    assert usage == {UNIT: {"limit": 2, "in_use": 3, "own": 2, "borrowed": 1, "lent": 0,
                            "warm": 0, "queued": 1, "past_borrowed": None}}


def test_a_shares_past_borrowing_with_a_half_life(world: World, api: ApiFor,
                                                  settings: Any) -> None:
    """docs/semantics.md 5.4: with a half-life, each unit's usage carries the decayed past
    borrowing, folded from the usage samples: 1 instance borrowed for one half-life, from 0,
    stands at 1/2."""
    settings.QUOTAWEB = {**settings.QUOTAWEB, "FAIR_SHARE_HALF_LIFE_SECONDS": 3600}
    qs1 = world.shares["QS1"]
    UsageSample.objects.create(time=timezone.now() - timezone.timedelta(hours=1),
                               quota_share=qs1, capacity_unit=UNIT, limit=2, in_use=3, own=2,
                               borrowed=1, lent=0, warm=0, queued=0)
    usage = api("other").get("/api/v1/quota-shares/QS1")[1]["usage"]
    assert usage[UNIT]["past_borrowed"] == pytest.approx(0.5, abs=1e-3)
    qs2 = api("other").get("/api/v1/quota-shares/QS2")[1]["usage"]
    assert all(figures["past_borrowed"] == 0 for figures in qs2.values())


def test_a_missing_share_is_404(api: ApiFor) -> None:
    assert_error(*api("other").get("/api/v1/quota-shares/NOPE"), 404, "SHARE_NOT_FOUND")


# Creating and changing shares ---------------------------------------------------------


def test_create_a_share_with_members_by_username(api: ApiFor) -> None:
    status, body = api("admin").post("/api/v1/quota-shares", new_share(
        sharing_strategy="LEND_AND_BORROW", members=["member", "other"],
        max_keep_alive_seconds=600, in_share_preemption=True))
    assert status == 201, body
    assert (body["name"], body["borrow_limit"], body["state"]) == ("QS4", -1, "ENABLED")
    assert body["members"] == ["member", "other"] and body["max_keep_alive_seconds"] == 600
    assert body["usage"][UNIT]["limit"] == 0
    assert QuotaShare.live.filter(name="QS4", in_share_preemption=True).exists()
    assert Event.objects.filter(type="SHARE_UPDATED", quota_share="QS4").count() == 1


@pytest.mark.parametrize(("overrides", "field"), [
    ({"members": ["member", "nobody"]}, "members"),
    ({"name": "QS1"}, "name"),
    ({"capacity_limits": [{"capacity_unit": UNIT, "max_capacity": 1}]}, "capacity_limits"),
    ({"sharing_strategy": "RESERVE", "borrow_limit": 50}, "borrow_limit"),
    ({"max_keep_alive_seconds": 3601}, "max_keep_alive_seconds"),
    ({"capacity_limits": []}, "capacity_limits"),
    ({"fair_share_weight": 0}, "fair_share_weight"),
    ({"fair_share_weight": 10_001}, "fair_share_weight"),
    ({"min_runtime_seconds": -1}, "min_runtime_seconds"),
    ({"min_runtime_seconds": 86_401}, "min_runtime_seconds"),
])
def test_a_refused_share_names_its_field_and_changes_nothing(
        api: ApiFor, overrides: dict[str, Any], field: str) -> None:
    before = state()
    assert_error(*api("admin").post("/api/v1/quota-shares", new_share(**overrides)), 422,
                 field=field)
    assert state() == before


def test_patch_a_share(api: ApiFor) -> None:
    status, body = api("admin").patch("/api/v1/quota-shares/QS1", {
        "sharing_strategy": "LEND", "members": ["other"], "in_share_preemption": True,
        "capacity_limits": [{"capacity_unit": UNIT, "max_capacity": 1}]})
    assert status == 200, body
    assert (body["sharing_strategy"], body["borrow_limit"]) == ("LEND", None)
    assert body["members"] == ["other"] and body["in_share_preemption"] is True
    assert body["capacity_limits"] == [{"capacity_unit": UNIT, "max_capacity": 1}]
    details = Event.objects.get(type="SHARE_UPDATED").details
    assert details["fields"] == [
        "capacity_limits", "in_share_preemption", "members", "sharing_strategy"]
    # The values before and after, with the borrow_limit the new strategy cleared.
    assert details["after"] == {
        "borrow_limit": None, "capacity_limits": [{"capacity_unit": UNIT, "max_capacity": 1}],
        "in_share_preemption": True, "sharing_strategy": "LEND"}
    assert details["before"]["sharing_strategy"] == "LEND_AND_BORROW"
    assert details["before"]["borrow_limit"] is not None


def test_fair_sharing_fields_are_read_written_and_recorded(api: ApiFor) -> None:
    """docs/semantics.md 5.4 and 5.8: a share's weight and minimum runtime, a unit's switch."""
    status, body = api("admin").patch("/api/v1/quota-shares/QS1", {
        "fair_share_weight": 3, "min_runtime_seconds": 120})
    assert status == 200, body
    assert (body["fair_share_weight"], body["min_runtime_seconds"]) == (3, 120)
    details = Event.objects.get(type="SHARE_UPDATED").details
    assert details["fields"] == ["fair_share_weight", "min_runtime_seconds"]
    assert details["before"] == {"fair_share_weight": 1, "min_runtime_seconds": 0}
    assert details["after"] == {"fair_share_weight": 3, "min_runtime_seconds": 120}
    # A new share names them only when they are given (a whole configuration at its
    # defaults reads as it did before they existed).
    assert api("admin").post("/api/v1/quota-shares", new_share())[0] == 201
    created = Event.objects.get(type="SHARE_UPDATED", quota_share="QS4").details
    assert "fair_share_weight" not in created["after"]
    assert "fair_share_weight" not in created["fields"]
    status, body = api("admin").put("/api/v1/capacity", {"capacity_limits": [
        unit(max_capacity=4, warm_pool_limit=2, fair_sharing=True)]})
    assert status == 200, body
    assert body["capacity_limits"][0]["fair_sharing"] is True
    change = Event.objects.filter(type="CAPACITY_UPDATED").latest("id").details
    assert (change["before"], change["after"]) == ({"fair_sharing": False},
                                                   {"fair_sharing": True})


def test_patch_refusals_change_nothing(api: ApiFor) -> None:
    before = state()
    assert_error(*api("admin").patch("/api/v1/quota-shares/QS2", {
        "capacity_limits": [{"capacity_unit": UNIT, "max_capacity": 2}]}), 422,
        field="capacity_limits")
    assert_error(*api("admin").patch("/api/v1/quota-shares/QS2", {"name": "QS9"}), 422,
                 field="name")
    assert_error(*api("admin").patch("/api/v1/quota-shares/QS2", {"members": ["ghost"]}), 422,
                 field="members")
    assert_error(*api("admin").patch("/api/v1/quota-shares/NOPE", {"state": "DISABLED"}), 404)
    assert state() == before


# Deleting shares ----------------------------------------------------------------------


def test_only_a_disabled_share_can_be_deleted(api: ApiFor) -> None:
    before = state()
    assert_error(*api("admin").delete("/api/v1/quota-shares/QS3"), 409, "SHARE_NOT_DISABLED")
    assert state() == before


def test_deleting_a_share_terminates_its_jobs_and_frees_its_name(api: ApiFor) -> None:
    running = job("QS3", status="RUNNABLE")
    assert api("admin").patch("/api/v1/quota-shares/QS3", {"state": "DISABLED"})[0] == 200
    assert api("admin").delete("/api/v1/quota-shares/QS3") == (204, None)
    assert [s["name"] for s in api("other").get("/api/v1/quota-shares")[1]["quota_shares"]] == [
        "QS1", "QS2"]
    assert_error(*api("other").get("/api/v1/quota-shares/QS3"), 404)
    status, body = api("other").get(f"/api/v1/jobs/{running.id}")
    assert status == 200
    assert (body["status"], body["status_reason"], body["quota_share"]) == (
        "FAILED", "Quota share deleted", "QS3")
    assert api("admin").post("/api/v1/quota-shares", new_share(name="QS3"))[0] == 201
    assert Job.objects.get(pk=running.pk).quota_share.deleted_at is not None


def test_deleting_a_missing_share_is_404(api: ApiFor) -> None:
    assert_error(*api("admin").delete("/api/v1/quota-shares/NOPE"), 404)
