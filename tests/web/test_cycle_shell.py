"""The scheduling cycle through the real shell against PostgreSQL (docs/architecture.md, Shell): the
snapshot's fixed query count, one transaction per cycle (nothing half-applied, a stale plan
rolled back), the time-driven lifecycle, the event outbox's order, and cycle timings."""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from quotaweb.models import (
    Attempt,
    CapacityUnit,
    CycleRecord,
    Event,
    Job,
    SchedulerState,
    UsageSample,
    WarmPool,
    WarmPoolSegment,
)
from quotaweb.scheduling import apply as apply_module
from quotaweb.scheduling import events
from quotaweb.scheduling import tick as tick_module
from quotaweb.scheduling.snapshot import load_snapshot
from quotaweb.scheduling.tick import CycleReport, run_cycle
from quotaweb.services import admission
from quotaweb.services.errors import Conflict
from quotaweb.services.jobs import submit_job, terminate_job, update_priority
from scheduler import Dispatch, schedule

UNIT = "ml.g5.xlarge"
GRACE = 30
COLD = 60
WARM = 5

cycle_db = pytest.mark.django_db(transaction=True)


def _t0() -> datetime:
    return timezone.now().replace(microsecond=0)


def _cycle(now: datetime) -> CycleReport:
    report = run_cycle(now=now)
    assert report is not None, f"the cycle at {now} did not run or was rolled back"
    return report


def _submit(name: str, share: str = "QS1", **fields: Any) -> Job:
    fields.setdefault("duration_seconds", 100)
    job, created = submit_job(None, name=name, quota_share=share, instance_type=UNIT,
                              **fields)
    assert created
    return job


def _status(job: Job) -> str:
    job.refresh_from_db()
    return job.status


def _events(job: Job, *types: str) -> list[Event]:
    return list(Event.objects.filter(job=job, type__in=types).order_by("id"))


def _last_event_id() -> int:
    return Event.objects.order_by("-id").values_list("id", flat=True).first() or 0


@pytest.fixture
def grace(settings: Any) -> int:
    settings.QUOTAWEB = {**settings.QUOTAWEB, "PREEMPTION_GRACE_SECONDS": GRACE}
    return GRACE


@pytest.fixture
def one_share(make_share: Callable[..., Any], grace: int) -> Any:
    """One instance, cold start 60 s, warm start 5 s, room for one warm instance; QS1 owns
    it, with in-share preemption."""
    CapacityUnit.objects.create(name=UNIT, max_capacity=1, warm_pool_limit=1,
                                cold_start_seconds=COLD, warm_start_seconds=WARM)
    return make_share("QS1", {UNIT: 1}, sharing_strategy="LEND", in_share_preemption=True)


@pytest.fixture
def three_instances(make_share: Callable[..., Any], grace: int) -> Any:
    """Three instances, no start delays; QS1 owns them all."""
    CapacityUnit.objects.create(name=UNIT, max_capacity=3, cold_start_seconds=0,
                                warm_start_seconds=0)
    return make_share("QS1", {UNIT: 3}, sharing_strategy="LEND")


# The snapshot's query count -----------------------------------------------------------


