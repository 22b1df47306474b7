"""The jobs endpoints (docs/api.md, Jobs): submission and its idempotency, the Job
representation (positions, attempts, preemptions, warm pool, secrets), listing with
filters and cursors, changes, termination and logs."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from quotaweb.models import Event, Job, LogChunk, QuotaShare, WarmPool, WarmPoolSegment

from . import test_api_helpers as helpers
from .test_api_helpers import (
    Api,
    World,
    assert_error,
    attempt,
    available_pool,
    job,
    state,
    submission,
)

# The helpers' fixtures, made available to this module's tests.
api, world = helpers.api, helpers.world

pytestmark = pytest.mark.django_db

ApiFor = Callable[[str], Api]

JOB_FIELDS = {
    "id", "name", "quota_share", "priority", "status", "status_reason", "pending_reason",
    "position", "estimated_start_at", "estimate_basis", "instance_type", "instance_count",
    "created_at", "scheduled_at", "started_at",
    "stopped_at", "attempts", "preemption_summary", "warm_pool", "keep_alive_seconds", "role",
    "volume_size_gb", "volume_kms_key_id", "security_group_ids", "subnets",
    "enable_network_isolation", "enable_inter_container_traffic_encryption", "retry_attempts",
    "preemption_retries_before_termination", "max_runtime_seconds", "min_runtime_seconds",
    "environment", "command",
    "duration_seconds", "client_token", "executor", "submitted_by", "preempted_count",
    "failed_count",
}


# Submitting ---------------------------------------------------------------------------


def test_submit_answers_201_with_the_job_and_every_submitted_field(api: ApiFor) -> None:
    status, body = api("member").post("/api/v1/jobs", submission(
        priority=3, keep_alive_seconds=120, security_group_ids=["sg-1"], subnets=["a", "b"],
        environment={"A": "1"}, preemption_retries_before_termination=2, role="trainer",
        volume_size_gb=50, retry_attempts=3, max_runtime_seconds=600))
    assert status == 201, body
    assert set(body) == JOB_FIELDS
    stored = Job.objects.get()
    assert body["id"] == stored.id and body["status"] == "SUBMITTED"
    assert (body["priority"], body["keep_alive_seconds"], body["environment"]) == (
        3, 120, {"A": "1"})
    assert (body["security_group_ids"], body["subnets"], body["role"]) == (
        ["sg-1"], ["a", "b"], "trainer")
    assert (body["retry_attempts"], body["max_runtime_seconds"], body["volume_size_gb"]) == (
        3, 600, 50)
    assert body["preemption_retries_before_termination"] == 2
    assert (body["executor"], body["duration_seconds"], body["command"]) == (
        "simulated", 60, None)
    assert body["created_at"].endswith("Z") and body["submitted_by"] == "member"
    assert body["attempts"] == [] and body["warm_pool"] is None
    assert body["preemption_summary"] == {"preempted_attempt_count": 0,
                                          "recent_preempted_attempts": []}
    assert list(Event.objects.values_list("type", "job_id")) == [("SUBMITTED", stored.id)]


def test_submit_fills_the_defaults_of_spec_4(api: ApiFor) -> None:
    status, body = api("member").post("/api/v1/jobs", submission())
    assert status == 201
    assert (body["priority"], body["instance_count"], body["keep_alive_seconds"]) == (0, 1, 0)
    assert (body["retry_attempts"], body["max_runtime_seconds"]) == (1, 86_400)
    assert body["preemption_retries_before_termination"] is None


def test_a_command_job_runs_on_the_local_executor(api: ApiFor) -> None:
    status, body = api("member").post("/api/v1/jobs", submission(
        duration_seconds=None, command="echo hi"))
    assert status == 201
    assert (body["executor"], body["command"], body["duration_seconds"]) == (
        "local", "echo hi", None)


@pytest.mark.parametrize(("overrides", "field"), [
    ({"quota_share": "NOPE"}, "quota_share"),
    ({"instance_type": "ml.p4d.24xlarge"}, "instance_type"),
    ({"command": "true"}, "command"),
    ({"duration_seconds": None}, "duration_seconds"),
    ({"name": "has space"}, "name"),
    ({"retry_attempts": 11}, "retry_attempts"),
])
def test_a_refused_submission_names_its_field_and_makes_no_job(
        api: ApiFor, overrides: dict[str, Any], field: str) -> None:
    before = state()
    assert_error(*api("member").post("/api/v1/jobs", submission(**overrides)), 422,
                 field=field)
    assert state() == before


def test_a_job_s_min_runtime_is_at_most_its_share_s(api: ApiFor) -> None:
    """docs/semantics.md 5.8: a job may shorten its share's minimum runtime, not lengthen it."""
    QuotaShare.objects.filter(name="QS1").update(min_runtime_seconds=300)
    before = state()
    assert_error(*api("member").post("/api/v1/jobs", submission(min_runtime_seconds=301)),
                 422, field="min_runtime_seconds")
    assert state() == before
    status, body = api("member").post("/api/v1/jobs", submission(min_runtime_seconds=60))
    assert status == 201, body
    assert body["min_runtime_seconds"] == 60 == Job.objects.get().min_runtime_seconds
    assert api("member").post("/api/v1/jobs", submission())[1]["min_runtime_seconds"] is None


