"""The minimum runtime before preemption (docs/semantics.md 5.8).

A RUNNING attempt younger than its minimum runtime is never taken by in-share preemption,
and by a reclaim only after every other candidate: an owner still gets its capacity back,
only the young attempts go last.
"""

from __future__ import annotations

from .model import Job, JobStatus, QuotaShare


def min_runtime_of(job: Job, share: QuotaShare) -> int:
    """The job's minimum runtime: its own, up to its share's; its share's when it sets none."""
    if job.min_runtime_seconds is None:
        return share.min_runtime_seconds
    return min(job.min_runtime_seconds, share.min_runtime_seconds)


def shielded_by_min_runtime(job: Job, share: QuotaShare, now: float) -> bool:
    """Whether the job's attempt is RUNNING and younger than its minimum runtime at `now`
    (from the second it has run that long it is a victim like any other)."""
    if job.status is not JobStatus.RUNNING or job.started_at is None:
        return False
    return now - job.started_at < min_runtime_of(job, share)


def min_runtime_ends_at(job: Job, share: QuotaShare) -> float | None:
    """When the job's attempt stops being shielded; None if it is not RUNNING."""
    if job.status is not JobStatus.RUNNING or job.started_at is None:
        return None
    return job.started_at + min_runtime_of(job, share)
