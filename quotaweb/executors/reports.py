"""How an executor's report reaches the database: one function for every backend, over
the single compare-and-swap that ends an attempt (quotaweb.scheduling.attempts)."""

from __future__ import annotations

import contextlib

from django.db.models import F

from scheduler.lifecycle import Outcome

from ..models import Attempt
from ..models import LogChunk as StoredChunk
from ..scheduling.attempts import AttemptAlreadyEnded, finish_attempt, mark_running
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
