"""Estimated start, in the shell: read the live snapshot and each job's runtime estimate,
run the engine's forecast (scheduler.forecast), and store each queued job's estimate.

This runs in the background every few seconds (a Celery beat task of its own in the
distributed mode, a thread beside the cycle's in-process), never inside the 1 s cycle and
never under its lock: it only reads, then writes two columns of jobs that are still
queued, so a cycle that placed a job meanwhile wins (its dispatch clears them).

An estimate is rewritten only when it changed: it is new, its basis changed, it became
known or unknown, or its moment moved by more than MOVE_THRESHOLD_SECONDS from the one
stored (so a slow drift is written once it adds up past the threshold).  The refresh
returns the ids of the jobs whose stored estimate changed, written or cleared; the caller
pushes those to the websockets (realtime.broadcast.push_estimates), after the writes.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from django.db.models import QuerySet
from django.utils import timezone

from scheduler import Snapshot
from scheduler.forecast import Estimate, JobOutlook, Runtime, forecast, recent_runtime

from ..models import Attempt, Job
from ..models.choices import Outcome
from ..models.jobs import QUEUED_STATUSES, Executor
from . import bulk
from .clock import from_engine
from .snapshot import load_snapshot

log = logging.getLogger(__name__)

# The recent successful runs read for the runtime estimates, newest first, at most.
RECENT_RUNS_READ = 5000
WRITE_BATCH = 500
# An estimate that moved by this much or less is left as stored, neither rewritten nor
# pushed: the pages say it in whole minutes ("starts in about 4 min"), and a forecast
# that wobbles by a few seconds every refresh would otherwise be sent to every socket.
MOVE_THRESHOLD_SECONDS = 30


@dataclass(frozen=True)
class Refresh:
    """One refresh: how many queued jobs got an estimate (or None), its cost, and the ids
    of the jobs whose stored estimate it changed (written or cleared), in id order."""

    estimated: int
    forecast_ms: float
    total_ms: float
    changed: tuple[int, ...] = ()


def outlooks(snapshot: Snapshot) -> dict[str, JobOutlook]:
    """Each live job's runtime estimate with its basis, keep-alive and name."""
    ids = [int(job.id) for job in snapshot.jobs]
    rows = Job.objects.filter(pk__in=ids).values_list(
        "id", "name", "quota_share_id", "executor", "duration_seconds", "max_runtime_seconds",
        "keep_alive_seconds")
    described = list(rows)
    commands = {(share, name) for _, name, share, executor, *_ in described
                if executor != Executor.SIMULATED}
    runs = recent_runs(commands)
    found: dict[str, JobOutlook] = {}
    for job_id, name, share, executor, duration, max_runtime, keep_alive in described:
        if executor == Executor.SIMULATED and duration is not None:
            runtime = Runtime(float(duration), f"its simulated duration, {duration} s")
        else:
            runtime = recent_runtime(runs.get((share, name), []), max_runtime, name)
        found[str(job_id)] = JobOutlook(runtime, int(keep_alive), name)
    return found


def recent_runs(keys: set[tuple[int, str]]) -> dict[tuple[int, str], list[float]]:
    """The running times of the latest successful attempts of jobs with these (share,
    name), newest first: one query."""
    if not keys:
        return {}
    rows = Attempt.objects.filter(
        outcome=Outcome.SUCCEEDED, started_at__isnull=False, stopped_at__isnull=False,
        job__quota_share_id__in={share for share, _ in keys},
        job__name__in={name for _, name in keys},
    ).order_by("-stopped_at").values_list(
        "job__quota_share_id", "job__name", "started_at", "stopped_at")[:RECENT_RUNS_READ]
    runs: dict[tuple[int, str], list[float]] = defaultdict(list)
    for share, name, started, stopped in rows:
        if (share, name) in keys:
            runs[(share, name)].append((stopped - started).total_seconds())
    return runs


def refresh_estimates(now: datetime | None = None) -> Refresh:
    """Forecast from the database's current state and store every queued job's estimate
    that changed."""
    started = time.perf_counter()
    snapshot = load_snapshot(now or timezone.now()).snapshot
    found = outlooks(snapshot)
    planned = time.perf_counter()
    estimates = forecast(snapshot, found)
    forecast_ms = (time.perf_counter() - planned) * 1000
    changed = store(estimates)
    return Refresh(len(estimates), forecast_ms, (time.perf_counter() - started) * 1000,
                   tuple(changed))


def store(estimates: dict[str, Estimate]) -> list[int]:
    """Write the estimates of jobs still queued that changed (see `changed`), in batches;
    clear any an earlier refresh left on a job that has left the queue since (its dispatch
    clears them too, but a refresh that read the queue before that dispatch may write
    after it).  Returns the ids of the jobs written or cleared, in id order: two queries
    per batch at most, and two for the clearing."""
    items = sorted(estimates.items(), key=lambda item: int(item[0]))
    written: list[int] = []
    for first in range(0, len(items), WRITE_BATCH):
        batch = items[first:first + WRITE_BATCH]
        stored = {pk: (at, basis) for pk, at, basis in Job.objects.filter(
            pk__in=[int(job) for job, _ in batch], status__in=QUEUED_STATUSES,
        ).values_list("id", "estimated_start_at", "estimate_basis")}
        batch = [(job, e) for job, e in batch
                 if int(job) in stored and changed(*stored[int(job)], _moment(e), e.basis)]
        if not batch:
            continue
        # One UPDATE joined by id from a VALUES list (scheduling/bulk.py), on jobs still
        # queued.  The ORM's update, a CASE WHEN per job for each column, cost about a
        # quarter of a second of Python per 1,000 jobs to compile, every few seconds over
        # a long queue, taking CPU from the submissions that made it long.
        written += bulk.update_rows(
            Job, [(int(job), [_moment(e), e.basis]) for job, e in batch],
            ["estimated_start_at", "estimate_basis"], where={"status__in": QUEUED_STATUSES})
    cleared = clear_left_queue()
    return sorted({*written, *cleared})


def changed(old_at: datetime | None, old_basis: str, at: datetime | None, basis: str) -> bool:
    """Whether a stored estimate (`old_at`, `old_basis`; "" before the first) differs from
    a new one enough to be written and pushed: a new basis, a moment that became known or
    unknown, or one moved by more than MOVE_THRESHOLD_SECONDS."""
    if old_basis != basis or (old_at is None) != (at is None):
        return True
    if old_at is None or at is None:
        return False
    return abs((at - old_at).total_seconds()) > MOVE_THRESHOLD_SECONDS


def left_queue() -> QuerySet[Job]:
    """The jobs no longer queued that still carry an estimate: read through the partial
    index job_with_estimate (the jobs with one), whatever the number of jobs ever run."""
    return Job.objects.exclude(status__in=QUEUED_STATUSES).exclude(estimate_basis="")


def clear_left_queue() -> list[int]:
    """Clear the estimates of jobs that are no longer queued; returns their ids."""
    left = left_queue()
    ids = list(left.values_list("id", flat=True))
    if ids:
        left.filter(pk__in=ids).update(estimated_start_at=None, estimate_basis="")
    return ids


def _moment(estimate: Estimate) -> datetime | None:
    return None if estimate.start_at is None else from_engine(estimate.start_at)
