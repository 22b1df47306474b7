"""Logs stored in chunks (quotaweb/executors/logs.py): what a command writes to its log file
reads back line for line through the read model, one poll stores a bounded amount in a few
rows, the limits count stored bytes (row overhead included) and lines and mark the end as
capped; old logs are pruned by their retention (quotaweb/executors/retention.py); the
migration carries LogLine rows over (docs/executors.md, Logs)."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from quotaweb import tasks
from quotaweb.celery import app
from quotaweb.executors.base import LogChunk as ExecutorLogs
from quotaweb.executors.logs import (
    CHUNK_BYTES,
    LINE_LIMIT_NOTICE,
    LOG_LIMIT_NOTICE,
    MAX_LINE_BYTES,
    READ_BYTES,
    ROW_BYTES,
    LogTail,
)
from quotaweb.executors.reports import stored_logs
from quotaweb.executors.retention import PRUNE_BATCH, prune_logs
from quotaweb.models import Attempt, Job, LogChunk, QuotaShare
from quotaweb.read_model.logs import log_tail
from quotaweb.runtime import LogPruner

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def attempt() -> Attempt:
    share = QuotaShare.objects.create(name="team")
    job = Job.objects.create(name="job", quota_share=share, instance_type="ml.test",
                             executor="local", command="x")
    now = timezone.now()
    return Attempt.objects.create(job=job, number=1, scheduled_at=now, starting_at=now)


def follow(tail: LogTail, attempt: Attempt) -> int:
    """What the supervisor does until the command's end: poll, ship; returns the polls."""
    polls = 0
    while tail.read(final=True) or tail.pending:
        tail.ship(attempt.pk)
        polls += 1
    return polls


def texts(attempt: Attempt, lines: int = 10_000) -> list[str]:
    return [line.text for line in log_tail(attempt.job_id, lines)]


def test_lines_read_back_as_written_from_rows_of_many_lines(attempt: Attempt,
                                                             tmp_path: Path) -> None:
    written = [f"line {n}" for n in range(30_000)]
    path = tmp_path / "log"
    path.write_bytes(b"crlf\r\n" + "\n".join(written).encode() + b"\nbad \xff nul \x00\nlast")
    follow(LogTail(path), attempt)
    expected = ["crlf", *written, "bad \ufffd nul \ufffd", "last"]
    assert texts(attempt) == expected[-10_000:]
    assert [line.number for line in log_tail(attempt.job_id, 3)] == [30_001, 30_002, 30_003]
    rows = LogChunk.objects.filter(attempt=attempt)
    assert sum(row.count for row in rows) == len(expected)
    assert rows.count() < len(expected) // 1000, "many lines a row"
    assert all(len(row.text.encode()) <= CHUNK_BYTES for row in rows)


def test_a_poll_stores_a_bounded_amount_in_a_few_rows(attempt: Attempt, tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"\n" * (5 * READ_BYTES))
    tail = LogTail(path, limit=1 << 30, line_limit=10 ** 9)
    assert tail.read()
    rows = len(tail.pending)
    assert rows <= READ_BYTES // CHUNK_BYTES + 1
    assert tail.ship(attempt.pk) == READ_BYTES, "one poll: what one read took, one write"
    assert LogChunk.objects.filter(attempt=attempt).count() == rows
    assert not tail.pending


def test_the_byte_limit_counts_each_rows_overhead_and_marks_the_end(attempt: Attempt,
                                                                   tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"xyz\n" * 5000)
    limit = 10_000
    follow(LogTail(path, limit=limit), attempt)
    rows = list(LogChunk.objects.filter(attempt=attempt).order_by("first"))
    kept = texts(attempt)
    assert kept[-1] == LOG_LIMIT_NOTICE.format(limit=limit)
    stored = sum(len(row.text.encode()) + 1 + ROW_BYTES for row in rows[:-1])
    assert stored <= limit < stored + len(b"xyz\n") + ROW_BYTES
    assert [row.capped for row in rows] == [False] * (len(rows) - 1) + [True]
    assert path.stat().st_size == 0, "the file is emptied once the log is capped"