def _populate(count: int, shares: list[Any], first_instance: int) -> int:
    """`count` live jobs (half queued, half active with an open attempt, every active job on
    its own instance) and count // 10 (at least one) Available warm pools, each owned by a
    SUCCEEDED job.  Returns the next free instance number."""
    now = timezone.now()
    statuses = ("RUNNABLE", "SUBMITTED", "SCHEDULED", "STARTING", "RUNNING", "RUNNABLE")
    instance = first_instance
    jobs: list[Job] = []
    for index in range(count):
        status = statuses[index % len(statuses)]
        active = status in ("SCHEDULED", "STARTING", "RUNNING")
        jobs.append(Job(
            name=f"j{first_instance}-{index}", quota_share=shares[index % len(shares)],
            priority=index % 7, instance_type=UNIT, executor="simulated",
            duration_seconds=1000, status=status,
            instances=[instance] if active else [], scheduled_at=now if active else None,
            started_at=now if status == "RUNNING" else None,
            pending_code="WAITING_FOR_CAPACITY" if status == "RUNNABLE" else None,
        ))
        instance += active
    Job.objects.bulk_create(jobs)
    Attempt.objects.bulk_create(
        Attempt(job=job, number=1, instances=job.instances, scheduled_at=now, starting_at=now,
                started_at=job.started_at)
        for job in jobs if job.instances
    )
    owners = Job.objects.bulk_create(
        Job(name=f"owner{first_instance}-{index}", quota_share=shares[index % len(shares)],
            instance_type=UNIT, executor="simulated", duration_seconds=10, status="SUCCEEDED",
            keep_alive_seconds=600)
        for index in range(max(1, count // 10))
    )
    WarmPool.objects.bulk_create(
        WarmPool(quota_share=owner.quota_share, owner=owner, instance_type=UNIT,
                 instance_count=1, instances=[instance + index], status="Available",
                 chain_started_at=now, available_since=now,
                 expires_at=now + timedelta(seconds=600))
        for index, owner in enumerate(owners)
    )
    return instance + len(owners)


@pytest.mark.django_db
def test_the_snapshot_takes_as_many_queries_for_1000_jobs_as_for_10(
    make_share: Callable[..., Any], django_assert_num_queries: Any
) -> None:
    CapacityUnit.objects.create(name=UNIT, max_capacity=2000)
    shares = [make_share(f"QS{i}", {UNIT: 500}, sharing_strategy="LEND_AND_BORROW",
                         borrow_limit=-1) for i in (1, 2, 3)]
    next_instance = _populate(10, shares, 0)
    with CaptureQueriesContext(connection) as small:
        loaded = load_snapshot(timezone.now())
    assert (loaded.job_count, len(loaded.snapshot.warm_pools)) == (10, 1)

    _populate(990, shares, next_instance)
    with django_assert_num_queries(len(small.captured_queries)):
        loaded = load_snapshot(timezone.now())
    assert (loaded.job_count, len(loaded.snapshot.warm_pools)) == (1000, 1 + 99)
    assert sum(job.status.active for job in loaded.snapshot.jobs) == 500
    schedule(loaded.snapshot)  # a consistent snapshot: the engine accepts it


@pytest.mark.django_db
def test_each_load_sees_every_change_to_a_job_row(make_share: Callable[..., Any]) -> None:
    """Engine Jobs of unchanged rows are reused from one load to the next; any change to
    a row (here its priority, pending reason and status) gives a new one."""
    CapacityUnit.objects.create(name=UNIT, max_capacity=4)
    make_share("QS1", {UNIT: 4})
    kept, changed = _submit("kept"), _submit("changed", priority=1)

    def engine_jobs() -> dict[str, Any]:
        return {job.id: job for job in load_snapshot(timezone.now()).snapshot.jobs}

    first = engine_jobs()
    Job.objects.filter(pk=changed.pk).update(priority=7, pending_code="WAITING_FOR_CAPACITY",
                                             status="RUNNABLE")
    second = engine_jobs()
    assert second[str(kept.pk)] is first[str(kept.pk)]
    now_changed = second[str(changed.pk)]
    assert (now_changed.priority, now_changed.pending_code, now_changed.status.value) == (
        7, "WAITING_FOR_CAPACITY", "RUNNABLE")
    Job.objects.filter(pk=kept.pk).update(status="SUCCEEDED")
    assert set(engine_jobs()) == {str(changed.pk)}


# One transaction per cycle ------------------------------------------------------------


def _assert_nothing_applied(jobs: list[Job], cursor: int, state: SchedulerState,
                            records: int) -> None:
    assert sorted(_status(job) for job in jobs) == ["SUBMITTED"] * len(jobs)
    assert not Attempt.objects.exists()
    assert list(Event.objects.filter(id__gt=cursor).values_list("type", flat=True)) == []
    assert not UsageSample.objects.filter(time__gt=state.last_cycle_at).exists()
    after = SchedulerState.objects.get(id=1)
    assert (after.last_cycle_at, after.last_cycle_ms) == (state.last_cycle_at,
                                                          state.last_cycle_ms)
    assert CycleRecord.objects.count() == records


def _fail_on_second_dispatch(kind: str) -> Callable[..., None]:
    real = apply_module._dispatch
    calls = []

    def dispatch(decision: Any, now: datetime, *batch: Any) -> None:
        calls.append(decision)
        if len(calls) == 2:
            if kind == "database":
                with connection.cursor() as cursor:
                    cursor.execute("SELECT 1 / 0")  # a real error inside PostgreSQL
            raise RuntimeError("injected half-way through the apply")
        real(decision, now, *batch)

    return dispatch


@cycle_db
@pytest.mark.parametrize("kind", ["python", "database"])
def test_an_error_half_way_through_the_apply_applies_nothing(
    three_instances: Any, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    t0 = _t0()
    _cycle(t0)  # an earlier cycle, so that last_cycle_at has a value to keep
    state = SchedulerState.objects.get(id=1)
    jobs = [_submit(f"job{i}") for i in range(3)]
    cursor = _last_event_id()

    monkeypatch.setattr(apply_module, "_dispatch", _fail_on_second_dispatch(kind))
    with pytest.raises(Exception) as raised:
        run_cycle(now=t0 + timedelta(seconds=1))
    expected = "division by zero" if kind == "database" else "injected"
    assert expected in str(raised.value)
    _assert_nothing_applied(jobs, cursor, state, records=1)

    monkeypatch.undo()
    report = _cycle(t0 + timedelta(seconds=2))
    assert sum(isinstance(d, Dispatch) for d in report.result.decisions) == 3
    assert sorted(_status(job) for job in jobs) == ["SCHEDULED"] * 3
    assert Attempt.objects.count() == 3
    assert list(Event.objects.filter(id__gt=cursor).values_list("type", flat=True)) == [
        "DISPATCHED"] * 3
    assert UsageSample.objects.filter(time=t0 + timedelta(seconds=2), in_use=3).count() == 1
    assert SchedulerState.objects.get(id=1).last_cycle_at == t0 + timedelta(seconds=2)


@cycle_db
def test_a_job_terminated_between_load_and_apply_rolls_the_cycle_back(
    three_instances: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    t0 = _t0()
    _cycle(t0)
    state = SchedulerState.objects.get(id=1)
    jobs = [_submit(f"job{i}") for i in range(3)]
    cursor = _last_event_id()
    real_schedule = tick_module.schedule
    terminated: list[int] = []

    def schedule_then_terminate(snapshot: Any) -> Any:
        result = real_schedule(snapshot)
        # The last job the plan dispatches is terminated by a user meanwhile, so the
        # dispatches before it are applied and must be rolled back with it.
        last = [d for d in result.decisions if isinstance(d, Dispatch)][-1]
        terminate_job(int(last.job_id), "changed my mind")
        terminated.append(int(last.job_id))
        return result

    monkeypatch.setattr(tick_module, "schedule", schedule_then_terminate)
    assert run_cycle(now=t0 + timedelta(seconds=1)) is None
    gone = Job.objects.get(pk=terminated[0])
    assert (gone.status, gone.status_reason) == ("FAILED", "changed my mind")
    assert list(Event.objects.filter(id__gt=cursor).values_list("type", "job_id")) == [
        ("TERMINATED", gone.pk)]
    _assert_nothing_applied([job for job in jobs if job.pk != gone.pk], _last_event_id(),
                            state, records=1)

    monkeypatch.undo()
    report = _cycle(t0 + timedelta(seconds=2))
    dispatched = [int(d.job_id) for d in report.result.decisions if isinstance(d, Dispatch)]
    assert dispatched == [job.pk for job in jobs if job.pk != gone.pk]
    assert [_status(job) for job in jobs] == [
        "FAILED" if job.pk == gone.pk else "SCHEDULED" for job in jobs]
    assert CycleRecord.objects.count() == 2


# The lifecycle through transitions ----------------------------------------------------


@cycle_db
def test_an_attempt_waits_for_grace_then_starts_runs_and_succeeds_on_time(
    one_share: Any,
) -> None:
    t0 = _t0()
    low = _submit("low", priority=1, duration_seconds=1000)
    _cycle(t0)
    _cycle(t0 + timedelta(seconds=COLD))
    assert _status(low) == "RUNNING"

    high = _submit("high", priority=5, duration_seconds=100)
    t1 = t0 + timedelta(seconds=100)
    _cycle(t1)  # high preempts the RUNNING low in QS1: it waits for low's grace
    assert [(e.type, e.details) for e in _events(low, "PREEMPTED")] == [
        ("PREEMPTED", {"kind": "IN_SHARE", "preempted_by": high.pk})]
    attempt = Attempt.objects.get(job=high)
    assert (attempt.scheduled_at, attempt.starting_at) == (t1, t1 + timedelta(seconds=GRACE))

    def at(seconds: int) -> tuple[str, datetime | None]:
        _cycle(t1 + timedelta(seconds=seconds))
        attempt.refresh_from_db()
        return _status(high), attempt.running_at

    running_at = t1 + timedelta(seconds=GRACE + COLD)
    assert at(GRACE - 1) == ("SCHEDULED", None)
    assert at(GRACE) == ("STARTING", running_at)
    assert at(GRACE + COLD - 1) == ("STARTING", running_at)
    # Cycles that come late still stamp each transition at the second it was due.
    assert at(GRACE + COLD + 7) == ("RUNNING", running_at)
    ends_at = running_at + timedelta(seconds=100)
    assert at(GRACE + COLD + 99) == ("RUNNING", running_at)
    assert at(GRACE + COLD + 500)[0] == "SUCCEEDED"
    assert [(e.type, e.time) for e in _events(high, "RUNNING", "SUCCEEDED")] == [
        ("RUNNING", running_at), ("SUCCEEDED", ends_at)]
    attempt.refresh_from_db()
    high.refresh_from_db()
    assert (attempt.started_at, attempt.stopped_at, attempt.outcome) == (
        running_at, ends_at, "SUCCEEDED")
    assert (high.started_at, high.stopped_at) == (running_at, ends_at)


@cycle_db
def test_a_warm_pool_is_left_reused_with_a_warm_start_and_expires(one_share: Any) -> None:
    t0 = _t0()
    first = _submit("first", keep_alive_seconds=300, duration_seconds=100)
    _cycle(t0)
    _cycle(t0 + timedelta(seconds=COLD))
    left_at = t0 + timedelta(seconds=COLD + 100)
    _cycle(t0 + timedelta(seconds=200))  # first SUCCEEDED at left_at, leaving its instance
    pool = WarmPool.objects.get()
    assert (pool.status, pool.owner_id, pool.available_since, pool.expires_at) == (
        "Available", first.pk, left_at, left_at + timedelta(seconds=300))
    assert [(e.time, e.details) for e in _events(first, "WARM_POOL_AVAILABLE")] == [
        (left_at, {"expires_at": _iso(left_at + timedelta(seconds=300))})]
    assert UsageSample.objects.filter(quota_share=one_share).latest("id").warm == 1

    second = _submit("second", keep_alive_seconds=120, duration_seconds=50)
    reused_at = t0 + timedelta(seconds=210)
    _cycle(reused_at)
    attempt = Attempt.objects.get(job=second)
    assert (attempt.warm_start, attempt.warm_pool_id, attempt.starting_at) == (
        True, pool.pk, reused_at)
    assert [e.details for e in _events(second, "DISPATCHED")] == [
        {"borrowed_instances": 0, "warm_start": True}]
    assert [(e.time, e.details) for e in _events(first, "WARM_POOL_REUSED")] == [
        (reused_at, {"reused_by": second.pk})]
    pool.refresh_from_db()
    assert (pool.status, pool.owner_id) == ("InUse", second.pk)
    segment = WarmPoolSegment.objects.get(job=first)
    assert (segment.status, segment.reused_by_id, segment.retained_billable_seconds) == (
        "Reused", second.pk, 50)

    _cycle(reused_at + timedelta(seconds=WARM))
    assert _status(second) == "RUNNING"
    ended_at = reused_at + timedelta(seconds=WARM + 50)
    _cycle(ended_at)
    pool.refresh_from_db()
    expires_at = ended_at + timedelta(seconds=120)
    assert (_status(second), pool.status, pool.owner_id, pool.expires_at) == (
        "SUCCEEDED", "Available", second.pk, expires_at)

    # The engine's housekeeping ends the pool at its expiry, not a second before.
    _cycle(expires_at - timedelta(seconds=1))
    pool.refresh_from_db()
    assert pool.status == "Available"
    report = _cycle(expires_at)
    assert [type(d).__name__ for d in report.result.decisions] == ["TerminateWarmPool"]
    pool.refresh_from_db()
    assert (pool.status, pool.termination_reason) == ("Terminated", "EXPIRED")
    assert [(e.time, e.details) for e in _events(second, "WARM_POOL_TERMINATED")] == [
        (expires_at, {"reason": "EXPIRED"})]
    segment = WarmPoolSegment.objects.get(job=second)
    assert (segment.status, segment.termination_reason, segment.retained_billable_seconds) == (
        "Terminated", "EXPIRED", 120)
    assert UsageSample.objects.filter(quota_share=one_share).latest("id").warm == 0


@cycle_db
def test_running_past_max_runtime_fails_the_job(one_share: Any) -> None:
    t0 = _t0()
    job = _submit("slow", duration_seconds=100, max_runtime_seconds=50)
    _cycle(t0)
    _cycle(t0 + timedelta(seconds=COLD + 49))
    assert _status(job) == "RUNNING"
    _cycle(t0 + timedelta(seconds=COLD + 300))
    failed_at = t0 + timedelta(seconds=COLD + 50)
    job.refresh_from_db()
    assert (job.status, job.status_reason, job.failed_count, job.stopped_at) == (
        "FAILED", "MAX_RUNTIME_EXCEEDED", 1, failed_at)
    attempt = Attempt.objects.get(job=job)
    assert (attempt.outcome, attempt.failure, attempt.stopped_at) == (
        "FAILED", "ALGORITHM_ERROR", failed_at)
    assert [(e.time, e.details) for e in _events(job, "FAILED")] == [
        (failed_at, {"reason": "MAX_RUNTIME_EXCEEDED"})]


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


# The event outbox's order -------------------------------------------------------------


class Writers:
    """Tags every event with the database transaction that wrote it, and watches the
    outbox as a reader following a cursor would."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.transaction_of: dict[int, int] = {}
        self.late: list[tuple[int, int]] = []  # (id that appeared, id already visible)
        self._lock = threading.Lock()
        real_record, real_record_all = events.record, events.record_all

        def record(event_type: str, **fields: Any) -> Any:
            item = real_record(event_type, **fields)
            self._tag([item.pk])
            return item

        def record_all(items: list[Any], **options: Any) -> Any:
            written = real_record_all(items, **options)
            self._tag([item.pk for item in written])
            return written

        real_write_at_once = admission.write_at_once

        def write_at_once(user: Any, jobs: Any, **options: Any) -> bool:
            # A submission's own transaction writes its events (not through record_all).
            written = real_write_at_once(user, jobs, **options)
            if written:
                ids = Event.objects.filter(job__in=jobs, type="SUBMITTED").values_list(
                    "id", flat=True)
                with self._lock:  # a transaction of their own
                    self.transaction_of.update(dict.fromkeys(ids, -jobs[0].pk))
            return written

        monkeypatch.setattr(events, "record", record)
        monkeypatch.setattr(events, "record_all", record_all)
        monkeypatch.setattr(admission, "write_at_once", write_at_once)

    def _tag(self, ids: list[int]) -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT txid_current()")
            txid = cursor.fetchone()[0]
        with self._lock:
            self.transaction_of.update(dict.fromkeys(ids, txid))

    def watch(self, done: threading.Event) -> None:
        """An id that becomes readable below one already read would be skipped by a reader
        that follows `id > cursor` (docs/api.md: GET /events?after=); readers read up to
        events.readable_upto(), as the API and the broadcaster do."""
        seen: set[int] = set()
        while True:
            finished = done.is_set()
            visible = set(events.readable(Event.objects.all()).values_list("id", flat=True))
            new = visible - seen
            if seen and new and min(new) < max(seen):
                self.late.append((min(new), max(seen)))
            seen |= visible
            if finished:
                return


def _run_together(*targets: Callable[[], None]) -> None:
    """Run each target on its own thread (hence its own connection) and wait for all;
    the first error a target raised is raised here."""
    errors: list[BaseException] = []

    def run(target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException as error:  # noqa: BLE001 - re-raised below
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(target,)) for target in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads), "a thread hung"
    if errors:
        raise errors[0]


@cycle_db
def test_readers_never_skip_an_event_and_each_change_is_contiguous_but_for_submissions(
    make_share: Callable[..., Any], grace: int, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    settings.QUOTAWEB = {**settings.QUOTAWEB, "PREEMPTION_GRACE_SECONDS": 0}
    CapacityUnit.objects.create(name=UNIT, max_capacity=8, cold_start_seconds=0,
                                warm_start_seconds=0)
    for name in ("QS1", "QS2"):
        make_share(name, {UNIT: 4}, sharing_strategy="LEND_AND_BORROW", borrow_limit=-1,
                   in_share_preemption=True)
    writers = Writers(monkeypatch)
    t0 = _t0()
    done = threading.Event()
    rng = random.Random(7)
    submitted: list[int] = []

    def cycles() -> None:
        for second in range(40):
            run_cycle(now=t0 + timedelta(seconds=second))

    def users() -> None:
        for index in range(80):
            job = _submit(f"u{index}", share=rng.choice(["QS1", "QS2"]),
                          priority=rng.randrange(5), duration_seconds=rng.randrange(1, 4))
            submitted.append(job.pk)
            if index % 3 == 0:
                with contextlib.suppress(Conflict):  # the job may have ended meanwhile
                    update_priority(rng.choice(submitted), rng.randrange(9))

    def writers_then_stop() -> None:
        try:
            _run_together(cycles, users)
        finally:
            done.set()

    _run_together(writers_then_stop, lambda: writers.watch(done))

    rows = list(Event.objects.order_by("id").values_list("id", "type"))
    assert set(writers.transaction_of) == {pk for pk, _ in rows}, \
        "an event was written outside record()"
    # Submissions do not wait for the change lock, so their events may come between a
    # cycle's; the writers that take it (the cycle, priority changes) still follow one
    # another whole.
    types: dict[int, set[str]] = {}
    for pk, kind in rows:
        types.setdefault(writers.transaction_of[pk], set()).add(kind)
    submissions = {txid for txid, kinds in types.items() if kinds == {"SUBMITTED"}}
    assert submissions, "the run had no submission"
    ids = [pk for pk, _ in rows if writers.transaction_of[pk] not in submissions]
    position = {event_id: index for index, event_id in enumerate(ids)}
    by_transaction: dict[int, list[int]] = {}
    for event_id, txid in writers.transaction_of.items():
        if txid not in submissions:
            by_transaction.setdefault(txid, []).append(position[event_id])
    interleaved = [txid for txid, places in by_transaction.items()
                   if max(places) - min(places) + 1 != len(places)]
    assert interleaved == [], "another transaction's events came between one's own"
    assert writers.late == [], "an event id became visible below one already read"
    # The run exercised multi-event cycles and the users' writes at the same time.
    assert max(len(places) for places in by_transaction.values()) >= 5
    types = set(Event.objects.values_list("type", flat=True))
    assert {"SUBMITTED", "DISPATCHED", "RUNNING", "SUCCEEDED"} <= types


# Cycle timings ------------------------------------------------------------------------


@cycle_db
def test_each_cycle_records_its_timings(three_instances: Any) -> None:
    t0 = _t0()
    first = _cycle(t0)
    for index in range(4):
        _submit(f"job{index}")
    second = _cycle(t0 + timedelta(seconds=1))

    records = list(CycleRecord.objects.order_by("started_at"))
    assert [(r.started_at, r.jobs, r.decisions) for r in records] == [
        (t0, 0, 0), (t0 + timedelta(seconds=1), 4, len(second.result.decisions))]
    assert len(second.result.decisions) == 4  # three dispatches and one pending reason
    for record, report in zip(records, (first, second), strict=True):
        assert (record.load_ms, record.plan_ms, record.apply_ms) == (
            report.load_ms, report.plan_ms, report.apply_ms)
        assert min(record.load_ms, record.plan_ms, record.apply_ms) > 0
    state = SchedulerState.objects.get(id=1)
    assert state.last_cycle_at == t0 + timedelta(seconds=1)
    assert state.last_cycle_ms == round(second.total_ms, 3)


@cycle_db
def test_a_pool_expired_before_a_late_cycle_ends_and_is_billed_at_its_expiry(
    one_share: Any,
) -> None:
    """A late cycle stamps an expiry at the second it fell due, as the simulator does."""
    t0 = _t0()
    job = _submit("first", keep_alive_seconds=100, duration_seconds=100)
    _cycle(t0)
    _cycle(t0 + timedelta(seconds=COLD))
    _cycle(t0 + timedelta(seconds=COLD + 100))
    expires = t0 + timedelta(seconds=COLD + 200)
    _cycle(expires + timedelta(seconds=500))  # the cycle comes late
    event = Event.objects.get(type="WARM_POOL_TERMINATED")
    segment = WarmPoolSegment.objects.get(job=job)
    assert (event.time, event.details) == (expires, {"reason": "EXPIRED"})
    assert segment.retained_billable_seconds == 100
