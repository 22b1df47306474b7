"""POST /api/v1/jobs/batch: up to 1,000 submissions in one request, all or nothing, in
order, with each refused item named by its index (docs/api.md, Jobs)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.test import Client

from quotaweb.models import Event, Job, QuotaShare

from . import test_api_helpers as helpers
from .test_api_helpers import Api, World, assert_error, state, submission

# The helpers' fixtures, made available to this module's tests.
api, world = helpers.api, helpers.world

pytestmark = pytest.mark.django_db

ApiFor = Callable[[str], Api]
URL = "/api/v1/jobs/batch"


def sweep(count: int, **overrides: object) -> dict[str, object]:
    return {"jobs": [submission(name=f"sweep-{n}", priority=n % 5, **overrides)
                     for n in range(count)]}


def test_a_batch_is_submitted_in_order_with_its_events(api: ApiFor) -> None:
    status, body = api("member").post(URL, sweep(3))
    assert status == 201, body
    names = [job["name"] for job in body["jobs"]]
    assert names == ["sweep-0", "sweep-1", "sweep-2"]
    ids = [job["id"] for job in body["jobs"]]
    assert ids == sorted(ids) and list(Job.objects.order_by("id").values_list("id", flat=True)) \
        == ids, "submission order follows the batch's order"
    assert all(job["status"] == "SUBMITTED" and job["submitted_by"] == "member"
               for job in body["jobs"])
    events = list(Event.objects.filter(type="SUBMITTED").order_by("id"))
    assert [event.job_id for event in events] == ids


def test_one_bad_item_refuses_the_whole_batch_naming_each_bad_item(api: ApiFor) -> None:
    before = state()
    batch = sweep(4)
    batch["jobs"][1]["priority"] = 10_000  # type: ignore[index]
    batch["jobs"][3]["instance_type"] = "ml.unknown"  # type: ignore[index]
    status, body = api("member").post(URL, batch)
    assert_error(status, body, 422, "VALIDATION_ERROR")
    assert set(body["error"]["fields"]) == {"jobs[1].priority", "jobs[3].instance_type"}
    assert "2 of 4 jobs" in body["error"]["message"]
    assert state() == before


def test_a_type_error_in_an_item_is_named_by_its_index_too(api: ApiFor) -> None:
    batch = sweep(2)
    batch["jobs"][1]["instance_count"] = "two"  # type: ignore[index]
    status, body = api("member").post(URL, batch)
    assert_error(status, body, 422, field="jobs[1].instance_count")
    assert not Job.objects.exists()


def test_permission_comes_before_validation(api: ApiFor) -> None:
    """An item for a share the member may not submit to refuses the batch with 403, even
    when another item is also invalid."""
    batch = sweep(3)
    batch["jobs"][0]["priority"] = -1  # type: ignore[index]
    batch["jobs"][2]["quota_share"] = "QS3"  # type: ignore[index]
    before = state()
    status, body = api("member").post(URL, batch)
    assert_error(status, body, 403)
    assert "QS3" in body["error"]["message"]
    assert state() == before


def test_client_tokens_make_a_repeated_batch_return_the_same_jobs(api: ApiFor) -> None:
    batch = {"jobs": [submission(name=f"t{n}", client_token=f"sweep-7-{n}") for n in range(3)]}
    status, first = api("member").post(URL, batch)
    assert status == 201, first
    status, again = api("member").post(URL, batch)
    assert status == 200, again
    assert [job["id"] for job in again["jobs"]] == [job["id"] for job in first["jobs"]]
    assert Job.objects.count() == 3
    # A batch that mixes a repeat with a new job creates only the new one.
    batch["jobs"].append(submission(name="t3", client_token="sweep-7-3"))
    status, mixed = api("member").post(URL, batch)
    assert status == 201 and Job.objects.count() == 4
    assert [job["id"] for job in mixed["jobs"]][:3] == [job["id"] for job in first["jobs"]]


def test_a_client_token_twice_in_one_batch_is_refused(api: ApiFor) -> None:
    batch = {"jobs": [submission(client_token="same"), submission(client_token="same")]}
    status, body = api("member").post(URL, batch)
    assert_error(status, body, 422, field="jobs[1].client_token")
    assert not Job.objects.exists()


def test_a_token_reused_with_other_fields_is_a_conflict(api: ApiFor) -> None:
    api("member").post(URL, {"jobs": [submission(client_token="k")]})
    status, body = api("member").post(URL, {"jobs": [submission(client_token="k", priority=3),
                                                     submission(name="fresh")]})
    assert_error(status, body, 409, "CLIENT_TOKEN_REUSED")
    assert Job.objects.count() == 1


def test_the_whole_batch_counts_against_the_shares_queue_limit(
    api: ApiFor, world: World,
) -> None:
    QuotaShare.objects.filter(name="QS1").update(max_queued_jobs=5)
    api("member").post(URL, sweep(3))
    before = state()
    status, body = api("member").post(URL, sweep(3))
    assert_error(status, body, 409, "QUEUE_FULL")
    assert "3 more would pass its limit" in body["error"]["message"]
    assert state() == before
    assert api("member").post(URL, sweep(2))[0] == 201


def test_a_batch_larger_than_a_minute_allows_is_refused_with_what_to_do(api: ApiFor) -> None:
    QuotaShare.objects.filter(name="QS1").update(max_submissions_per_minute=4)
    status, body = api("member").post(URL, sweep(5))
    assert_error(status, body, 429, "TOO_MANY_SUBMISSIONS")
    assert "smaller batches" in body["error"]["message"]
    assert not Job.objects.exists()


@pytest.mark.parametrize("jobs", [[], [submission()] * 1001])
def test_a_batch_has_1_to_1000_jobs(api: ApiFor, jobs: list[object]) -> None:
    status, body = api("member").post(URL, {"jobs": jobs})
    assert_error(status, body, 422, field="jobs")
    assert not Job.objects.exists()


def test_anonymous_batches_are_refused(api: ApiFor) -> None:
    assert_error(*api("anonymous").post(URL, sweep(1)), 401)


# The submit form's sweep ---------------------------------------------------------------


def sweep_form(**overrides: object) -> dict[str, object]:
    return {"name": "lr-{n}", "quota_share": "QS1", "instance_type": "ml.g5.xlarge",
            "instance_count": "1", "priority": "2", "duration_seconds": "30",
            "keep_alive_seconds": "0", "retry_attempts": "1", "max_runtime_seconds": "600",
            "volume_size_gb": "0", "count": "4", "client_token": "form-token", **overrides}


def test_the_submit_form_submits_a_sweep_named_from_its_pattern(world: World) -> None:
    browser = Client()
    browser.force_login(world.users["member"])
    response = browser.post("/submit", sweep_form())
    assert response.status_code == 302 and response["Location"] == "/jobs?quota_share=QS1"
    assert list(Job.objects.order_by("id").values_list("name", flat=True)) == [
        "lr-1", "lr-2", "lr-3", "lr-4"]
    # A double submit of the same form makes no job twice.
    assert browser.post("/submit", sweep_form()).status_code == 302
    assert Job.objects.count() == 4
    # Without {n}, -1, -2, ... is added; a bad field is said once, on the field.
    response = browser.post("/submit", sweep_form(name="plain", client_token="t2",
                                                  priority="10000", count="3"))
    assert response.status_code == 422 and Job.objects.count() == 4
    page = response.content.decode()
    assert page.count("priority must be between 0 and 9999") == 1, page
    assert browser.post("/submit", sweep_form(name="plain", client_token="t3",
                                              count="2")).status_code == 302
    assert list(Job.objects.filter(name__startswith="plain").values_list("name", flat=True)
                .order_by("id")) == ["plain-1", "plain-2"]
    assert browser.post("/submit", sweep_form(count="1001")).status_code == 422