def test_the_line_limit_keeps_that_many_lines_then_says_so(attempt: Attempt,
                                                           tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"\n" * 100_000)
    follow(LogTail(path, line_limit=1000), attempt)
    kept = texts(attempt)
    assert kept == [""] * 1000 + [LINE_LIMIT_NOTICE.format(limit=1000)]
    last = LogChunk.objects.filter(attempt=attempt).order_by("first").last()
    assert last is not None and last.capped


def test_a_ranks_lines_are_numbered_in_its_range_and_named(attempt: Attempt,
                                                           tmp_path: Path) -> None:
    zero, one = tmp_path / "rank-0", tmp_path / "rank-1"
    zero.write_text("a\nb\n")
    one.write_text("c\n")
    follow(LogTail(one, rank=1), attempt)  # rank 1 stores first: the order is by number
    follow(LogTail(zero), attempt)
    assert [(line.number, line.text) for line in log_tail(attempt.job_id, 10)] == [
        (1, "a"), (2, "b"), (100_000_001, "[rank 1] c")]


def test_a_long_line_is_kept_in_pieces(attempt: Attempt, tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"a" * (2 * MAX_LINE_BYTES + 5) + b"\nshort\n")
    follow(LogTail(path), attempt)
    assert [len(text) for text in texts(attempt)] == [MAX_LINE_BYTES, MAX_LINE_BYTES, 5, 5]


def test_a_new_follower_resumes_where_the_stored_lines_end(attempt: Attempt,
                                                           tmp_path: Path) -> None:
    """A process that takes over a log (a restarted Slurm poller) reads the file from its
    start; what its predecessor stored is skipped, wherever its chunks ended."""
    path = tmp_path / "log"
    path.write_text("".join(f"{n}\n" for n in range(1, 5)))
    follow(LogTail(path), attempt)
    path.write_text("".join(f"{n}\n" for n in range(1, 11)))
    again = LogTail(path, line_limit=7)
    again.resume(attempt.pk)
    follow(again, attempt)
    assert texts(attempt) == [str(n) for n in range(1, 8)] + [
        LINE_LIMIT_NOTICE.format(limit=7)]
    third = LogTail(path)
    third.resume(attempt.pk)
    assert not third.read() and third.capped, "a capped log stays capped"


def test_the_tail_spans_attempts_and_chunks(attempt: Attempt) -> None:
    now = timezone.now()
    second = Attempt.objects.create(job=attempt.job, number=2, scheduled_at=now,
                                    starting_at=now)
    LogChunk.objects.create(attempt=attempt, first=1, count=3, time=now, text="1\n2\n3")
    LogChunk.objects.create(attempt=second, first=1, count=2, time=now, text="a\nb")
    LogChunk.objects.create(attempt=second, first=3, count=1, time=now, text="")
    assert [(line.attempt, line.number, line.text) for line in log_tail(attempt.job_id, 4)] == [
        (1, 3, "3"), (2, 1, "a"), (2, 2, "b"), (2, 3, "")]


def test_the_executors_logs_after_a_line_read_across_chunks(attempt: Attempt) -> None:
    """The executor interface's `logs(attempt, after, limit)` (quotaweb/executors/base.py)."""
    now = timezone.now()
    LogChunk.objects.create(attempt=attempt, first=1, count=3, time=now, text="1\n2\n3")
    LogChunk.objects.create(attempt=attempt, first=4, count=2, time=now, text="4\n5")
    LogChunk.objects.create(attempt=attempt, first=100_000_001, count=1, time=now,
                            text="[rank 1] r")
    assert stored_logs(attempt.pk, after=2, limit=2) == ExecutorLogs(["3", "4"], 4)
    assert stored_logs(attempt.pk, after=4) == ExecutorLogs(["5", "[rank 1] r"], 100_000_001)
    assert stored_logs(attempt.pk, after=100_000_001) == ExecutorLogs([], 100_000_001)
    assert stored_logs(attempt.pk).lines == ["1", "2", "3", "4", "5", "[rank 1] r"]


# Retention ----------------------------------------------------------------------------


