"""Submissions under concurrency (issue 23): a submission takes its share's admission lock
and announces its event with its insert, and checks the share's state and queue limits in
the statement that writes its SUBMITTED event (quotaweb/services/admission.py); readers
read events only up to the bound below which no open writer can still commit one
(quotaweb/scheduling/events.py).  These tests run real transactions on
threads of their own (their own connections) on PostgreSQL."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, transaction

from quotaweb.models import Event, Job, QuotaShare
from quotaweb.models.shares import ShareState
from quotaweb.scheduling import events
from quotaweb.services.errors import Conflict, ServiceError, TooManyRequests
from quotaweb.services.jobs import submit_job

pytestmark = pytest.mark.django_db(transaction=True)

UNIT = "ml.g5.xlarge"


@pytest.fixture
def share(member: Any, make_share: Any) -> QuotaShare:
    from quotaweb.models import CapacityUnit

    if connection.vendor != "postgresql":
        pytest.fail("these tests need PostgreSQL (DATABASE_URL): they test its locks")
    CapacityUnit.objects.create(name=UNIT, max_capacity=4)
    created: QuotaShare = make_share("QS1", {UNIT: 4}, members=(member,))
    return created


def fields(name: str) -> dict[str, Any]:
    return {"name": name, "quota_share": "QS1", "instance_type": UNIT,
            "duration_seconds": 5}


def on_threads(*targets: Callable[[], None]) -> list[BaseException]:
    """Run each target on its own thread (and connection); returns what they raised."""
    raised: list[BaseException] = []

    def run(target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException as error:  # noqa: BLE001 - returned to the test
            raised.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(target,)) for target in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads), "a thread hung"
    return raised


def wait_for_lock_waiters(count: int) -> None:
    """Until `count` backends wait for an advisory lock (generous timeout, no timing)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                           "AND NOT granted AND database = (SELECT oid FROM pg_database "
                           "WHERE datname = current_database())")
            if cursor.fetchone()[0] >= count:
                return
        time.sleep(0.05)
    pytest.fail(f"{count} submissions never waited for an advisory lock")


def test_concurrent_submissions_never_pass_the_queue_limit_together(
        share: QuotaShare, member: Any) -> None:
    QuotaShare.objects.filter(pk=share.pk).update(max_queued_jobs=5)
    refused: list[str] = []
    lock = threading.Lock()

    def submitter(index: int) -> Callable[[], None]:
        def submit() -> None:
            try:
                submit_job(member, **fields(f"j{index}"))
            except Conflict as error:
                with lock:
                    refused.append(error.code)
        return submit

    raised = on_threads(*(submitter(index) for index in range(12)))
    assert raised == []
    assert sorted(refused) == ["QUEUE_FULL"] * 7
    assert Job.objects.count() == 5
    submitted = Event.objects.filter(type="SUBMITTED")
    assert sorted(submitted.values_list("job_id", flat=True)) == sorted(
        Job.objects.values_list("id", flat=True))


def test_the_per_minute_limit_holds_under_concurrency_with_retry_after(
        share: QuotaShare, member: Any) -> None:
    QuotaShare.objects.filter(pk=share.pk).update(max_submissions_per_minute=3)
    refused: list[ServiceError] = []
    lock = threading.Lock()

    def submit(index: int) -> None:
        try:
            submit_job(member, **fields(f"j{index}"))
        except TooManyRequests as error:
            with lock:
                refused.append(error)

    assert on_threads(*(lambda index=index: submit(index) for index in range(8))) == []
    assert len(refused) == 5 and Job.objects.count() == 3
    assert all(error.retry_after is not None and error.retry_after >= 1 for error in refused)