def test_a_disabled_share_refuses_new_jobs_with_409(world: World, api: ApiFor) -> None:
    QuotaShare.objects.filter(name="QS1").update(state="DISABLED")
    before = state()
    assert_error(*api("member").post("/api/v1/jobs", submission()), 409, "SHARE_DISABLED")
    assert state() == before


# Idempotency --------------------------------------------------------------------------


def test_a_repeat_with_the_same_client_token_returns_the_first_job_with_200(
        api: ApiFor) -> None:
    first_status, first = api("member").post("/api/v1/jobs", submission(client_token="abc"))
    second_status, second = api("member").post("/api/v1/jobs", submission(client_token="abc"))
    assert (first_status, second_status) == (201, 200)
    assert second["id"] == first["id"] and Job.objects.count() == 1
    assert Event.objects.filter(type="SUBMITTED").count() == 1


def test_spelling_out_a_default_is_the_same_request(api: ApiFor) -> None:
    _, first = api("member").post("/api/v1/jobs", submission(client_token="abc"))
    status, again = api("member").post("/api/v1/jobs", submission(
        client_token="abc", priority=0, instance_count=1, environment={}))
    assert status == 200 and again["id"] == first["id"]


def test_the_same_client_token_with_another_body_is_409(api: ApiFor) -> None:
    api("member").post("/api/v1/jobs", submission(client_token="abc"))
    before = state()
    assert_error(*api("member").post("/api/v1/jobs", submission(client_token="abc", priority=5)),
                 409, "CLIENT_TOKEN_REUSED")
    assert state() == before


def test_another_users_identical_client_token_is_independent(api: ApiFor) -> None:
    _, first = api("member").post("/api/v1/jobs", submission(client_token="abc"))
    status, other = api("admin").post("/api/v1/jobs", submission(client_token="abc"))
    assert status == 201 and other["id"] != first["id"]


# Reading one job ----------------------------------------------------------------------


def test_get_a_job_and_404_for_a_missing_one(api: ApiFor) -> None:
    target = job("QS1", name="read-me")
    status, body = api("other").get(f"/api/v1/jobs/{target.id}")
    assert status == 200 and body["name"] == "read-me" and set(body) == JOB_FIELDS
    assert_error(*api("other").get(f"/api/v1/jobs/{target.id + 1000}"), 404, "JOB_NOT_FOUND")


def test_every_write_to_a_missing_job_is_the_same_404(api: ApiFor) -> None:
    missing = job("QS1").id + 1000
    assert_error(*api("admin").patch(f"/api/v1/jobs/{missing}", {"priority": 4}), 404,
                 "JOB_NOT_FOUND")
    assert_error(*api("admin").post(f"/api/v1/jobs/{missing}/terminate", {}), 404,
                 "JOB_NOT_FOUND")


