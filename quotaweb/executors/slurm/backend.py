"""Attempts as Slurm batch jobs: the Executor interface's start, stop, poll and logs
(docs/executors.md, Slurm).

- **Start** (quotaweb.executors.slurm.submission).  A due attempt of a unit Slurm runs
  is claimed with the local executor's compare-and-swap (`Attempt.pid` from null to 0),
  then submitted with `sbatch`, pinned to the node and GPUs of its instances, with their
  memory and CPUs, `--time` from max_runtime_seconds, as the job user, `--export=NONE`.
  The attempt records the Slurm job id in `pid` and `slurm:<node>` in `host` (never a
  local supervisor's host name, so no supervisor takes it for its own).
- **Poll.**  One `squeue` call for every open Slurm attempt: RUNNING in Slurm marks the
  attempt RUNNING; a job that ended ends the attempt (quotaweb.executors.slurm.states);
  one Slurm no longer knows is a platform error.  While Slurm has the job, the poll renews
  the attempt's heartbeat (slurmctld watches the node; Quotaweb watches slurmctld).  The
  job's output file (`--output`, in a directory only the job user and the server can read)
  is shipped to LogChunk rows like a local log.
- **Stop.**  A preemption or terminate sets the attempt's outcome and kill_at in the
  database first; then `scancel --signal=TERM --full` (the batch script and everything
  it started), and at kill_at `scancel --signal=KILL --full` and `scancel`.  The poll finds
  stopped attempts whose job still runs and does the same, so a lost nudge only delays.

Quotaweb stays the one that decides admission, quota, borrowing and preemption: Slurm
only runs what Quotaweb placed, where Quotaweb placed it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db.models import Q

from scheduler.lifecycle import Outcome

from ...models import Attempt
from ...models.jobs import Executor as ExecutorKind
from ...models.jobs import JobStatus
from ...scheduling.open_attempts import open_attempts
from ..base import AttemptReport, Availability, LogChunk
from ..logs import LogTail
from ..reports import stored_logs
from . import commands, states
from .commands import SlurmUnavailable
from .config import enabled, slurm_map
from .submission import CLAIMED, HOST_PREFIX, start

log = logging.getLogger(__name__)

# How long after its end a stopped attempt's job is still asked for its exit code.
EXIT_CODE_WINDOW = timedelta(hours=1)


def runs(capacity_unit: str) -> bool:
    """Whether Slurm runs this capacity unit's command jobs."""
    return enabled() and slurm_map().runs(capacity_unit)


def availability() -> str:
    """Empty when this process can run attempts on Slurm, else why not, in a sentence."""
    if not enabled():
        return "The Slurm backend is off (QUOTAWEB_SLURM_UNITS is empty)."
    try:
        slurm_map()
        commands.ping()
    except SlurmUnavailable as error:
        return f"Slurm cannot be reached: {error}."
    except Exception as error:  # ImproperlyConfigured: said as it is
        return str(error)
    user = str(settings.QUOTAWEB["JOB_USER"])
    try:
        pwd.getpwnam(user)
    except KeyError:
        return f"The job user {user} does not exist here (QUOTAWEB_JOB_USER)."
    if os.geteuid() != 0:
        return "sbatch --uid needs root: run the Slurm executor as root."
    return ""


# -- stop --------------------------------------------------------------------------------

_terminated: set[int] = set()  # Slurm job ids sent SIGTERM by this process


def stop(attempt_id: int) -> None:
    """Ask a stopped attempt's job to end: SIGTERM now (a pending job is cancelled); the
    poll kills it at its kill_at.  Idempotent; never ends the attempt."""
    job_id = Attempt.objects.filter(pk=attempt_id, host__startswith=HOST_PREFIX,
                                    pid__gt=CLAIMED).values_list("pid", flat=True).first()
    if job_id is not None:
        _terminate(int(job_id))


def _terminate(job_id: int, state: commands.JobState | None = None) -> None:
    """SIGTERM to a running job; a job Slurm has not started is cancelled outright (it
    never ran, and scancel would only retry a signal to it for seconds)."""
    if job_id in _terminated:
        return
    try:
        if state is None:
            state = commands.states([job_id]).get(job_id)
        if state is None or not states.is_open(state.state):
            return
        if state.state in states.WAITING:
            commands.cancel(job_id)
        else:
            commands.signal_job(job_id, "TERM")
    except SlurmUnavailable as error:
        log.warning("Slurm job %s: not stopped yet: %s", job_id, error)
        return
    _terminated.add(job_id)


def _kill(job_id: int) -> None:
    with contextlib.suppress(SlurmUnavailable):
        commands.signal_job(job_id, "KILL")
    try:
        commands.cancel(job_id)
    except SlurmUnavailable as error:
        log.warning("Slurm job %s: not cancelled: %s", job_id, error)


# -- poll --------------------------------------------------------------------------------

_tails: dict[int, LogTail] = {}


