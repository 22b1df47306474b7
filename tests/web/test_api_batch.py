"""POST /api/v1/jobs/batch: up to 1,000 submissions in one request, all or nothing, in
order, with each refused item named by its index (docs/api.md, Jobs)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from django.db import connection
from django.db.models.signals import pre_init
from django.test import Client
from django.test.utils import CaptureQueriesContext

from quotaweb.api.schemas import jobs as job_schemas
from quotaweb.models import Event, Job, QuotaShare, WarmPoolSegment
from quotaweb.services import batch as batch_services
from quotaweb.services.submission import request_fingerprint

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


# The answer: each job as GET /jobs/{id} shows it, byte for byte -------------------------

FULL = {"priority": 7, "instance_count": 2, "keep_alive_seconds": 0, "role": "r",
        "volume_size_gb": 5, "volume_kms_key_id": "k", "security_group_ids": ["sg-1", "sg-2"],
        "subnets": ["s"], "enable_network_isolation": True, "retry_attempts": 3,
        "preemption_retries_before_termination": 2, "max_runtime_seconds": 600,
        "min_runtime_seconds": 0, "environment": {"A": "é", "B": "2"}}
# (In jsonb's key order: a job read back lists its environment so; a new job's answer, as
# POST /jobs's, in the order sent.)


def raw_post(client: Api, body: object) -> tuple[int, bytes, str]:
    response = client.client.post(URL, json.dumps(body), content_type="application/json",
                                  headers=client.headers)
    return response.status_code, response.content, response["Content-Type"]


def shown_one_by_one(client: Api, ids: list[int]) -> bytes:
    """{"jobs": [...]} as ninja writes it, from each job's GET /jobs/{id}."""
    answers = [client.client.get(f"/api/v1/jobs/{job_id}", headers=client.headers)
               for job_id in ids]
    assert all(answer.status_code == 200 for answer in answers)
    return b'{"jobs": [' + b", ".join(answer.content for answer in answers) + b"]}"


def test_a_batch_answers_each_job_as_get_job_shows_it_byte_for_byte(api: ApiFor) -> None:
    member = api("member")
    batch = {"jobs": [submission(name="plain"),
                      submission(name="full", client_token="b-0", **FULL),
                      submission(name="tok", client_token="b-1", priority=3),
                      submission(name="tok2", client_token="b-2")]}
    status, content, kind = raw_post(member, batch)
    assert status == 201 and kind == "application/json; charset=utf-8", content
    ids = [job["id"] for job in json.loads(content)["jobs"]]
    assert content == shown_one_by_one(member, ids)
    # Repeats (read back) beside a new job; one of them RUNNABLE (its position), one
    # with an attempt.
    Job.objects.filter(pk=ids[2]).update(status="RUNNABLE", pending_code="WAITING_FOR_CAPACITY")
    helpers.attempt(Job.objects.get(pk=ids[3]), outcome="PREEMPTED", kind="IN_SHARE")
    Job.objects.filter(pk=ids[3]).update(status="RUNNABLE", preempted_count=1)
    helpers.available_pool(Job.objects.get(pk=ids[1]), retained=12.5)  # ended, a pool
    WarmPoolSegment.objects.filter(job_id=ids[1]).update(status="Terminated")
    again = {"jobs": [batch["jobs"][3], submission(name="new"), batch["jobs"][2],
                      {**batch["jobs"][1], "client_token": "b-0"}]}
    status, content, _ = raw_post(member, again)
    assert status == 201, content
    shown = json.loads(content)["jobs"]
    assert [job["id"] for job in shown][::2] == [ids[3], ids[2]] and shown[3]["id"] == ids[1]
    assert shown[3]["warm_pool"]["retained_billable_seconds"] == 12.5
    assert shown[2]["position"] == 1 and shown[0]["position"] == 2  # priority 3 first
    assert content == shown_one_by_one(member, [job["id"] for job in shown])
    # Every item a repeat: 200, and the same answer.
    status, content, _ = raw_post(member, {"jobs": [batch["jobs"][2], batch["jobs"][3]]})
    assert status == 200 and content == shown_one_by_one(member, [ids[2], ids[3]])