def _chunks(attempt: Attempt, ages: dict[int, timedelta], now: Any) -> None:
    LogChunk.objects.bulk_create([
        LogChunk(attempt=attempt, first=first, count=1, time=now - age, text=f"line {first}")
        for first, age in ages.items()])


def test_pruning_removes_logs_older_than_the_retention_and_keeps_newer_ones(
    attempt: Attempt, settings: Any,
) -> None:
    settings.QUOTAWEB = {**settings.QUOTAWEB, "LOG_RETENTION_DAYS": 30}
    now = timezone.now()
    old = {first: timedelta(days=31) for first in range(1, PRUNE_BATCH * 2 + 8)}
    young = {10_000: timedelta(days=29), 10_001: timedelta(minutes=1)}
    _chunks(attempt, {**old, **young}, now)
    assert prune_logs(now) == len(old)
    assert sorted(LogChunk.objects.values_list("first", flat=True)) == sorted(young)
    assert prune_logs(now) == 0


def test_the_embedded_servers_pruner_prunes_as_it_starts(attempt: Attempt, settings: Any) -> None:
    settings.QUOTAWEB = {**settings.QUOTAWEB, "LOG_RETENTION_DAYS": 2}
    _chunks(attempt, {1: timedelta(days=3), 2: timedelta(days=1)}, timezone.now())
    pruner = LogPruner()
    pruner.start()
    try:
        deadline = time.monotonic() + 30
        while LogChunk.objects.filter(first=1).exists():
            assert time.monotonic() < deadline, "the pruner did not prune within 30 s"
            time.sleep(0.2)
    finally:
        pruner.stop()
    assert list(LogChunk.objects.values_list("first", flat=True)) == [2]


def test_beat_sends_the_prune_to_the_background_queue(attempt: Attempt, settings: Any) -> None:
    entry = next(entry for entry in app.conf.beat_schedule.values()
                 if entry["task"] == tasks.prune_logs.name)
    assert entry["options"]["queue"] == "forecast"
    assert entry["schedule"] == settings.QUOTAWEB["LOG_PRUNE_SECONDS"]
    _chunks(attempt, {1: timedelta(days=400)}, timezone.now())
    assert tasks.prune_logs() is True  # what the worker runs
    assert not LogChunk.objects.exists()


# Migration ----------------------------------------------------------------------------


def test_the_migration_carries_every_log_line_over() -> None:
    executor = MigrationExecutor(connection)
    target = ("quotaweb", "0010_log_chunks")
    graph = executor.loader.graph
    # The state just before it: its latest parent (the others are that one's ancestors).
    before = [max((parent.key for parent in graph.node_map[target].parents),
                  key=lambda key: len(graph.forwards_plan(key)))]
    latest = executor.loader.graph.leaf_nodes()
    executor.migrate(before)
    try:
        apps = executor.loader.project_state(before).apps
        share = apps.get_model("quotaweb", "QuotaShare").objects.create(name="team")
        job = apps.get_model("quotaweb", "Job").objects.create(
            name="job", quota_share=share, instance_type="ml.test", executor="local")
        now = timezone.now()
        run = apps.get_model("quotaweb", "Attempt").objects.create(
            job=job, number=1, scheduled_at=now, starting_at=now)
        LogLine = apps.get_model("quotaweb", "LogLine")
        later = now + timedelta(seconds=1)
        lines = [(1, now, "one"), (2, now, ""), (3, later, "three"),
                 (100_000_001, later, "[rank 1] four"),
                 (100_000_002, later, "[rank 1] " + LOG_LIMIT_NOTICE.format(limit=1024))]
        LogLine.objects.bulk_create([LogLine(attempt=run, number=number, time=at, text=text)
                                     for number, at, text in lines])
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(latest)
    read = log_tail(job.pk, 10)
    assert [(line.number, line.time, line.text) for line in read] == lines
    chunks = LogChunk.objects.filter(attempt_id=run.pk).order_by("first")
    assert [(chunk.first, chunk.count, chunk.capped) for chunk in chunks] == [
        (1, 2, False), (3, 1, False), (100_000_001, 2, True)]
