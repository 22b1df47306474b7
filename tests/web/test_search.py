"""Filters and pagination on jobs and events: the Jobs and Events pages and the API's
listings, with the same rules (services.search)."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from quotaweb.models import Job
from quotaweb.scheduling.tick import run_cycle
from quotaweb.services.jobs import submit_job

pytestmark = pytest.mark.django_db

UNIT = "ml.g5.xlarge"
ClientFor = Callable[[Any], Client]


@pytest.fixture
def history(walkthrough_config: Any, member: Any) -> dict[str, Job]:
    """train_a, train_b (by `member`, QS1) and eval_c (by nobody, QS2); one cycle."""
    jobs = {}
    for name, share, by in (("train_a", "QS1", member), ("train_b", "QS1", member),
                            ("eval_c", "QS2", None)):
        jobs[name], _ = submit_job(by, name=name, quota_share=share, instance_type=UNIT,
                                   duration_seconds=600)
    run_cycle(now=timezone.now())
    return jobs


def _names(html: str) -> list[str]:
    return re.findall(r'<a href="/jobs/\d+">([a-z0-9_]+)</a> <small', html)


def test_the_jobs_page_filters_by_share_status_name_user_and_time(
    history: dict[str, Job], member: Any, client_for: ClientFor
) -> None:
    client = client_for(member)
    assert _names(client.get("/jobs").content.decode()) == ["eval_c", "train_b", "train_a"]
    assert _names(client.get("/jobs?quota_share=QS1").content.decode()) == [
        "train_b", "train_a"]
    assert _names(client.get("/jobs?name=train*&status=SCHEDULED&status=STARTING"
                             "&status=RUNNING").content.decode()) == ["train_a"]
    assert _names(client.get(f"/jobs?user={member.username}&name=train_b").content
                  .decode()) == ["train_b"]
    later = (timezone.now() + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M")
    assert _names(client.get(f"/jobs?since={later}").content.decode()) == []
    assert "Since must be a date and time" in client.get("/jobs?since=soon").content.decode()


def test_the_jobs_page_is_paginated_keeping_its_filters(
    walkthrough_config: Any, member: Any, client_for: ClientFor
) -> None:
    for index in range(55):
        submit_job(None, name=f"bulk_{index:02d}", quota_share="QS3", instance_type=UNIT,
                   duration_seconds=1)
    client = client_for(member)
    first = client.get("/jobs?quota_share=QS3").content.decode()
    assert len(_names(first)) == 50 and "Page 1 of 2 · 55 in all" in first
    assert 'href="?quota_share=QS3&amp;page=2"' in first
    second = client.get("/jobs?quota_share=QS3&page=2").content.decode()
    assert _names(second) == [f"bulk_{index:02d}" for index in (4, 3, 2, 1, 0)]


def test_the_events_page_filters_by_type_share_job_and_user(
    history: dict[str, Job], member: Any, client_for: ClientFor
) -> None:
    client = client_for(member)
    html = client.get("/events?type=DISPATCHED&quota_share=QS1").content.decode()
    assert re.findall(r'<span class="type">(\w+)</span>', html) == ["DISPATCHED"]
    assert ">train_a</a>" in html and "borrowed_instances=0" in html
    by_name = client.get("/events?job_name=eval*").content.decode()
    assert set(re.findall(r'<span class="type">(\w+)</span>', by_name)) == {
        "SUBMITTED", "DISPATCHED"}
    assert ">train_a<" not in by_name
    nobody = get_user_model().objects.create_user("nobody")
    assert "No event matches" in client.get(f"/events?user={nobody.username}").content.decode()


def test_the_api_filters_jobs_and_events_the_same_way(
    history: dict[str, Job], member: Any, client_for: ClientFor
) -> None:
    client = client_for(member)
    jobs = client.get(f"/api/v1/jobs?user={member.username}&status=RUNNABLE").json()["jobs"]
    assert [job["name"] for job in jobs] == ["train_b"]
    later = (timezone.now() + timedelta(minutes=5)).isoformat().replace("+00:00", "Z")
    assert client.get(f"/api/v1/jobs?since={later}").json()["jobs"] == []
    events = client.get("/api/v1/events?type=SUBMITTED&type=DISPATCHED&job_name=train*"
                        "&quota_share=QS1").json()["events"]
    assert [(e["type"], e["job_name"]) for e in events] == [
        ("SUBMITTED", "train_a"), ("SUBMITTED", "train_b"), ("DISPATCHED", "train_a")]
    job = history["eval_c"].pk
    assert {e["job"] for e in client.get(f"/api/v1/events?job={job}").json()["events"]} == {job}
    assert client.get("/api/v1/events?type=NOT_A_TYPE").status_code == 422
    assert client.get(f"/api/v1/events?until={later}&since={later}").json()["events"] == []


def test_the_events_page_says_a_configuration_change_in_words(
    member: Any, client_for: ClientFor
) -> None:
    """A change that kept its values reads as one sentence per field, escaped (a share and
    a unit named like markup); one recorded before values were kept keeps key=value."""
    from quotaweb.models import Event

    hostile = '<img src=x onerror="alert(1)">'
    now = timezone.now()
    Event.objects.create(time=now, type="SHARE_UPDATED", quota_share=hostile, details={
        "fields": ["capacity_limits", "sharing_strategy"],  # and the borrow limit with it
        "before": {"capacity_limits": [{"capacity_unit": UNIT, "max_capacity": 4},
                                       {"capacity_unit": hostile, "max_capacity": 1}],
                   "sharing_strategy": "LEND", "borrow_limit": None},
        "after": {"capacity_limits": [{"capacity_unit": UNIT, "max_capacity": 2},
                                      {"capacity_unit": hostile, "max_capacity": 1}],
                  "sharing_strategy": "LEND_AND_BORROW", "borrow_limit": -1}})
    Event.objects.create(time=now, type="CAPACITY_UPDATED", details={
        "capacity_unit": UNIT, "before": {"max_capacity": 8}, "after": {"max_capacity": 12}})
    Event.objects.create(time=now, type="SHARE_UPDATED", quota_share="QS9",
                         details={"fields": ["state"]})  # recorded before values were kept

    html = client_for(member).get("/events").content.decode()

    changes = re.findall(r'<span class="change">([^<]*)</span>', html)
    assert changes == ["max capacity 8 → 12", f"limit on {UNIT} 4 → 2",
                       "strategy LEND → LEND_AND_BORROW", "borrow limit none → unlimited"]
    assert f'{UNIT}: <span class="change">max capacity' in html
    assert hostile not in html and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in html
    assert "fields=[&#x27;state&#x27;]" in html
