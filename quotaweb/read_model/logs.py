"""A job's log as its readers see it (the job page, GET /api/v1/jobs/{id}/logs and so
`quotaweb logs`): lines, each with its attempt, number and time, read from the LogChunk
rows the executor stored (quotaweb/executors/logs.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..models import LogChunk


@dataclass(frozen=True)
class LogLine:
    attempt: int  # the attempt's number
    number: int
    time: datetime  # when it was shipped
    text: str
    stream: str = "stdout"  # the command's stdout and stderr are one stream (2>&1)


def log_tail(job_id: int, lines: int) -> list[LogLine]:
    """The job's last `lines` lines across its attempts, oldest first: attempt by attempt,
    and within an attempt rank 0's lines, then rank 1's..."""
    if lines <= 0:
        return []
    newest = LogChunk.objects.filter(attempt__job_id=job_id).order_by(
        "-attempt__number", "-first").values_list("id", "count")[:lines]
    wanted, total = [], 0
    for chunk_id, count in newest:
        wanted.append(chunk_id)
        total += count
        if total >= lines:
            break
    chunks = LogChunk.objects.filter(pk__in=wanted).order_by(
        "attempt__number", "first").values_list("attempt__number", "first", "time", "text", "count")
    found = [LogLine(attempt, first + index, time, text)
             for attempt, first, time, body, count in chunks
             for index, text in enumerate(body.split("\n") if count else [])]
    return found[-lines:]
