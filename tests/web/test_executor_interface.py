"""The executor interface (quotaweb/executors/base.py) as the rest of the shell uses it:
every backend is looked up by its kind, the cycle polls them all, and a preemption or a
terminate nudges the stopped attempt's backend once it has committed."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from quotaweb import runtime
from quotaweb.executors import backends
from quotaweb.executors.base import AttemptReport, Availability, Executor, LogChunk
from quotaweb.executors.simulated import SimulatedExecutor
from quotaweb.models import Attempt, CapacityUnit, Job
from quotaweb.models.jobs import Executor as ExecutorKind
from quotaweb.services.jobs import submit_job, terminate_job

UNIT = "ml.g5.xlarge"
GRACE = 30


def test_every_backend_implements_the_interface_under_a_kind_of_its_own() -> None:
    executors = backends.all_executors()
    assert all(isinstance(executor, Executor) for executor in executors)
    kinds = [executor.kind for executor in executors]
    assert sorted(kinds) == sorted(set(kinds))
    assert set(kinds) <= {choice.value for choice in ExecutorKind}
    assert sorted(backends.launched_kinds()) == ["local", "slurm"]  # simulated: by poll
    assert backends.executor_for("simulated").availability() == Availability.ok()
    with pytest.raises(ImproperlyConfigured, match="No executor runs jobs of kind 'nope'"):
        backends.executor_for("nope")


def test_a_job_runs_on_the_configured_command_executor(settings: Any) -> None:
    assert backends.kind_for(None) == backends.kind_for("") == "simulated"
    assert backends.kind_for("echo hi") == "local"
    settings.QUOTAWEB = {**settings.QUOTAWEB, "COMMAND_EXECUTOR": "other"}
    assert backends.kind_for("echo hi") == "other"


class Recording:
    """The simulated executor, with a record of the stops it was asked for."""

    def __init__(self) -> None:
        self.inner = SimulatedExecutor()
        self.kind = self.inner.kind
        self.launched = self.inner.launched
        self.stops: list[tuple[int, float]] = []

    def availability(self) -> Availability:
        return self.inner.availability()

    def start(self, attempt_id: int) -> bool:
        return self.inner.start(attempt_id)

    def stop(self, attempt_id: int, grace_seconds: float) -> None:
        self.stops.append((attempt_id, grace_seconds))

    def poll(self, now: datetime) -> Iterator[AttemptReport]:
        return self.inner.poll(now)

    def logs(self, attempt_id: int, after: int = 0, limit: int = 1000) -> LogChunk:
        return self.inner.logs(attempt_id, after, limit)


@pytest.fixture
def recording() -> Iterator[Recording]:
    original = backends.executor_for("simulated")
    recorder = Recording()
    assert isinstance(recorder, Executor)
    backends.register(recorder)
    yield recorder
    backends.register(original)


def _tick() -> None:
    report = runtime.cycle_and_launch(lambda attempt_id: None, lambda: None)
    assert report is not None


@pytest.mark.django_db(transaction=True)
def test_a_preemption_and_a_terminate_nudge_the_backend_after_they_commit(
    recording: Recording, make_share: Callable[..., Any], settings: Any,
) -> None:
    settings.QUOTAWEB = {**settings.QUOTAWEB, "PREEMPTION_GRACE_SECONDS": GRACE}
    CapacityUnit.objects.create(name=UNIT, max_capacity=1, cold_start_seconds=0,
                                warm_start_seconds=0)
    make_share("QS1", {UNIT: 1}, in_share_preemption=True)

    def submit(name: str, priority: int) -> Job:
        job, _ = submit_job(None, name=name, quota_share="QS1", instance_type=UNIT,
                            priority=priority, duration_seconds=1000)
        return job

    low = submit("low", 1)
    _tick()
    _tick()  # no start delay: RUNNING at the next cycle's transitions
    low.refresh_from_db()
    assert low.status == "RUNNING" and recording.stops == []
    high = submit("high", 5)
    _tick()  # high preempts low, which keeps its grace
    preempted = Attempt.objects.get(job=low)
    assert preempted.outcome == "PREEMPTED"
    [(attempt_id, grace)] = recording.stops
    assert attempt_id == preempted.pk and 0 < grace <= GRACE
    terminate_job(high, "changed my mind")
    stopped = Attempt.objects.get(job=high)
    assert stopped.outcome == "TERMINATED"
    assert [attempt_id for attempt_id, _ in recording.stops] == [preempted.pk, stopped.pk]