def test_positions_follow_priority_then_submission_within_each_share(api: ApiFor) -> None:
    low = job("QS1", status="RUNNABLE", priority=1)
    high = job("QS1", status="RUNNABLE", priority=5)
    low_later = job("QS1", status="RUNNABLE", priority=1)
    elsewhere = job("QS2", status="RUNNABLE", priority=0)
    running = job("QS1", status="RUNNING", priority=9)
    expected = {high.id: 1, low.id: 2, low_later.id: 3, elsewhere.id: 1, running.id: None}
    _, listed = api("other").get("/api/v1/jobs")
    assert {j["id"]: j["position"] for j in listed["jobs"]} == expected
    for job_id, position in expected.items():
        assert api("other").get(f"/api/v1/jobs/{job_id}")[1]["position"] == position
    # A filtered page still counts every RUNNABLE job of the share that is ahead.
    _, page = api("other").get("/api/v1/jobs", name="train", limit=1)
    assert [(j["id"], j["position"]) for j in page["jobs"]] == [(running.id, None)]
    _, page = api("other").get("/api/v1/jobs", status="RUNNABLE", quota_share="QS1", limit=1)
    assert [(j["id"], j["position"]) for j in page["jobs"]] == [(low_later.id, 3)]


def test_a_runnable_job_shows_its_pending_reason(api: ApiFor) -> None:
    waiting = job("QS1", status="RUNNABLE", pending_code="BORROW_LIMIT_REACHED")
    body = api("other").get(f"/api/v1/jobs/{waiting.id}")[1]
    assert body["pending_reason"]["code"] == "BORROW_LIMIT_REACHED"
    assert "borrow" in body["pending_reason"]["message"]
    Job.objects.filter(pk=waiting.pk).update(status="RUNNING")
    body = api("other").get(f"/api/v1/jobs/{waiting.id}")[1]
    assert body["pending_reason"] is None and body["position"] is None


def test_attempts_and_the_preemption_summary(api: ApiFor) -> None:
    preemptor = job("QS2", name="preemptor", status="RUNNING")
    target = job("QS1", status="RUNNING", preempted_count=2)
    attempt(target, 1, outcome="PREEMPTED", kind="CROSS_SHARE", preempted_by=preemptor,
            status_reason="Preempted by preemptor", seconds_ago=300)
    attempt(target, 2, outcome="PREEMPTED", kind="IN_SHARE", preempted_by=preemptor,
            seconds_ago=200)
    attempt(target, 3, borrowed_instances=1, warm_start=True, seconds_ago=100)
    body = api("other").get(f"/api/v1/jobs/{target.id}")[1]
    assert [(a["number"], a["outcome"], a["kind"]) for a in body["attempts"]] == [
        (1, "PREEMPTED", "CROSS_SHARE"), (2, "PREEMPTED", "IN_SHARE"), (3, None, None)]
    assert body["attempts"][2]["borrowed_instances"] == 1 and body["attempts"][2]["warm_start"]
    assert body["attempts"][0]["preempted_by"] == preemptor.id
    summary = body["preemption_summary"]
    assert summary["preempted_attempt_count"] == 2
    assert [(p["kind"], p["preempted_by"]) for p in summary["recent_preempted_attempts"]] == [
        ("IN_SHARE", preemptor.id), ("CROSS_SHARE", preemptor.id)]
    assert summary["recent_preempted_attempts"][1]["status_reason"] == "Preempted by preemptor"


def test_an_available_warm_pool_bills_up_to_now(api: ApiFor) -> None:
    left = job("QS1", keep_alive_seconds=300)
    available_pool(left, since_seconds_ago=30, keep_alive=300, retained=5.0)
    pool = api("other").get(f"/api/v1/jobs/{left.id}")[1]["warm_pool"]
    assert pool["status"] == "Available" and pool["keep_alive_seconds"] == 300
    assert 35.0 <= pool["retained_billable_seconds"] < 40.0
    assert pool["expires_at"].endswith("Z")
    assert (pool["reused_by"], pool["termination_reason"]) == (None, None)


def test_a_reused_segment_names_the_job_that_reused_it(api: ApiFor) -> None:
    left = job("QS1", status="SUCCEEDED", keep_alive_seconds=60)
    reuser = job("QS1", status="RUNNING")
    WarmPoolSegment.objects.create(job=left, status="Reused", keep_alive_seconds=60,
                                   retained_billable_seconds=12.5, reused_by=reuser)
    pool = api("other").get(f"/api/v1/jobs/{left.id}")[1]["warm_pool"]
    assert (pool["status"], pool["reused_by"], pool["retained_billable_seconds"]) == (
        "Reused", reuser.id, 12.5)


# Secrets ------------------------------------------------------------------------------


