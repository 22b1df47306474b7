"""Estimated start in the shell (quotaweb/scheduling/estimates.py): the background refresh
stores each queued job's estimate and basis, a dispatch clears them, and a command job's
runtime is the median of its share's recent runs of the same name."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from quotaweb.models import Attempt, CapacityUnit, Job
from quotaweb.scheduling.estimates import (
    MOVE_THRESHOLD_SECONDS,
    WRITE_BATCH,
    changed,
    left_queue,
    outlooks,
    refresh_estimates,
)
from quotaweb.scheduling.snapshot import load_snapshot
from quotaweb.scheduling.tick import run_cycle
from quotaweb.services.jobs import submit_job

from .processes import run_on_embedded_sqlite

UNIT = "ml.g5.xlarge"
COLD = 60
cycle_db = pytest.mark.django_db(transaction=True)


def _t0() -> datetime:
    return timezone.now().replace(microsecond=0)


@pytest.fixture
def one_instance(make_share: Callable[..., Any]) -> Any:
    CapacityUnit.objects.create(name=UNIT, max_capacity=1, cold_start_seconds=COLD,
                                warm_start_seconds=5)
    return make_share("QS1", {UNIT: 1}, sharing_strategy="LEND")


def _submit(name: str, duration: int) -> Job:
    job, created = submit_job(None, name=name, quota_share="QS1", instance_type=UNIT,
                              duration_seconds=duration)
    assert created
    return job


@cycle_db
def test_the_refresh_stores_an_estimate_that_the_dispatch_clears(one_instance: Any) -> None:
    first, second = _submit("first", 100), _submit("second", 50)
    t0 = _t0()
    assert run_cycle(now=t0) is not None  # first is placed, second waits
    refresh = refresh_estimates(now=t0)
    assert refresh.estimated == 1
    second.refresh_from_db()
    # first starts cold (60 s) and runs 100 s: second is placed when it ends.
    assert second.estimated_start_at == t0 + timedelta(seconds=160)
    assert second.estimate_basis == "when first ends (first: its simulated duration, 100 s)"
    first.refresh_from_db()
    assert first.estimated_start_at is None and first.estimate_basis == ""
    assert refresh.changed == (second.pk,)  # what the refresh pushes (runtime)
    # The same estimate a moment later: nothing changed, nothing to push.
    assert refresh_estimates(now=t0 + timedelta(seconds=10)).changed == ()

    for seconds in (COLD, 160):
        assert run_cycle(now=t0 + timedelta(seconds=seconds)) is not None
    second.refresh_from_db()
    assert second.status == "SCHEDULED"
    assert second.scheduled_at == t0 + timedelta(seconds=160)  # as estimated
    assert second.estimated_start_at is None and second.estimate_basis == ""


@cycle_db
def test_an_estimate_left_on_a_job_that_left_the_queue_is_cleared(one_instance: Any) -> None:
    job = _submit("only", 10)
    t0 = _t0()
    assert run_cycle(now=t0) is not None
    # A refresh that read the queue before this dispatch wrote after it.
    Job.objects.filter(pk=job.pk).update(estimated_start_at=t0, estimate_basis="stale")
    assert refresh_estimates(now=t0).changed == (job.pk,)  # cleared: pushed as cleared
    job.refresh_from_db()
    assert job.estimated_start_at is None and job.estimate_basis == ""


STORE_CHECK = """
from datetime import timedelta
from django.db import connection
from django.utils import timezone
from quotaweb.models import CapacityUnit, Job, QuotaShare, CapacityLimit
from quotaweb.scheduling.clock import to_engine
from quotaweb.scheduling.estimates import WRITE_BATCH, store
from quotaweb.services.jobs import submit_job
from scheduler.forecast import Estimate
assert connection.vendor == "{vendor}", connection.vendor
CapacityUnit.objects.create(name="ml.a", max_capacity=1)
share = QuotaShare.objects.create(name="QS1", sharing_strategy="LEND")
CapacityLimit.objects.create(quota_share=share, capacity_unit="ml.a", max_capacity=1)
jobs = [submit_job(None, name=f"j{{n}}", quota_share="QS1", instance_type="ml.a",
                   duration_seconds=10)[0] for n in range(WRITE_BATCH + 3)]
gone = jobs[1]
Job.objects.filter(pk=gone.pk).update(status="RUNNING")  # left the queue meanwhile
t0 = timezone.now().replace(microsecond=0)
wanted = {{}}
for n, job in enumerate(jobs):
    at = None if n % 3 == 0 else t0 + timedelta(seconds=100 * n)
    wanted[job.pk] = (at, f"when {{n}} ends")
estimates = {{str(pk): Estimate(None if at is None else to_engine(at), basis)
             for pk, (at, basis) in wanted.items()}}
changed = store(estimates)
assert changed == sorted(pk for pk in wanted if pk != gone.pk), changed
for pk, at, basis in Job.objects.values_list("id", "estimated_start_at", "estimate_basis"):
    if pk == gone.pk:
        assert (at, basis) == (None, ""), (at, basis)
        continue
    assert (at, basis) == wanted[pk], (pk, at, basis, wanted[pk])
    assert at is None or at.tzinfo is not None
