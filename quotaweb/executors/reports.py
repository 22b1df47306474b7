"""How an executor's report reaches the database: one function for every backend, over
the single compare-and-swap that ends an attempt (quotaweb.scheduling.attempts)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from django.db.models import F

from scheduler.lifecycle import Outcome

from ..models import Attempt
from ..models import LogChunk as StoredChunk
from ..scheduling.attempts import (
    AttemptAlreadyEnded,
    finish_attempt,
    finish_attempts,
    is_plain_end,
    mark_all_running,
    mark_running,
)
from .base import AttemptReport, LogChunk, ReportState


def apply_report(report: AttemptReport) -> bool:
    """Apply one report (the caller holds a transaction with the change lock).  False when
    it changed nothing: the attempt is gone, was not STARTING, or someone else ended it
    first (then only the exit code is kept, where none was recorded)."""
    attempt = Attempt.objects.select_related("job__quota_share", "warm_pool").filter(
        pk=report.attempt_id).first()
    if attempt is None:
        return False
    if report.state is ReportState.RUNNING:
        return mark_running(attempt, report.at)
    if attempt.outcome is None:
        with contextlib.suppress(AttemptAlreadyEnded):
            finish_attempt(attempt, report.outcome or Outcome.FAILED, report.at,
                           failure=report.failure, reason=report.reason,
                           exit_code=report.exit_code)
            return True
    if report.exit_code is not None:
        Attempt.objects.filter(pk=attempt.pk, exit_code__isnull=True).update(
            exit_code=report.exit_code)
    return False


def apply_reports(reports: Iterable[AttemptReport]) -> None:
    """Apply reports as apply_report would, one after the other, in a few statements for
    any number: the attempts are read in one query; consecutive RUNNING reports, and
    consecutive plain ends (scheduling.attempts.is_plain_end), are written together.  An
    end that may leave a warm pool, an attempt already ended or one met twice goes through
    apply_report alone, after what came before it was written."""
    reports = list(reports)
    attempts = Attempt.objects.select_related("job__quota_share", "warm_pool").in_bulk(
        [report.attempt_id for report in reports])
    running: list[tuple[Attempt, object]] = []
    ends: list[tuple[Attempt, AttemptReport]] = []
    jobs: set[int] = set()  # the jobs of the reports not yet written
    written: set[int] = set()  # jobs written since their rows were read: apply_report

    def flush() -> None:
        mark_all_running([(attempt, at) for attempt, at in running])  # type: ignore[misc]
        failed = finish_attempts([
            (attempt, report.outcome or Outcome.FAILED, report.at, report.failure,
             report.reason, report.exit_code) for attempt, report in ends])
        for attempt, report in ends:  # ended by someone else first: keep the exit code
            if attempt.pk in failed and report.exit_code is not None:
                Attempt.objects.filter(pk=attempt.pk, exit_code__isnull=True).update(
                    exit_code=report.exit_code)
        running.clear()
        ends.clear()
        written.update(jobs)
        jobs.clear()

    for report in reports:
        attempt = attempts.get(report.attempt_id)
        if attempt is None:
            continue
        job = attempt.job_id
        batched = job not in written and (
            report.state is ReportState.RUNNING
            or (attempt.outcome is None and is_plain_end(attempt)))
        kind_changes = (running and report.state is not ReportState.RUNNING) or (
            ends and report.state is ReportState.RUNNING)
        if not batched or job in jobs or kind_changes:
            flush()
            batched = batched and job not in written
        if not batched:
            apply_report(report)
            written.add(job)
            continue
        jobs.add(job)
        if report.state is ReportState.RUNNING:
            running.append((attempt, report.at))
        else:
            ends.append((attempt, report))
    flush()


def stored_logs(attempt_id: int, after: int = 0, limit: int = 1000) -> LogChunk:
    """The log lines an executor shipped to the database (LogChunk rows of many lines
    each, quotaweb/executors/logs.py), after line `after`, at most `limit` of them."""
    lines: list[str] = []
    last = after
    rows = (StoredChunk.objects.filter(attempt_id=attempt_id)
            .alias(end=F("first") + F("count")).filter(end__gt=after + 1)
            .order_by("first").values_list("first", "count", "text"))
    for first, count, text in rows.iterator(chunk_size=8):
        for number, line in enumerate(text.split("\n") if count else [], start=first):
            if number > after and len(lines) < limit:
                lines.append(line)
                last = number
        if len(lines) >= limit:
            break
    return LogChunk(lines, last)