@pytest.mark.parametrize(("role", "sees"), [
    ("admin", True), ("member", True), ("qs2_member", False), ("other", False),
])
def test_command_environment_and_client_token_only_for_members_and_admins(
        world: World, api: ApiFor, role: str, sees: bool) -> None:
    secret = job("QS1", executor="local", command="train --key s3cret", duration_seconds=None,
                 environment={"KEY": "s3cret"}, client_token="tok", user=world.users["member"])
    for body in (api(role).get(f"/api/v1/jobs/{secret.id}")[1],
                 api(role).get("/api/v1/jobs")[1]["jobs"][0]):
        shown = (body["command"], body["environment"], body["client_token"])
        assert shown == (("train --key s3cret", {"KEY": "s3cret"}, "tok") if sees
                         else (None, None, None))
    status, logs = api(role).get(f"/api/v1/jobs/{secret.id}/logs")
    assert status == 200 if sees else (status == 403 and logs["error"]["code"] == "FORBIDDEN")


# Listing ------------------------------------------------------------------------------


def test_jobs_are_listed_newest_first_and_cursors_walk_every_page(api: ApiFor) -> None:
    made = [job("QS1", name=f"j{i}").id for i in range(7)]
    seen: list[int] = []
    params: dict[str, Any] = {"limit": 3}
    while True:
        status, page = api("other").get("/api/v1/jobs", **params)
        assert status == 200 and len(page["jobs"]) <= 3
        seen += [j["id"] for j in page["jobs"]]
        if page["next_cursor"] is None:
            break
        job("QS1", name="newer")  # rows added meanwhile do not disturb the walk
        params = {"limit": 3, "cursor": page["next_cursor"]}
    assert seen == sorted(made, reverse=True)


def test_the_last_full_page_has_no_next_cursor(api: ApiFor) -> None:
    for _ in range(3):
        job("QS1")
    _, page = api("other").get("/api/v1/jobs", limit=3)
    assert len(page["jobs"]) == 3 and page["next_cursor"] is None


def test_status_filters_combine(api: ApiFor) -> None:
    running = job("QS1", status="RUNNING")
    runnable = job("QS1", status="RUNNABLE")
    job("QS1", status="SUCCEEDED")
    _, page = api("other").get("/api/v1/jobs", status=["RUNNING", "RUNNABLE"])
    assert [j["id"] for j in page["jobs"]] == [runnable.id, running.id]
    _, page = api("other").get("/api/v1/jobs", status="SUCCEEDED")
    assert [j["status"] for j in page["jobs"]] == ["SUCCEEDED"]


def test_quota_share_filter(api: ApiFor) -> None:
    job("QS1")
    theirs = job("QS2")
    _, page = api("other").get("/api/v1/jobs", quota_share="QS2")
    assert [j["id"] for j in page["jobs"]] == [theirs.id]
    assert api("other").get("/api/v1/jobs", quota_share="NOPE")[1]["jobs"] == []


def test_name_filter_is_exact_or_a_prefix_with_a_star(api: ApiFor) -> None:
    exact = job("QS1", name="train")
    longer = job("QS1", name="train-2")
    job("QS1", name="eval")
    _, page = api("other").get("/api/v1/jobs", name="train")
    assert [j["id"] for j in page["jobs"]] == [exact.id]
    _, page = api("other").get("/api/v1/jobs", name="train*")
    assert [j["id"] for j in page["jobs"]] == [longer.id, exact.id]
    _, page = api("other").get("/api/v1/jobs", name="*")
    assert len(page["jobs"]) == 3


@pytest.mark.parametrize(("params", "field"), [
    ({"limit": 0}, "limit"), ({"limit": 501}, "limit"), ({"limit": "many"}, "limit"),
    ({"status": "DONE"}, "status[0]"), ({"cursor": "not-a-cursor"}, "cursor"),
    ({"name": "a*b"}, "name"), ({"quota_share": "bad name"}, "quota_share"),
])
def test_bad_list_parameters_are_422(api: ApiFor, params: dict[str, Any], field: str) -> None:
    assert_error(*api("other").get("/api/v1/jobs", **params), 422, field=field)