def test_one_submission_answers_as_get_job_shows_it_byte_for_byte_unvalidated(
        api: ApiFor, monkeypatch: pytest.MonkeyPatch) -> None:
    """POST /jobs writes its job as ninja writes JobOut (status, Content-Type, body), without
    running ninja's response validation (job_out_dump): new (201) and repeated (200, read
    back: a position, an attempt, a warm pool)."""
    import ninja.operation

    validated: list[object] = []
    real = ninja.operation.ResponseObject

    def counted(result: object) -> object:
        validated.append(result)
        return real(result)

    member = api("member")

    def posted(body: dict[str, object]) -> tuple[int, bytes, str]:
        validated.clear()
        monkeypatch.setattr(ninja.operation, "ResponseObject", counted)
        try:
            response = member.client.post("/api/v1/jobs", json.dumps(body),
                                          content_type="application/json",
                                          headers=member.headers)
        finally:
            monkeypatch.setattr(ninja.operation, "ResponseObject", real)
        assert validated == [], "POST /jobs validated its answer with JobOut"
        return response.status_code, response.content, response["Content-Type"]

    def shown(job_id: int) -> bytes:
        return shown_one_by_one(member, [job_id])[len(b'{"jobs": ['):-len(b"]}")]

    bodies = [submission(name="plain"), submission(name="full", client_token="one-0", **FULL),
              submission(name="tok", client_token="one-1", priority=3)]
    ids = []
    for body in bodies:
        status, content, kind = posted(body)
        assert status == 201 and kind == "application/json; charset=utf-8", content
        ids.append(json.loads(content)["id"])
        assert content == shown(ids[-1])
    Job.objects.filter(pk=ids[2]).update(status="RUNNABLE", pending_code="WAITING_FOR_CAPACITY")
    helpers.attempt(Job.objects.get(pk=ids[1]), outcome="PREEMPTED", kind="IN_SHARE")
    helpers.available_pool(Job.objects.get(pk=ids[1]), retained=12.5)
    WarmPoolSegment.objects.filter(job_id=ids[1]).update(status="Terminated")
    for body, job_id in zip(bodies[1:], ids[1:], strict=True):
        status, content, kind = posted(body)
        assert status == 200 and kind == "application/json; charset=utf-8", content
        assert content == shown(job_id)
    assert json.loads(posted(bodies[1])[1])["warm_pool"]["retained_billable_seconds"] == 12.5


def test_a_batch_costs_the_same_queries_whatever_its_length(api: ApiFor) -> None:
    """No query per job: not for the checks, the repeats, nor the answer."""
    member = api("member")

    def queries(count: int, start: int) -> tuple[int, int]:
        batch = {"jobs": [submission(name=f"q{n}", client_token=f"q-{n}")
                          for n in range(start, start + count)]}
        counted = []
        for _ in range(2):  # created, then every item repeated
            with CaptureQueriesContext(connection) as done:
                status, content, _ = raw_post(member, batch)
            assert status in (200, 201), content
            counted.append(len(done))
        return counted[0], counted[1]

    queries(2, 1000)  # warm (the token's last use is written once a minute)
    assert queries(3, 0) == queries(40, 100)


@pytest.mark.parametrize("listened", [False, True], ids=["plain", "init-signals"])
def test_a_batch_job_is_stored_as_the_same_single_submission(
        api: ApiFor, listened: bool) -> None:
    """Every column of a batch's job as POST /jobs stores it (the batch builds its rows
    its own way; as Django does when something listens to Job's construction)."""
    member = api("member")
    made: list[object] = []

    def heard(sender: object, **kwargs: object) -> None:
        made.append(sender)

    if listened:
        pre_init.connect(heard, sender=Job)
    try:
        fields = submission(**FULL, client_token="same-fields")
        status, body = member.post(URL, {"jobs": [fields, submission(name="other")]})
    finally:
        pre_init.disconnect(heard, sender=Job)
    assert status == 201, body
    assert bool(made) == listened
    status, single = member.post("/api/v1/jobs", {**fields, "client_token": "other-token"})
    assert status == 201, single
    batch_row, single_row = (Job.objects.filter(pk=pk).values().get()
                             for pk in (body["jobs"][0]["id"], single["id"]))
    different = {"id", "created_at", "client_token", "request_fingerprint"}
    assert {key: value for key, value in batch_row.items() if key not in different} == {
        key: value for key, value in single_row.items() if key not in different}
    assert (batch_row["submitted_priority"], batch_row["submitted_keep_alive_seconds"]) == (
        7, 0)
    assert batch_row["request_fingerprint"] == request_fingerprint(fields)


# The fingerprint that recognises a repeat: stored, so it never changes ----------------