def test_a_submission_does_not_wait_for_an_open_writer_and_readers_stop_below_it(
        share: QuotaShare, member: Any) -> None:
    """A writer that drew a lower event id stays open while a submission commits a higher
    one beside it (no lock to wait for): until the writer commits, readers' bound stays
    below its id, so neither the API's listing, the broadcaster nor the live feed's replay
    and snapshot stamp show the submission's event and move past the open one; once it
    commits, both are read, in id order."""
    from quotaweb.realtime.broadcast import read_batch
    from quotaweb.realtime.feed import on_connect

    holding, submitted, release = threading.Event(), threading.Event(), threading.Event()
    written: dict[str, int] = {}
    seen: dict[str, Any] = {}

    def holder() -> None:
        with transaction.atomic():
            events.lock_changes()
            written["holder"] = events.record("SHARE_UPDATED", quota_share="QS1").pk
            holding.set()
            assert release.wait(60)

    def submitter() -> None:
        assert holding.wait(60)
        job, _ = submit_job(member, **fields("beside"))
        written["job"] = job.pk
        submitted.set()

    def reader() -> None:
        try:
            assert submitted.wait(60)
            seen["bound"] = events.readable_upto()
            seen["rows"] = list(events.readable(Event.objects.all()).values_list("id", flat=True))
            seen["committed"] = list(Event.objects.values_list("type", flat=True))
            seen["broadcast"] = read_batch(100).payloads
            # A reconnect that saw everything before the committed event: its replay.
            seen["replay"] = on_connect(Event.objects.get().pk - 1)
            seen["stamp"] = on_connect(None)[0]["last_event_id"]  # a snapshot's
        finally:
            release.set()

    assert on_threads(holder, submitter, reader) == []
    event_id = Event.objects.get(type="SUBMITTED", job_id=written["job"]).pk
    assert written["holder"] < event_id
    assert seen["committed"] == ["SUBMITTED"]  # it committed while the holder was open
    assert seen["bound"] < written["holder"]
    assert seen["rows"] == [] and seen["broadcast"] == [] and seen["replay"] == []
    assert seen["stamp"] < written["holder"]
    assert events.readable_upto() == event_id
    assert list(events.readable(Event.objects.order_by("id")).values_list("type", flat=True)
                ) == ["SHARE_UPDATED", "SUBMITTED"]


def test_readers_bound_ignores_its_own_transaction_and_follows_the_lowest_open_writer(
        share: QuotaShare, member: Any) -> None:
    """Two writers open at once: the bound stays below the lower one's id until it
    commits, then below the other's; a transaction's own announcement does not bound
    what it reads."""
    steps = [threading.Event() for _ in range(4)]
    written: dict[str, int] = {}
    bounds: list[int] = []

    def writer(name: str, ready: threading.Event, after: threading.Event | None,
               commit: threading.Event) -> Callable[[], None]:
        def write() -> None:
            if after is not None:
                assert after.wait(60)
            with transaction.atomic():
                events.announce()
                written[name] = events.record("SHARE_UPDATED", quota_share="QS1").pk
                ready.set()
                assert commit.wait(60)
        return write

    first_open, second_open, first_commit, second_commit = steps

    def reader() -> None:
        try:
            assert second_open.wait(60)
            bounds.append(events.readable_upto())
            first_commit.set()
            deadline = time.monotonic() + 60  # until the first's commit is seen
            while events.readable_upto() < written["first"] and time.monotonic() < deadline:
                time.sleep(0.01)
            bounds.append(events.readable_upto())
            with transaction.atomic():
                events.announce()  # this reader's own announcement
                bounds.append(events.readable_upto())
            second_commit.set()
        finally:
            first_commit.set()
            second_commit.set()

    assert on_threads(writer("first", first_open, None, first_commit),
                      writer("second", second_open, first_open, second_commit),
                      reader) == []
    assert written["first"] < written["second"]
    assert bounds[0] < written["first"]
    assert written["first"] <= bounds[1] < written["second"]
    assert bounds[2] == bounds[1]
    assert events.readable_upto() == written["second"]