assert store(estimates) == []  # the same again: nothing changed
print("stored", len(changed))
"""


@pytest.mark.django_db
def test_the_estimates_are_stored_in_batches_on_postgresql() -> None:
    """Two batches of estimates (known and unknown moments), one job that left the queue
    after the forecast read it: the queued jobs get theirs, it gets none."""
    printed: list[str] = []
    shown = {"print": lambda *words: printed.append(" ".join(map(str, words)))}
    exec(STORE_CHECK.format(vendor="postgresql"), shown)  # noqa: S102 - our own text
    assert printed == [f"stored {WRITE_BATCH + 2}"]


def test_the_estimates_are_stored_alike_on_the_embedded_sqlite_database(
        tmp_path: Any) -> None:
    printed = run_on_embedded_sqlite(tmp_path, STORE_CHECK.format(vendor="sqlite"))
    assert f"stored {WRITE_BATCH + 2}" in printed, printed


@pytest.mark.django_db
def test_the_clearing_reads_only_the_jobs_that_carry_an_estimate() -> None:
    """Its query matches the partial index job_with_estimate, so a database of a million
    finished jobs is not scanned every few seconds (PostgreSQL's plan, scans by table
    turned off so that a small table shows which index the query can use)."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        sql, params = left_queue().values_list("id").query.sql_with_params()
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "job_with_estimate" in plan, plan


def test_an_estimate_changes_when_new_known_unknown_rebased_or_moved_past_the_threshold(
) -> None:
    t = _t0()
    moved = timedelta(seconds=MOVE_THRESHOLD_SECONDS)
    assert changed(None, "", t, "when a ends")  # the first estimate
    assert changed(t, "when a ends", t, "when b ends")
    assert changed(t, "b", None, "b") and changed(None, "b", t, "b")
    assert not changed(None, "b", None, "b")
    assert not changed(t, "b", t + moved, "b") and not changed(t, "b", t - moved, "b")
    assert changed(t, "b", t + moved + timedelta(seconds=1), "b")


@cycle_db
def test_a_failed_push_is_one_log_line_and_the_estimates_are_stored(
    one_instance: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from quotaweb.runtime import refresh_estimates_once

    _submit("first", 100)
    second = _submit("second", 50)
    assert run_cycle() is not None

    def down(payloads: list[Any]) -> None:
        raise ConnectionError("channel layer down")

    with caplog.at_level("WARNING"):
        assert refresh_estimates_once(down) is True
    [line] = caplog.records
    assert "not pushed" in line.getMessage() and "channel layer down" in line.getMessage()
    assert line.exc_info is None
    second.refresh_from_db()
    assert second.estimate_basis.startswith("when first ends")


@pytest.mark.django_db
def test_a_command_jobs_runtime_is_the_median_of_its_shares_recent_runs(
        one_instance: Any) -> None:
    t0 = _t0()
    for index, seconds in enumerate((120, 180, 900)):
        done = Job.objects.create(name="train", quota_share=one_instance, instance_type=UNIT,
                                  executor="local", command="true", status="SUCCEEDED")
        end = t0 - timedelta(hours=index + 1)
        Attempt.objects.create(job=done, number=1, scheduled_at=end, starting_at=end,
                               started_at=end - timedelta(seconds=seconds), stopped_at=end,
                               outcome="SUCCEEDED")
    waiting = Job.objects.create(name="train", quota_share=one_instance, instance_type=UNIT,
                                 executor="local", command="true", status="RUNNABLE")
    fresh = Job.objects.create(name="eval", quota_share=one_instance, instance_type=UNIT,
                               executor="local", command="true", status="RUNNABLE",
                               max_runtime_seconds=600)
    found = outlooks(load_snapshot(t0).snapshot)
    assert found[str(waiting.pk)].runtime.seconds == 180
    assert found[str(waiting.pk)].runtime.basis == "median of the share's last 3 runs of 'train'"
    assert found[str(fresh.pk)].runtime.seconds == 600
    assert found[str(fresh.pk)].runtime.basis == "its max runtime, 10 min"


@cycle_db
def test_the_in_process_forecaster_refreshes_on_its_own_thread(one_instance: Any) -> None:
    import time

    from quotaweb.runtime import Forecaster

    _submit("first", 100)
    second = _submit("second", 50)
    assert run_cycle() is not None
    forecaster = Forecaster(period=0.1)
    forecaster.start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            second.refresh_from_db()
            if second.estimated_start_at is not None:
                break
            time.sleep(0.05)
    finally:
        forecaster.stop()
    assert second.estimated_start_at is not None
    assert second.estimate_basis.startswith("when first ends")


class _FakeRedis:
    """Just SET NX and DEL: the forecast task's one-at-a-time key."""

    def __init__(self) -> None:
        self.keys: set[str] = set()

    def set(self, key: str, value: str, nx: bool, ex: int) -> bool:
        assert nx and ex > 0
        if key in self.keys:
            return False
        self.keys.add(key)
        return True

    def delete(self, key: str) -> None:
        self.keys.discard(key)


def test_the_celery_task_refreshes_once_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    from quotaweb import runtime, tasks

    fake, refreshed = _FakeRedis(), []
    monkeypatch.setattr(tasks, "redis_client", lambda: fake)
    monkeypatch.setattr(runtime, "refresh_estimates_once", lambda: refreshed.append(1) or True)
    assert tasks.refresh_estimates() is True and refreshed == [1]
    assert fake.keys == set()  # released
    fake.keys.add(tasks.FORECAST_KEY)  # another refresh is running
    assert tasks.refresh_estimates() is False and refreshed == [1]
