"""A quota share's queue limits (issue 11, item 5): at most max_queued_jobs jobs waiting
in the share (409 QUEUE_FULL beyond), at most max_submissions_per_minute submissions per
user and share (429 TOO_MANY_SUBMISSIONS with Retry-After); administrators set both, the
share's page shows them, and a refusal changes nothing."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from quotaweb.models import Job, QuotaShare
from quotaweb.models.shares import (
    DEFAULT_MAX_QUEUED_JOBS,
    DEFAULT_MAX_SUBMISSIONS_PER_MINUTE,
)

from . import test_api_helpers as helpers
from .test_api_helpers import Api, assert_error, state, submission

pytestmark = pytest.mark.django_db

api, world = helpers.api, helpers.world

ApiFor = Callable[[str], Api]


def limit(**fields: int) -> None:
    QuotaShare.live.filter(name="QS1").update(**fields)


def test_new_shares_get_sensible_defaults(api: ApiFor) -> None:
    status, body = api("admin").get("/api/v1/quota-shares/QS1")
    assert status == 200
    assert body["max_queued_jobs"] == DEFAULT_MAX_QUEUED_JOBS == 1000
    assert body["max_submissions_per_minute"] == DEFAULT_MAX_SUBMISSIONS_PER_MINUTE == 120


def test_a_full_queue_refuses_a_submission_with_409_naming_the_limit(api: ApiFor) -> None:
    limit(max_queued_jobs=3)
    for number in range(3):
        assert api("member").post("/api/v1/jobs", submission(name=f"j{number}"))[0] == 201
    before = state()
    status, body = api("admin").post("/api/v1/jobs", submission(name="one-too-many"))
    assert_error(status, body, 409, "QUEUE_FULL")
    assert "max_queued_jobs 3" in body["error"]["message"]
    assert "QS1" in body["error"]["message"]
    assert state() == before
    # Another share's queue is its own; a job that starts makes room.
    assert api("qs2_member").post("/api/v1/jobs", submission(quota_share="QS2"))[0] == 201
    Job.objects.filter(name="j0").update(status="RUNNING")
    assert api("member").post("/api/v1/jobs", submission(name="room"))[0] == 201


def test_a_repeated_client_token_is_answered_even_when_the_queue_is_full(api: ApiFor) -> None:
    limit(max_queued_jobs=1)
    status, first = api("member").post("/api/v1/jobs", submission(client_token="t-1"))
    assert status == 201
    status, again = api("member").post("/api/v1/jobs", submission(client_token="t-1"))
    assert (status, again["id"]) == (200, first["id"])


def test_too_many_submissions_in_a_minute_is_429_with_retry_after(api: ApiFor) -> None:
    limit(max_submissions_per_minute=2)
    for number in range(2):
        assert api("member").post("/api/v1/jobs", submission(name=f"j{number}"))[0] == 201
    before = state()
    client = api("member")
    response = client.client.post("/api/v1/jobs", submission(name="j2"),
                                  content_type="application/json", headers=client.headers)
    assert_error(response.status_code, response.json(), 429, "TOO_MANY_SUBMISSIONS")
    message = response.json()["error"]["message"]
    assert "max_submissions_per_minute 2" in message and "QS1" in message
    assert 1 <= int(response["Retry-After"]) <= 60
    assert state() == before
    # Per user: the administrator may still submit; a minute later the member may too.
    assert api("admin").post("/api/v1/jobs", submission(name="admins"))[0] == 201
    Job.objects.filter(submitted_by__username="member").update(
        created_at=timezone.now() - timedelta(seconds=61))
    assert api("member").post("/api/v1/jobs", submission(name="later"))[0] == 201


def test_the_submit_form_shows_the_refusal_naming_the_limit(world: Any) -> None:
    limit(max_queued_jobs=1)
    helpers.job("QS1", status="RUNNABLE")
    client = Client()
    client.force_login(world.users["member"])
    response = client.post("/submit", {
        "name": "from-form", "quota_share": "QS1", "instance_type": helpers.UNIT,
        "instance_count": "1", "priority": "0", "duration_seconds": "30",
        "keep_alive_seconds": "0", "retry_attempts": "1", "max_runtime_seconds": "86400",
        "volume_size_gb": "0"})
    assert response.status_code == 422
    assert "max_queued_jobs 1" in response.content.decode()


@pytest.mark.parametrize(("change", "expected"), [
    ({"max_queued_jobs": 5}, 200), ({"max_submissions_per_minute": 30}, 200),
    ({"max_queued_jobs": 0}, 422), ({"max_submissions_per_minute": -1}, 422),
    ({"max_queued_jobs": "5"}, 422),
])
def test_administrators_set_the_limits(api: ApiFor, change: dict[str, Any],
                                       expected: int) -> None:
    status, body = api("admin").patch("/api/v1/quota-shares/QS1", change)
    assert status == expected, body
    if expected == 200:
        [(field, value)] = change.items()
        assert body[field] == value
        assert getattr(QuotaShare.live.get(name="QS1"), field) == value
    assert_error(*api("member").patch("/api/v1/quota-shares/QS1", change), 403)


def test_the_share_page_shows_the_limits_and_administrators_change_them(world: Any) -> None:
    limit(max_queued_jobs=7, max_submissions_per_minute=11)
    helpers.job("QS1", status="RUNNABLE")
    member = Client()
    member.force_login(world.users["member"])
    html = member.get("/shares/QS1").content.decode()
    assert "1 of 7 queued jobs" in html and "11 submissions per user per minute" in html
    admin = Client()
    admin.force_login(world.users["admin"])
    form = {"sharing_strategy": "LEND_AND_BORROW", "borrow_limit": "100", "state": "ENABLED",
            "max_keep_alive_seconds": "3600", "max_queued_jobs": "50",
            "max_submissions_per_minute": "20", "limit_0": "2",
            "members": [str(world.users["member"].pk)]}
    assert admin.post("/shares/QS1", form).status_code == 302
    share = QuotaShare.live.get(name="QS1")
    assert (share.max_queued_jobs, share.max_submissions_per_minute) == (50, 20)


def test_the_openapi_schema_documents_the_limits_and_the_429(api: ApiFor) -> None:
    schema = api("member").get("/api/v1/openapi.json")[1]
    assert "429" in schema["paths"]["/api/v1/jobs"]["post"]["responses"]
    share = schema["components"]["schemas"]["QuotaShareOut"]["properties"]
    assert {"max_queued_jobs", "max_submissions_per_minute"} <= set(share)


def test_a_limit_at_its_largest_value_is_lifted_and_never_counted(api: ApiFor) -> None:
    """2147483647 (MAX_INT) lifts a limit: no count could reach it, so admission reads
    neither the queue nor the user's last minute; the next value down is still counted."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from quotaweb.services.values import MAX_INT

    def counts_made() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert api("member").post("/api/v1/jobs", submission())[0] == 201
        return sum(query["sql"].count("count(") + query["sql"].count("COUNT(")
                   for query in queries)

    limit(max_queued_jobs=MAX_INT, max_submissions_per_minute=MAX_INT)
    assert counts_made() == 0
    limit(max_queued_jobs=MAX_INT - 1, max_submissions_per_minute=MAX_INT)
    assert counts_made() >= 1
    limit(max_queued_jobs=MAX_INT, max_submissions_per_minute=MAX_INT - 1)
    assert counts_made() >= 1
