"""POST /api/v1/what-if (docs/api.md, What-if): administrators only, refused before the body
is read; bad input is a clear 4xx that changes nothing; the answer compares per share."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from . import test_api_helpers as helpers
from .test_api_helpers import UNIT, Api, assert_error, job, state

pytestmark = pytest.mark.django_db

api, world = helpers.api, helpers.world

ApiFor = Callable[[str], Api]


def period(minutes: int = 30) -> dict[str, str]:
    now = timezone.now()
    return {"start": (now - timedelta(minutes=1)).isoformat(),
            "end": (now + timedelta(minutes=minutes)).isoformat()}


def queue_in_qs3() -> None:
    """Three 60 s jobs in QS3 (RESERVE, limit 1): each waits for the one before."""
    for number in range(3):
        job("QS3", name=f"q{number}")


def test_raising_a_limit_lowers_the_wait(api: ApiFor) -> None:
    queue_in_qs3()
    before = state()

    status, body = api("admin").post("/api/v1/what-if", {
        **period(),
        "capacity": [{"capacity_unit": UNIT, "max_capacity": 6}],
        "quota_shares": [{"name": "QS3",
                          "capacity_limits": [{"capacity_unit": UNIT, "max_capacity": 3}]}],
    })

    assert status == 200, body
    assert body["jobs"] == 3
    qs3 = next(row for row in body["shares"] if row["quota_share"] == "QS3")
    # Cold start 60 s + 60 s of work: each job waits 120 s more than the one before.
    assert qs3["recorded"]["mean_wait_seconds"] == 120
    assert qs3["recorded"]["p95_wait_seconds"] == 240
    assert qs3["changed"]["mean_wait_seconds"] == 0
    assert qs3["changed"]["instance_hours"] == qs3["recorded"]["instance_hours"]
    assert body["changed_configuration"]["capacity"][0]["max_capacity"] == 6
    assert body["timelines"]["recorded"] and body["timelines"]["changed"]
    assert state() == before  # a what-if changes nothing


def test_the_fair_sharing_fields_are_accepted_and_carried(api: ApiFor) -> None:
    """docs/semantics.md 5.4 and 5.8 in a what-if: fleet-wide fair sharing, a unit's switch,
    a share's weight and minimum runtime hold in the changed replay."""
    queue_in_qs3()
    status, body = api("admin").post("/api/v1/what-if", {
        **period(), "fair_sharing": True, "fair_share_half_life_seconds": 600,
        "capacity": [{"capacity_unit": UNIT, "fair_sharing": True}],
        "quota_shares": [{"name": "QS1", "fair_share_weight": 4, "min_runtime_seconds": 60}],
    })
    assert status == 200, body
    assert body["fair_sharing"] == {"recorded": False, "changed": True}
    assert body["fair_share_half_life_seconds"] == {"recorded": 0, "changed": 600}
    changed = body["changed_configuration"]
    assert changed["capacity"][0]["fair_sharing"] is True
    qs1 = next(share for share in changed["quota_shares"] if share["name"] == "QS1")
    assert (qs1["fair_share_weight"], qs1["min_runtime_seconds"]) == (4, 60)
    recorded = next(s for s in body["configuration"]["quota_shares"] if s["name"] == "QS1")
    assert "fair_share_weight" not in recorded  # at its default, left out


def test_members_are_refused_before_the_body_is_read(api: ApiFor) -> None:
    before = state()
    for role in ("member", "other"):
        status, body = api(role).post("/api/v1/what-if", {"start": "not a time"})
        assert_error(status, body, 403, "FORBIDDEN")
    assert state() == before


@pytest.mark.parametrize(("body", "field"), [
    ({"start": "yesterday"}, "start"),
    ({"quota_shares": [{"name": "QS9", "in_share_preemption": True}]}, "quota_shares"),
    ({"quota_shares": [{"name": "QS3", "state": "DISABLED"}]}, "quota_shares"),
    ({"capacity": [{"capacity_unit": "ml.p5", "max_capacity": 1}]}, "capacity"),
    # Σ limits 4 above a capacity of 1: the scenario's check names the shares' limits.
    ({"capacity": [{"capacity_unit": UNIT, "max_capacity": 1}]}, "quota_shares"),
    ({"quota_shares": [{"name": "QS2", "borrow_limit": 50}]}, "quota_shares"),
    ({"quota_shares": [{"name": "QS2", "fair_share_weight": 0}]}, "quota_shares"),
    ({"quota_shares": [{"name": "QS2", "min_runtime_seconds": -1}]}, "quota_shares"),
    ({"fair_sharing": "yes"}, "fair_sharing"),
    ({"fair_share_half_life_seconds": -1}, "fair_share_half_life_seconds"),
    ({"fair_share_half_life_seconds": 40_000_000}, "fair_share_half_life_seconds"),
])
def test_bad_input_is_a_422_that_changes_nothing(api: ApiFor, body: dict[str, Any],
                                                  field: str) -> None:
    queue_in_qs3()
    before = state()
    status, answer = api("admin").post("/api/v1/what-if", {**period(), **body})
    assert_error(status, answer, 422)
    assert any(name.startswith(field) for name in answer["error"]["fields"]), answer
    assert state() == before


def test_the_period_is_capped(api: ApiFor) -> None:
    now = timezone.now()
    status, body = api("admin").post("/api/v1/what-if", {
        "start": (now - timedelta(days=8)).isoformat(), "end": now.isoformat()})
    assert_error(status, body, 422, field="start")
    status, body = api("admin").post("/api/v1/what-if", {
        "start": now.isoformat(), "end": (now - timedelta(hours=1)).isoformat()})
    assert_error(status, body, 422, field="end")


def test_the_number_of_jobs_is_capped(api: ApiFor, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("quotaweb.services.recorded_history.MAX_JOBS", 2)
    queue_in_qs3()
    status, body = api("admin").post("/api/v1/what-if", period())
    assert_error(status, body, 422, field="start")
    assert "at most 2" in body["error"]["message"] + str(body["error"]["fields"])


def test_a_replay_over_its_time_budget_is_refused(api: ApiFor,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("quotaweb.services.what_if.REPLAY_BUDGET_SECONDS", -1)
    queue_in_qs3()
    status, body = api("admin").post("/api/v1/what-if", period())
    assert_error(status, body, 422, "WHAT_IF_TOO_LARGE", field="start")
