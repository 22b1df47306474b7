"""quotaweb.services.recorded_history: what a replay takes from the records (the work of
command jobs, jobs carried over from before the period, the configuration at its start and
its changes)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from quotaweb.models import Event, Job
from quotaweb.services import configuration
from quotaweb.services.recorded_history import recorded_history, replay_name

from . import test_api_helpers as helpers
from .test_api_helpers import UNIT, attempt, job

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


def test_changes_are_undone_to_the_period_start_and_replayed_only_inside_it(
        world: Any) -> None:
    start = timezone.now() - timedelta(minutes=10)
    before = recorded_history(start, start + timedelta(minutes=5)).document
    # Changes made now, through the services: after the first period, inside the second.
    configuration.update_share(world.shares["QS1"], in_share_preemption=True,
                               capacity_limits=[{"capacity_unit": UNIT, "max_capacity": 1}])
    configuration.update_capacity_unit(UNIT, max_capacity=6)
    configuration.update_share(world.shares["QS3"], state="DISABLED")
    configuration.delete_share(world.shares["QS3"])

    earlier = recorded_history(start, start + timedelta(minutes=5))
    assert (earlier.document["capacity"], earlier.document["quota_shares"]) == (
        before["capacity"], before["quota_shares"])  # nothing leaks back
    assert earlier.document["actions"] == [] and earlier.notes == []

    inside = recorded_history(start, timezone.now() + timedelta(minutes=1))
    assert inside.document["quota_shares"] == before["quota_shares"]  # QS3 is back
    changes = [{key: value for key, value in action.items() if key != "at"}
               for action in inside.document["actions"]]
    assert changes == [
        {"update_share": {"name": "QS1", "in_share_preemption": True, "capacity_limits": [
            {"capacity_unit": UNIT, "max_capacity": 1}]}},
        {"update_capacity": {"capacity_unit": UNIT, "max_capacity": 6}},
        {"update_share": {"name": "QS3", "state": "DISABLED"}},
        {"delete_share": {"name": "QS3"}},
    ]
    assert all(600 <= action["at"] <= 602 for action in inside.document["actions"])


def test_a_configuration_change_recorded_without_values_is_noted(world: Any) -> None:
    start = timezone.now() - timedelta(minutes=5)
    # As SHARE_UPDATED was recorded before it kept the values.
    Event.objects.create(time=timezone.now(), type="SHARE_UPDATED", quota_share="QS1",
                         details={"fields": ["capacity_limits"]})
    history = recorded_history(start, timezone.now())
    assert any("without values" in note and "QS1" in note for note in history.notes)
    assert history.document["actions"] == []