PINNED_FINGERPRINTS = [
    ({"name": "sweep-1", "quota_share": "QS1", "instance_type": "ml.g5.xlarge",
      "duration_seconds": 30},
     "15fa391cd61ddf8068a5d6d330f8bb2035f89eb6c7437f4b8c3592a007870e72"),
    ({"name": "full", "quota_share": "QS1", "instance_type": "ml.g5.xlarge", **FULL,
      "keep_alive_seconds": 60, "min_runtime_seconds": 30, "enable_network_isolation": True,
      "enable_inter_container_traffic_encryption": False, "command": "echo hi",
      "client_token": "tok-1"},
     "389b6a9a9e0bc206c7e4492a6f010e545c016507f633facddf5a4642d693080c"),
]


@pytest.mark.parametrize(("fields", "fingerprint"), PINNED_FINGERPRINTS)
def test_the_request_fingerprint_is_pinned(fields: dict[str, object], fingerprint: str) -> None:
    assert request_fingerprint(fields) == fingerprint


def test_a_batch_stores_the_same_fingerprint_as_a_single_submission(api: ApiFor) -> None:
    fields, fingerprint = PINNED_FINGERPRINTS[0]
    status, body = api("member").post(URL, {"jobs": [fields]})
    assert status == 201, body
    assert Job.objects.get(pk=body["jobs"][0]["id"]).request_fingerprint == fingerprint


# Refusals read as they always did, whichever way the batch was checked -----------------

BAD_ITEMS = [
    {"priority": 10_000}, {"priority": True}, {"instance_count": "two"}, {"unknown": 1},
    {"name": "bad name"}, {"quota_share": "nope"}, {"instance_type": "ml.unknown"},
    {"keep_alive_seconds": 10**9}, {"min_runtime_seconds": 10**6}, {"environment": {"": "x"}},
    {"command": "echo", "duration_seconds": 5}, {"duration_seconds": None},
    {"client_token": ""}, {"subnets": ["x" * 300]}, {"name": "a\x00b"},
    {"environment": {"A": "\ud800"}}, {"role": "r\\u0000"},
]


def one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Turn off the checks of a whole batch at once (JobBatchIn's and the services'):
    every item checked alone, as before they existed."""
    monkeypatch.setattr(job_schemas, "_valid_batch", lambda data: None)
    monkeypatch.setattr(batch_services, "check_all", lambda items: None)


@pytest.mark.parametrize("bad", BAD_ITEMS, ids=[str(item) for item in BAD_ITEMS])
def test_a_bad_item_is_refused_as_when_each_item_was_checked_alone(
        api: ApiFor, bad: dict[str, object], monkeypatch: pytest.MonkeyPatch) -> None:
    member = api("member")
    batch = {"jobs": [submission(name="good"), submission(**bad), submission(priority=-1)]}
    status, body = member.post(URL, batch)
    with monkeypatch.context() as patched:
        one_by_one(patched)
        alone_status, alone = member.post(URL, batch)
    assert status == alone_status == 422 and body == alone, (body, alone)


def test_refusals_that_depend_on_the_share_keep_their_words(
        api: ApiFor, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every item a valid Submission (so checked at once): what the share refuses is said
    item by item, in submit_job's words."""
    from quotaweb.services.submission_schema import check_all

    answers: list[object] = []

    def spied(items: list[object]) -> object:
        answers.append(check_all(items))
        return answers[-1]

    monkeypatch.setattr(batch_services, "check_all", spied)
    batch = {"jobs": [submission(**bad) for bad in BAD_ITEMS[5:9]]}
    status, body = api("member").post(URL, batch)
    assert answers and answers[0] is not None, "the batch was checked at once"
    assert status == 422 and body["error"] == {
        "code": "VALIDATION_ERROR",
        "message": "4 of 4 jobs cannot be submitted; nothing was submitted.",
        "fields": {
            "jobs[0].quota_share": ["Quota share nope does not exist."],
            "jobs[1].instance_type": ["Quota share QS1 has no capacity limit for ml.unknown; "
                                      "use one of ml.g5.xlarge."],
            "jobs[2].keep_alive_seconds": ["keep_alive_seconds 1000000000 is above quota "
                                           "share QS1's cap of 3600."],
            "jobs[3].min_runtime_seconds": ["min_runtime_seconds 1000000 is above quota share "
                                            "QS1's minimum runtime of 0."]}}, body


def test_a_valid_batch_is_accepted_either_way(api: ApiFor,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    batch = {"jobs": [submission(name="a", **FULL), submission(name="b", role="r\\u0000"),
                      submission(name="c", environment={"K": "😀"})]}
    assert api("member").post(URL, batch)[0] == 201
    one_by_one(monkeypatch)
    assert api("member").post(URL, batch)[0] == 201