def test_a_share_disabled_while_a_submission_waits_refuses_it_and_nothing_is_written(
        share: QuotaShare, member: Any) -> None:
    holding, release = threading.Event(), threading.Event()
    refused: list[str] = []

    def disabler() -> None:  # as configuration.update_share holds the share
        with transaction.atomic():
            events.lock_changes()
            events.lock_shares([share.pk])
            QuotaShare.objects.filter(pk=share.pk).update(state=ShareState.DISABLED)
            holding.set()
            assert release.wait(60)

    def submitter() -> None:
        assert holding.wait(60)
        try:
            submit_job(member, **fields("too-late"))
        except Conflict as error:
            refused.append(error.code)

    def releaser() -> None:
        assert holding.wait(60)
        wait_for_lock_waiters(1)
        release.set()

    assert on_threads(disabler, submitter, releaser) == []
    assert refused == ["SHARE_DISABLED"]
    assert Job.objects.count() == 0 and not Event.objects.filter(type="SUBMITTED").exists()


def test_a_batch_is_admitted_whole_or_refused_whole_under_concurrency(
        share: QuotaShare, member: Any) -> None:
    from quotaweb.services.batch import submit_jobs

    QuotaShare.objects.filter(pk=share.pk).update(max_queued_jobs=10)
    outcomes: list[str] = []
    lock = threading.Lock()

    def batch(index: int) -> None:
        try:
            submit_jobs(member, [fields(f"b{index}-{n}") for n in range(4)])
            result = "admitted"
        except Conflict as error:
            result = error.code
        with lock:
            outcomes.append(result)

    assert on_threads(*(lambda index=index: batch(index) for index in range(5))) == []
    assert sorted(outcomes) == ["QUEUE_FULL"] * 3 + ["admitted"] * 2
    assert Job.objects.count() == 8
    names = sorted(Job.objects.values_list("name", flat=True))
    assert len({name.split("-")[0] for name in names}) == 2  # two whole batches
    assert Event.objects.filter(type="SUBMITTED").count() == 8


def round_trips(action: Callable[[], object]) -> int:
    """How many times this connection waited for PostgreSQL's answer while `action` ran:
    each wait ends with the server's ReadyForQuery (after a query string of the simple
    protocol, however many statements it holds, or at a Sync of the extended protocol, after
    every statement of a pipeline), counted in libpq's trace of the protocol's messages."""
    import tempfile

    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    with tempfile.TemporaryFile("w+") as trace:
        pgconn.trace(trace.fileno())
        try:
            action()
        finally:
            pgconn.untrace()
        trace.seek(0)
        return sum(1 for line in trace if "\tB\t" in line and "ReadyForQuery" in line)


def test_a_submission_is_one_read_and_a_transaction_of_one_round_trip(
        share: QuotaShare, member: Any) -> None:
    """After the share is read: BEGIN, the share's lock, the announcement, the statement
    that inserts the job and its event, and COMMIT, sent together (no round trip inside
    the admission lock).  The same for a batch, after its share, limits and members are
    read.  The rows are the ORM's."""
    from quotaweb.services.batch import submit_jobs

    submit_job(member, **fields("warm"))  # the token-free caches and the first connection
    assert round_trips(lambda: submit_job(member, **fields("one"))) == 1 + 1
    assert round_trips(lambda: submit_job(member, **fields("two"), client_token="t")) == 2 + 1
    assert round_trips(lambda: submit_job(member, **fields("two"), client_token="t")) == 1
    assert round_trips(lambda: submit_jobs(member, [fields(f"b{n}") for n in range(10)])
                       ) == 3 + 1
    assert Event.objects.filter(type="SUBMITTED").count() == Job.objects.count() == 13
    assert_rows_as_the_orm_writes(member)


def assert_rows_as_the_orm_writes(member: Any) -> None:
    """A job inserted with its event in one statement (a single submission or a batch,
    outside a transaction) has every column as the ORM's insert writes it (inside one)."""
    from quotaweb.services.batch import submit_jobs

    given = {"priority": 3, "keep_alive_seconds": 0, "environment": {"A": "1"},
             "client_token": None, "duration_seconds": 7}
    at_once = [submit_job(member, **{**fields("single"), **given})[0],
               submit_jobs(member, [{**fields("batch"), **given}])[0][0]]
    with transaction.atomic():  # the ORM's path
        by_orm = [submit_job(member, **{**fields("single"), **given})[0],
                  submit_jobs(member, [{**fields("batch"), **given}])[0][0]]
    ignored = {"id", "created_at"}

    def row(job: Job) -> dict[str, Any]:
        return {key: value for key, value in Job.objects.filter(pk=job.pk).values()[0].items()
                if key not in ignored}

    for written, expected in zip(at_once, by_orm, strict=True):
        assert {key: value for key, value in row(written).items()
                if value != row(expected)[key]} == {}
    for job in at_once:  # the object returned is the row written
        stored = Job.objects.get(pk=job.pk)
        assert (job.created_at, job.name) == (stored.created_at, stored.name)
        assert Event.objects.get(job=job).time == stored.created_at


