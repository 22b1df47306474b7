"""quotaweb.services.recorded_history: what a replay takes from the records (the work of
command jobs, jobs carried over from before the period, configuration changes)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from quotaweb.models import Event, Job
from quotaweb.services.recorded_history import recorded_history, replay_name

from . import test_api_helpers as helpers
from .test_api_helpers import attempt, job

pytestmark = pytest.mark.django_db

world = helpers.world


def submitted(history: Any, row: Job) -> dict[str, Any]:
    return next(a for a in history.document["actions"]
                if a.get("submit", {}).get("name") == replay_name(row))


def command_job(name: str, **fields: Any) -> Job:
    return job("QS1", name=name, executor="local", command="python train.py",
               duration_seconds=None, **fields)


def test_a_command_is_replayed_with_its_recorded_runtime(world: Any) -> None:
    start = timezone.now() - timedelta(minutes=10)
    ran = command_job("ran", status="SUCCEEDED")
    attempt(ran, 1, outcome="PREEMPTED", seconds_ago=100)
    attempt(ran, 2, outcome="SUCCEEDED", seconds_ago=42)
    failed = command_job("failed", status="FAILED")
    attempt(failed, 1, outcome="PREEMPTED", seconds_ago=20)
    attempt(failed, 2, outcome="FAILED", seconds_ago=7)
    never = command_job("never", status="RUNNABLE", max_runtime_seconds=900)

    history = recorded_history(start, timezone.now() + timedelta(minutes=1))

    assert submitted(history, ran)["submit"]["duration_seconds"] == 42
    assert submitted(history, failed)["submit"]["duration_seconds"] == 20  # its longest
    assert submitted(history, never)["submit"]["duration_seconds"] == 900
    assert any("never ran" in note for note in history.notes)


def test_a_job_running_when_the_period_starts_keeps_the_work_it_had_left(world: Any) -> None:
    carried = job("QS1", name="long", status="RUNNING", duration_seconds=600)
    attempt(carried, 1, seconds_ago=100)  # RUNNING for 100 s
    Job.objects.filter(pk=carried.pk).update(created_at=timezone.now() - timedelta(seconds=200))
    done = job("QS1", name="done", status="SUCCEEDED")
    Job.objects.filter(pk=done.pk).update(created_at=timezone.now() - timedelta(hours=2),
                                          stopped_at=timezone.now() - timedelta(hours=1))
    start = timezone.now() - timedelta(seconds=40)  # 60 s of its work done by then

    history = recorded_history(start, timezone.now() + timedelta(minutes=5))

    action = submitted(history, carried)
    assert action["at"] == 0
    assert 539 <= action["submit"]["duration_seconds"] <= 541
    assert all(a.get("submit", {}).get("name") != replay_name(done)
               for a in history.document["actions"])


def test_a_configuration_change_in_the_period_is_noted(world: Any) -> None:
    start = timezone.now() - timedelta(minutes=5)
    Event.objects.create(time=timezone.now(), type="SHARE_UPDATED", quota_share="QS1",
                         details={"fields": ["capacity_limits"]})
    history = recorded_history(start, timezone.now())
    assert any("today's configuration" in note and "QS1" in note for note in history.notes)
