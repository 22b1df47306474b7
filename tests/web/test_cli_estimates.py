"""The estimated start in the `quotaweb` command's output and the client (no server: the
lines are built from a Job of docs/api.md)."""

from __future__ import annotations

import io
from datetime import UTC, datetime

from quotaweb.cli import Progress, describe_text, job_line, jobs_table
from quotaweb.client import QueuedJob

NOW = datetime(2026, 12, 2, 4, 0, tzinfo=UTC)
BASIS = "when qs2_job_7 ends (qs2_job_7: its max runtime, 1 h)"


def a_job(**fields: object) -> dict[str, object]:
    job: dict[str, object] = {
        "id": 8, "name": "qs2_job_8", "quota_share": "QS2", "priority": 0,
        "status": "RUNNABLE", "status_reason": None, "position": 1,
        "pending_reason": {"code": "WAITING_FOR_CAPACITY", "message": "Waits."},
        "estimated_start_at": "2026-12-02T04:04:10Z", "estimate_basis": BASIS,
        "instance_type": "g5", "instance_count": 1, "created_at": "2026-12-02T03:59:00Z",
        "preemption_summary": {"preempted_attempt_count": 0, "recent_preempted_attempts": []},
        "attempts": [], "executor": "simulated", "duration_seconds": 60,
        "keep_alive_seconds": 0,
    }
    job.update(fields)
    return job


def test_the_wait_line_says_when_the_job_starts_and_what_it_waits_for() -> None:
    assert job_line(a_job(), NOW) == (
        "job 8 qs2_job_8 (QS2): RUNNABLE, WAITING_FOR_CAPACITY: Waits.; "
        f"starts in about 4 min, {BASIS}")
    unknown = a_job(estimated_start_at=None, estimate_basis="waits for x, whose runtime "
                                                           "is unknown")
    assert job_line(unknown, NOW).endswith("; start unknown, waits for x, whose runtime is "
                                           "unknown")
    assert "start" not in job_line(a_job(estimated_start_at=None, estimate_basis=None), NOW)


def test_the_jobs_table_has_an_estimated_start_column() -> None:
    header, row, running = jobs_table(
        [a_job(), a_job(id=7, status="RUNNING", pending_reason=None, estimated_start_at=None,
                        estimate_basis=None)], NOW).splitlines()
    assert header.split()[6] == "EST_START"
    column = header.index("EST_START")
    assert row[column:].startswith("in about 4 min")
    assert running[column:].startswith("-")


def test_describe_and_the_non_terminal_wait_show_the_estimate() -> None:
    assert "estimated start" in describe_text(a_job())
    stream = io.StringIO()
    progress = Progress(stream)
    progress.show(a_job())
    progress.show(a_job())  # nothing new: no new line
    progress.show(a_job(estimate_basis="by preempting qs2_job_1"))
    assert len(stream.getvalue().splitlines()) == 2


def test_the_client_reads_the_estimate() -> None:
    job = QueuedJob(None, 8, a_job())  # type: ignore[arg-type]
    assert job.estimated_start == (datetime(2026, 12, 2, 4, 4, 10, tzinfo=UTC), BASIS)
    assert QueuedJob(None, 9).estimated_start == (None, None)  # type: ignore[arg-type]