def test_the_list_costs_a_fixed_number_of_queries(world: World, api: ApiFor) -> None:
    def queries() -> int:
        client = api("other")
        client.get("/api/v1/jobs")  # the token's last_used_at is written on first use
        with CaptureQueriesContext(connection) as captured:
            assert client.get("/api/v1/jobs")[0] == 200
        return len(captured)

    for share in ("QS1", "QS2"):
        attempt(job(share, status="RUNNING"))
        job(share, status="RUNNABLE")
    few = queries()
    for i in range(15):
        share = ("QS1", "QS2", "QS3")[i % 3]
        attempt(job(share, status="RUNNING"))
        job(share, status="RUNNABLE")
    assert queries() == few


# Changing a job -----------------------------------------------------------------------


def test_patch_priority(api: ApiFor) -> None:
    target = job("QS1", status="RUNNABLE")
    status, body = api("member").patch(f"/api/v1/jobs/{target.id}", {"priority": 4})
    assert status == 200 and body["priority"] == 4
    assert Event.objects.get(type="PRIORITY_UPDATED").details == {"priority": 4}


def test_patch_priority_of_a_terminal_job_is_409(api: ApiFor) -> None:
    target = job("QS1", status="SUCCEEDED")
    before = state()
    assert_error(*api("member").patch(f"/api/v1/jobs/{target.id}", {"priority": 4}), 409,
                 "JOB_TERMINAL")
    assert state() == before


def test_patch_keep_alive_of_a_live_job_changes_what_it_will_leave(api: ApiFor) -> None:
    target = job("QS1", status="RUNNING")
    status, body = api("member").patch(f"/api/v1/jobs/{target.id}", {"keep_alive_seconds": 90})
    assert status == 200 and body["keep_alive_seconds"] == 90
    assert Event.objects.get(type="WARM_POOL_UPDATED").details == {
        "keep_alive_seconds": 90, "expires_at": None}


def test_patch_keep_alive_of_an_available_pool_moves_its_expiry(api: ApiFor) -> None:
    left = job("QS1")
    pool = available_pool(left, since_seconds_ago=10, keep_alive=300)
    status, body = api("member").patch(f"/api/v1/jobs/{left.id}", {"keep_alive_seconds": 600})
    assert status == 200
    pool.refresh_from_db()
    assert pool.expires_at == pool.available_since + timedelta(seconds=600)
    assert body["warm_pool"]["keep_alive_seconds"] == 600
    assert body["warm_pool"]["status"] == "Available"


def test_keep_alive_0_terminates_an_available_pool(api: ApiFor) -> None:
    left = job("QS1")
    pool = available_pool(left)
    status, body = api("member").patch(f"/api/v1/jobs/{left.id}", {"keep_alive_seconds": 0})
    assert status == 200
    assert (body["warm_pool"]["status"], body["warm_pool"]["termination_reason"]) == (
        "Terminated", "USER")
    assert WarmPool.objects.get(pk=pool.pk).status == "Terminated"


def test_keep_alive_of_a_terminal_job_without_a_pool_is_409(api: ApiFor) -> None:
    target = job("QS1", status="FAILED")
    before = state()
    assert_error(*api("member").patch(f"/api/v1/jobs/{target.id}", {"keep_alive_seconds": 5}),
                 409)
    assert state() == before


def test_patch_both_changes_both_or_neither(api: ApiFor) -> None:
    target = job("QS1", status="RUNNABLE", priority=1)
    QuotaShare.objects.filter(name="QS1").update(max_keep_alive_seconds=60)
    before = state()
    status, body = api("member").patch(f"/api/v1/jobs/{target.id}",
                                       {"priority": 8, "keep_alive_seconds": 61})
    assert_error(status, body, 422, field="keep_alive_seconds")
    assert state() == before
    status, body = api("member").patch(f"/api/v1/jobs/{target.id}",
                                       {"priority": 8, "keep_alive_seconds": 60})
    assert status == 200 and (body["priority"], body["keep_alive_seconds"]) == (8, 60)


def test_an_empty_patch_is_422(api: ApiFor) -> None:
    target = job("QS1")
    assert_error(*api("member").patch(f"/api/v1/jobs/{target.id}", {}), 422)


def test_patch_of_a_missing_job_is_404(api: ApiFor) -> None:
    assert_error(*api("member").patch("/api/v1/jobs/424242", {"priority": 1}), 404)


# Terminating --------------------------------------------------------------------------