def test_the_lookup_and_the_write_are_prepared_once_per_connection(
        share: QuotaShare, member: Any) -> None:
    """Their plans are kept (quotaweb/postgresql/prepared.py): the first submission on a
    connection prepares the share lookup and the write, later ones reuse them; Django's
    own statements stay unprepared."""
    def prepared() -> list[str]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT statement FROM pg_prepared_statements ORDER BY name")
            return [statement for (statement,) in cursor.fetchall()]

    submit_job(member, **fields("first"))
    after_first = prepared()
    assert any(text.startswith("WITH new_job AS (INSERT INTO quotaweb_job")
               for text in after_first), after_first
    assert any('FROM "quotaweb_quotashare" s' in text for text in after_first), after_first
    for n in range(3):
        submit_job(member, **fields(f"more{n}"))
    Job.objects.filter(name="more0").count()  # the ORM: not prepared
    assert prepared() == after_first
    assert Job.objects.count() == Event.objects.filter(type="SUBMITTED").count() == 4


def test_a_client_token_taken_before_the_write_rolls_the_whole_batch_back(
        share: QuotaShare, member: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another request used one of the batch's client_tokens after this one looked them up
    (here: the lookup is skipped once): the write's statement raises (QW409), nothing of
    the batch is committed, and the batch is answered as if it came second: that token's
    job returned, the others written once."""
    from quotaweb.services import batch as batch_services

    first, _ = submit_job(member, **fields("taken"), client_token="t1")
    real_find = batch_services._find_repeats
    calls: list[int] = []

    def find_late(user: Any, checked: Any) -> None:
        calls.append(len(checked))
        if len(calls) > 1:
            real_find(user, checked)

    monkeypatch.setattr(batch_services, "_find_repeats", find_late)
    results = batch_services.submit_jobs(member, [
        {**fields("new-a"), "client_token": "t2"}, {**fields("taken"), "client_token": "t1"},
        fields("new-b")])
    assert len(calls) == 2  # the write found the token taken, then the lookup ran
    assert [(job.name, created) for job, created in results] == [
        ("new-a", True), ("taken", False), ("new-b", True)]
    assert results[1][0].pk == first.pk
    assert sorted(Job.objects.values_list("name", flat=True)) == ["new-a", "new-b", "taken"]
    assert Event.objects.filter(type="SUBMITTED").count() == 3
    assert connection.connection.info.transaction_status == 0  # idle: rolled back, usable


def test_a_refused_write_commits_nothing_and_leaves_the_connection_usable(
        share: QuotaShare, member: Any) -> None:
    """The share is DISABLED after the submission's checks read it: the write's statement
    raises (QW403) in the round trip that also carries the COMMIT, which then commits
    nothing; the refusal is explained and the next submission goes through."""
    from quotaweb.services import admission
    from quotaweb.services.batch import submit_jobs

    submit_job(member, **fields("before"))
    QuotaShare.objects.filter(pk=share.pk).update(state=ShareState.DISABLED)
    with pytest.raises(Conflict) as refused:
        submit_jobs(member, [fields("a"), fields("b")])
    assert refused.value.code == "SHARE_DISABLED"
    assert connection.connection.info.transaction_status == 0
    assert list(Job.objects.values_list("name", flat=True)) == ["before"]
    assert Event.objects.filter(type="SUBMITTED").count() == 1
    QuotaShare.objects.filter(pk=share.pk).update(state=ShareState.ENABLED)
    assert admission.can_write_at_once()
    job, created = submit_job(member, **fields("after"))
    assert created and Event.objects.filter(job=job, type="SUBMITTED").count() == 1