def poll(now: datetime) -> list[AttemptReport]:
    """What changed in the Slurm attempts; stops the jobs of stopped attempts on time and
    ships their logs.  One squeue call for all of them, an scontrol call per job that
    ended.  While slurmctld does not answer nothing is decided, until an attempt's lease
    (HEARTBEAT_LEASE_SECONDS since Slurm last said its job lives) runs out."""
    reports = _unclaimed(now)
    rows = list(Attempt.objects.filter(host__startswith=HOST_PREFIX, pid__gt=CLAIMED).filter(
        _open_or_stopped(now)).values(
        "pk", "pid", "outcome", "kill_at", "log_path", "job__status", "heartbeat_at"))
    if not rows:
        return reports
    try:
        found = commands.states(int(row["pid"]) for row in rows)
    except SlurmUnavailable as error:
        log.warning("Slurm poll: %s", error)
        return reports + _lost(rows, now, str(error))
    alive: list[int] = []
    for row in rows:
        job_id, attempt_id = int(row["pid"]), int(row["pk"])
        state = found.get(job_id)
        open_in_slurm = state is not None and states.is_open(state.state)
        _ship_log(attempt_id, row["log_path"], final=not open_in_slurm)
        if row["outcome"] is not None:
            _follow_stop(row, state, now)
            continue
        if state is None:
            reports.append(_report(attempt_id, now, states.unknown(job_id)))
            continue
        started = state.started_at or now
        if open_in_slurm:
            alive.append(attempt_id)
            if state.state in states.RUNNING and row["job__status"] == JobStatus.STARTING:
                reports.append(AttemptReport.running(attempt_id, started))
            continue
        if row["job__status"] == JobStatus.STARTING:
            # It ran and ended between two polls: it was RUNNING first.
            reports.append(AttemptReport.running(attempt_id, started))
        ending = states.ending(state, commands.exit_code(job_id))
        if ending is not None:
            reports.append(_report(attempt_id, state.ended_at or now, ending))
    if alive:
        Attempt.objects.filter(pk__in=alive).update(heartbeat_at=now)
    return reports


def _report(attempt_id: int, at: datetime, ending: states.Ending) -> AttemptReport:
    if ending.outcome != Outcome.SUCCEEDED:
        log.warning("attempt %s: %s", attempt_id, ending.reason)
    return AttemptReport.ended(attempt_id, at, ending.outcome, failure=ending.failure,
                               reason=ending.reason, exit_code=ending.exit_code)


def _lost(rows: list[dict[str, object]], now: datetime, error: str) -> list[AttemptReport]:
    """Slurm did not answer: the open attempts it has not vouched for within the lease are
    platform errors (as a local host that stops heartbeating)."""
    lease = timedelta(seconds=settings.QUOTAWEB["HEARTBEAT_LEASE_SECONDS"])
    return [
        AttemptReport.platform_error(int(str(row["pk"])), now,
                                     f"Lost contact with Slurm within the lease: {error}")
        for row in rows
        if row["outcome"] is None and isinstance(row["heartbeat_at"], datetime)
        and row["heartbeat_at"] < now - lease
    ]


def _unclaimed(now: datetime) -> list[AttemptReport]:
    """A Slurm attempt no launcher submitted within CLAIM_TIMEOUT_SECONDS of being due,
    or whose claimer died before it recorded the Slurm job: a platform error."""
    timeout = timedelta(seconds=settings.QUOTAWEB["CLAIM_TIMEOUT_SECONDS"])
    stuck = open_attempts([JobStatus.STARTING], [ExecutorKind.SLURM],
                          Q(pid__isnull=True) | Q(pid=CLAIMED), running_at__lt=now - timeout,
                          ).values_list("pk", flat=True)
    seconds = int(timeout.total_seconds())
    return [AttemptReport.platform_error(attempt_id, now,
                                         f"No launcher submitted it to Slurm within {seconds} s")
            for attempt_id in stuck]


def _open_or_stopped(now: datetime) -> Q:
    return Q(outcome__isnull=True) | Q(exit_code__isnull=True,
                                       stopped_at__gte=now - EXIT_CODE_WINDOW)


def _follow_stop(row: dict[str, object], state: commands.JobState | None,
                 now: datetime) -> None:
    """A stopped attempt: end its job on time, then keep its exit code."""
    job_id = int(str(row["pid"]))
    if state is not None and states.is_open(state.state):
        kill_at = row["kill_at"]
        if state.state not in states.WAITING and isinstance(kill_at, datetime) and now >= kill_at:
            _kill(job_id)
        else:
            _terminate(job_id, state)
        return
    code = states.shell_exit_code(commands.exit_code(job_id)) if state is not None else None
    # -1: Slurm gave no exit code (a node failure, a purged job); the attempt is settled.
    Attempt.objects.filter(pk=row["pk"], exit_code__isnull=True).update(
        exit_code=-1 if code is None else code)
    _terminated.discard(job_id)


def _ship_log(attempt_id: int, log_path: object, *, final: bool) -> None:
    if not log_path:
        return
    tail = _tails.get(attempt_id)
    if tail is None:
        # A new process re-reads the file from its start; the lines already stored are
        # skipped, so none is stored twice.
        tail = _tails[attempt_id] = LogTail(Path(str(log_path)))
        tail.resume(attempt_id)
    while tail.read(final=final):
        tail.ship(attempt_id)
    tail.ship(attempt_id)
    if final:
        _tails.pop(attempt_id, None)


class SlurmExecutor:
    """Command jobs of the capacity units mapped to Slurm, as sbatch jobs (this module)."""

    kind = ExecutorKind.SLURM.value
    launched = True

    def availability(self) -> Availability:
        problem = availability()
        return Availability.not_here(problem) if problem else Availability.ok()

    def start(self, attempt_id: int) -> bool:
        return start(attempt_id)

    def stop(self, attempt_id: int, grace_seconds: float) -> None:
        """SIGTERM now (the poll kills the job at the attempt's kill_at, which is when
        `grace_seconds` runs out)."""
        stop(attempt_id)

    def poll(self, now: datetime) -> list[AttemptReport]:
        if not enabled():
            return []
        return poll(now)

    def logs(self, attempt_id: int, after: int = 0, limit: int = 1000) -> LogChunk:
        return stored_logs(attempt_id, after, limit)