def test_terminate_fails_the_job_with_the_reason(api: ApiFor) -> None:
    target = job("QS1", status="RUNNING")
    attempt(target)
    status, body = api("member").post(f"/api/v1/jobs/{target.id}/terminate",
                                      {"reason": "wrong data"})
    assert status == 200
    assert (body["status"], body["status_reason"]) == ("FAILED", "wrong data")
    assert body["attempts"][0]["outcome"] == "TERMINATED"
    assert Event.objects.get(type="TERMINATED").details == {"reason": "wrong data"}


def test_terminate_without_a_body_uses_the_default_reason(api: ApiFor) -> None:
    target = job("QS1")
    status, body = api("member").post(f"/api/v1/jobs/{target.id}/terminate")
    assert status == 200 and body["status_reason"] == "Terminated by user"


def test_terminating_a_terminal_job_is_409_and_a_missing_one_404(api: ApiFor) -> None:
    target = job("QS1", status="SUCCEEDED")
    before = state()
    assert_error(*api("member").post(f"/api/v1/jobs/{target.id}/terminate", {}), 409,
                 "JOB_TERMINAL")
    assert_error(*api("member").post("/api/v1/jobs/424242/terminate", {}), 404)
    assert state() == before


# Logs ---------------------------------------------------------------------------------


def test_logs_return_the_last_lines_oldest_first(api: ApiFor) -> None:
    target = job("QS1", executor="local", command="x", duration_seconds=None)
    first, second = attempt(target, 1, outcome="FAILED"), attempt(target, 2)
    now = timezone.now()
    # Stored in chunks of lines: the first attempt's in one, the second's in two.
    for run, start, count in ((first, 1, 3), (second, 1, 2), (second, 3, 2)):
        LogChunk.objects.create(attempt=run, first=start, count=count, time=now, text="\n".join(
            f"{run.number}:{n}" for n in range(start, start + count)))
    status, body = api("member").get(f"/api/v1/jobs/{target.id}/logs", tail=5)
    assert status == 200
    assert [line["text"] for line in body["lines"]] == ["1:3", "2:1", "2:2", "2:3", "2:4"]
    assert body["lines"][0]["attempt"] == 1 and body["lines"][0]["stream"] == "stdout"
    assert [line["number"] for line in body["lines"]] == [3, 1, 2, 3, 4]
    assert len(api("member").get(f"/api/v1/jobs/{target.id}/logs")[1]["lines"]) == 7


def test_logs_of_a_missing_job_are_404_and_tail_is_bounded(api: ApiFor) -> None:
    assert_error(*api("member").get("/api/v1/jobs/424242/logs"), 404)
    target = job("QS1")
    assert_error(*api("member").get(f"/api/v1/jobs/{target.id}/logs", tail=0), 422,
                 field="tail")
    assert api("member").get(f"/api/v1/jobs/{target.id}/logs")[1] == {"lines": []}


# Estimated start ----------------------------------------------------------------------


def test_a_queued_job_carries_its_estimated_start_and_its_basis(api: ApiFor) -> None:
    from datetime import datetime

    from quotaweb.scheduling.estimates import refresh_estimates

    holder = job("QS3", name="qs3_job_7", status="RUNNING", duration_seconds=600,
                 instances=[0])
    started = attempt(holder, seconds_ago=60).started_at
    Job.objects.filter(pk=holder.pk).update(started_at=started, scheduled_at=started)
    waiting = job("QS3", name="qs3_job_8", status="RUNNABLE")
    status, body = api("other").get(f"/api/v1/jobs/{waiting.id}")
    assert status == 200 and body["estimated_start_at"] is None
    assert body["estimate_basis"] is None  # not estimated yet

    refresh_estimates()
    status, body = api("other").get(f"/api/v1/jobs/{waiting.id}")
    assert status == 200
    expected = started + timedelta(seconds=600)
    assert abs(datetime.fromisoformat(body["estimated_start_at"]) - expected) <= timedelta(
        seconds=1)
    assert body["estimate_basis"] == ("when qs3_job_7 ends "
                                      "(qs3_job_7: its simulated duration, 600 s)")
    _, listed = api("other").get("/api/v1/jobs?quota_share=QS3")
    by_id = {row["id"]: row for row in listed["jobs"]}
    assert by_id[waiting.id]["estimate_basis"] == body["estimate_basis"]
    assert by_id[holder.id]["estimated_start_at"] is None
    assert by_id[holder.id]["estimate_basis"] is None
