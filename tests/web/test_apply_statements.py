"""The cycle's apply writes in bulk: as many statements for 40 dispatches as for 4, and as
many for the time-driven transitions of 40 attempts (start, run, end) as for 4; a bulk
compare-and-set leaves alone (and reports) the rows whose old state changed.  (A job
changed between the snapshot and the apply rolls the cycle back: test_cycle_shell.py.)"""

from __future__ import annotations

from datetime import datetime

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from quotaweb.models import Attempt, CapacityLimit, CapacityUnit, Event, Job, QuotaShare
from quotaweb.scheduling import events, transitions
from quotaweb.scheduling.apply import apply_decisions
from quotaweb.scheduling.bulk import update_rows
from quotaweb.scheduling.snapshot import load_snapshot
from scheduler import CycleResult, Dispatch, schedule

UNIT = "ml.bulk"


def _fleet(dispatches: int, waiting: int = 5) -> list[Job]:
    """A unit of `dispatches` instances, one share with all of it, and `dispatches` +
    `waiting` queued 1-instance jobs."""
    CapacityUnit.objects.create(name=UNIT, max_capacity=dispatches, warm_pool_limit=0,
                                cold_start_seconds=0, warm_start_seconds=0)
    share = QuotaShare.objects.create(name=f"S{dispatches}", sharing_strategy="LEND_AND_BORROW",
                                      borrow_limit=-1)
    CapacityLimit.objects.create(quota_share=share, capacity_unit=UNIT, max_capacity=dispatches)
    return Job.objects.bulk_create(
        Job(name=f"j{n}", quota_share=share, instance_type=UNIT, instance_count=1,
            executor="simulated", duration_seconds=10, status="SUBMITTED")
        for n in range(dispatches + waiting))


def _decide(now: datetime) -> CycleResult:
    return schedule(load_snapshot(now).snapshot)


def _applied(result: CycleResult, now: datetime) -> int:
    """The statements apply_decisions ran."""
    with transaction.atomic():
        events.lock_changes()
        with CaptureQueriesContext(connection) as queries:
            apply_decisions(result, now)
    return len(queries.captured_queries)


def _statements_for(dispatches: int) -> int:
    Event.objects.all().delete()
    Job.objects.all().delete()
    CapacityLimit.objects.all().delete()
    QuotaShare.objects.all().delete()
    CapacityUnit.objects.all().delete()
    _fleet(dispatches)
    now = timezone.now()
    result = _decide(now)
    assert sum(isinstance(d, Dispatch) for d in result.decisions) == dispatches
    count = _applied(result, now)
    assert Job.objects.filter(status="SCHEDULED").count() == dispatches
    assert Attempt.objects.count() == dispatches
    assert Event.objects.filter(type="DISPATCHED").count() == dispatches
    return count


@pytest.mark.django_db
def test_forty_dispatches_take_as_many_statements_as_four() -> None:
    assert connection.vendor == "postgresql"
    four = _statements_for(4)
    forty = _statements_for(40)
    assert forty == four
    assert forty <= 6  # read the jobs, update them, count and insert attempts, events, reasons


def _transition_statements(attempts: int) -> int:
    """Statements of one transitions.advance in which `attempts` dispatched attempts of
    zero duration start, run and end (half of them failing, retried or not)."""
    Event.objects.all().delete()
    Job.objects.all().delete()
    CapacityLimit.objects.all().delete()
    QuotaShare.objects.all().delete()
    CapacityUnit.objects.all().delete()
    jobs = _fleet(attempts, waiting=0)
    Job.objects.update(duration_seconds=0)
    Job.objects.filter(pk__in=[j.pk for j in jobs[::2]]).update(max_runtime_seconds=0,
                                                                 duration_seconds=5)
    Job.objects.filter(pk__in=[j.pk for j in jobs[::4]]).update(retry_attempts=2)
    now = timezone.now()
    with transaction.atomic():
        events.lock_changes()
        apply_decisions(_decide(now), now)
    with CaptureQueriesContext(connection) as queries:
        transitions.advance(now)
    statuses = sorted(Job.objects.values_list("status", flat=True))
    assert statuses.count("SUCCEEDED") == attempts // 2
    assert statuses.count("RUNNABLE") == len(jobs[::4])
    assert Event.objects.filter(type="RUNNING").count() == attempts
    return len(queries.captured_queries)


@pytest.mark.django_db
def test_the_transitions_of_forty_attempts_take_as_many_statements_as_four() -> None:
    four = _transition_statements(4)
    forty = _transition_statements(40)
    assert forty == four


@pytest.mark.django_db
def test_update_rows_sets_only_the_rows_whose_old_state_still_holds() -> None:
    jobs = _fleet(2, waiting=2)
    Job.objects.filter(pk=jobs[2].pk).update(status="RUNNABLE")
    Job.objects.filter(pk=jobs[3].pk).update(status="FAILED")
    with CaptureQueriesContext(connection) as queries:
        updated = update_rows(
            Job, [(job.pk, [["i-1"], 7, old]) for job, old in
                  zip(jobs, ["SUBMITTED", "RUNNABLE", "RUNNABLE", "SUBMITTED"], strict=True)],
            ["instances", "preempted_count"], expect=["status"],
            values={"pending_code": "X"}, where={"not_before__isnull": True})
    assert len(queries.captured_queries) == 1
    assert updated == {jobs[0].pk, jobs[2].pk}
    rows = {pk: (instances, count, code) for pk, instances, count, code in
            Job.objects.values_list("id", "instances", "preempted_count", "pending_code")}
    assert rows == {jobs[0].pk: (["i-1"], 7, "X"), jobs[1].pk: ([], 0, None),
                    jobs[2].pk: (["i-1"], 7, "X"), jobs[3].pk: ([], 0, None)}
