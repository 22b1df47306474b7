"""The one interface every way a job runs implements: simulated, the local sandbox, a
cluster engine (Slurm), later Kubernetes (docs/executors.md, Backends).

The cycle decides; an executor only carries its decisions out and reports what happened.
Who owns what:

- **The database is the truth.**  The cycle dispatches an attempt (SCHEDULED) on the
  instances the engine chose (`Attempt.instances`, of the job's capacity unit);
  `quotaweb.scheduling.transitions.advance` moves it to STARTING when the victims' grace
  ends and sets `running_at` (cold or warm start delay).
- **Launch.**  Every cycle lists the attempts of a launched kind that are STARTING, due
  (`running_at <= now`) and not yet claimed (`Attempt.pid` is null) in its report's
  `to_launch`; the launcher (in-process, or the Celery `start_attempt` task on the host's
  queue) calls `backends.start(attempt_id)`, that is `executor_for(job.executor).start`,
  for each.  `start` claims the attempt with a compare-and-swap on its own columns (it
  sets `pid`, `host`, `log_path`), so that an attempt listed twice, or by two launchers,
  starts once.
- **Stop.**  A preemption or a terminate ends the attempt in the database first (outcome,
  `stop_requested_at`, `kill_at`), in the transaction that moves the job.  After that
  commits, `stop(attempt_id, grace_seconds)` is called once as a nudge.  It can be lost
  (a process dies between the commit and the call), so a backend must also find, in its
  own polling, the attempts whose outcome is set while their work still runs, and stop
  them by `kill_at`.
- **Reports.**  Every cycle calls `poll(now)` on every registered executor, in the
  cycle's transaction and under the change lock, before the snapshot is read, and applies
  what it yields with `apply_report` (quotaweb.executors.reports), each report before the
  next is asked for (so a later one may build on an earlier): RUNNING marks the attempt
  started; ENDED ends it through the single compare-and-swap,
  `quotaweb.scheduling.attempts.finish_attempt`, and is ignored when someone else ended it
  first (an executor that finds the outcome set only records the exit code).  A backend
  may instead offer `poll_steps(now)`, its reports in lists, each written whole
  (`apply_reports`, a few statements for any number) before the next list is asked for;
  the simulated executor does.  A backend
  whose processes are watched elsewhere (the local supervisor, in the process that
  started them) may report those ends itself through the same finish_attempt, and return
  only what the central cycle can see (lost heartbeats, claims never taken).
- **Availability.**  `availability()` says whether this process can run the backend's
  commands at all and, when not, why, in a sentence the capacity page shows and a refused
  submission quotes.

Every method takes ids and primitives, never model instances (tasks pass ids), and a
backend keeps its own identifiers (a pid, a Slurm job id) in columns of its own.
Register a backend in quotaweb.executors.backends.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Protocol, runtime_checkable

from scheduler.lifecycle import Failure, Outcome

# The reason an attempt that ran out of memory ends with (SageMaker's word for it).
OUT_OF_MEMORY = "OutOfMemory"


@dataclass(frozen=True)
class Availability:
    """Whether commands can run here; `why` is empty when they can, else a sentence with
    what is missing and how to fix it."""

    can_run: bool
    why: str = ""

    @classmethod
    def ok(cls) -> Availability:
        return cls(True, "")

    @classmethod
    def not_here(cls, why: str) -> Availability:
        return cls(False, why)


class ReportState(StrEnum):
    RUNNING = "RUNNING"  # the work runs from `at` on
    ENDED = "ENDED"  # the work ended at `at`, as `outcome` (with `failure` and `reason`)


@dataclass(frozen=True)
class AttemptReport:
    """One change an executor saw in an attempt's work.

    An ENDED report's `outcome` is SUCCEEDED or FAILED; a FAILED one names its `failure`
    (ALGORITHM_ERROR for the job's own fault, PLATFORM_ERROR for the executor's or the
    host's, which the rules retry: docs/semantics.md 4) and a `reason` the job page shows,
    e.g. "Exit code 3", "MAX_RUNTIME_EXCEEDED" or OUT_OF_MEMORY.
    """

    attempt_id: int
    state: ReportState
    at: datetime
    outcome: Outcome | None = None
    failure: Failure | None = None
    reason: str | None = None
    exit_code: int | None = None

    @classmethod
    def running(cls, attempt_id: int, at: datetime) -> AttemptReport:
        return cls(attempt_id, ReportState.RUNNING, at)

    @classmethod
    def ended(cls, attempt_id: int, at: datetime, outcome: Outcome, *,
              failure: Failure | None = None, reason: str | None = None,
              exit_code: int | None = None) -> AttemptReport:
        return cls(attempt_id, ReportState.ENDED, at, outcome, failure, reason, exit_code)

    @classmethod
    def platform_error(cls, attempt_id: int, at: datetime, reason: str) -> AttemptReport:
        return cls.ended(attempt_id, at, Outcome.FAILED, failure=Failure.PLATFORM_ERROR,
                         reason=reason)


@dataclass(frozen=True)
class LogChunk:
    """Log lines of an attempt after line `after` (0: from the start), oldest first."""

    lines: list[str]
    last: int  # the number of the last line returned (== after when there is none)


@runtime_checkable
class Executor(Protocol):
    """A way jobs run.  One object per kind per process; methods must be thread-safe."""

    kind: str
    """The `Job.executor` value whose jobs it runs ("simulated", "local", "slurm")."""

    launched: bool
    """Whether its attempts are handed to `start` by the launcher (False: `poll` alone
    moves them, as the simulated executor does)."""

    def availability(self) -> Availability:
        """Whether this process can run this backend's commands, and why not."""
        ...

    def start(self, attempt_id: int) -> bool:
        """Start a STARTING, due attempt on its instances (`Attempt.instances` of the
        job's capacity unit; `quotaweb.executors.registry.placement` says which hosts and
        devices hold them).  Claims it first; False when it is not ours to start (claimed
        elsewhere, ended meanwhile, not due).  A start that fails for the platform ends
        the attempt as a PLATFORM_ERROR rather than raising."""
        ...

    def stop(self, attempt_id: int, grace_seconds: float) -> None:
        """The attempt was stopped in the database: ask its work to end (SIGTERM or the
        engine's equivalent now, kill after `grace_seconds`).  Idempotent; returns at
        once; never ends the attempt (its outcome is already set)."""
        ...

    def poll(self, now: datetime) -> Iterable[AttemptReport]:
        """What changed in the attempts of this kind by `now` (called by every cycle in
        its transaction; keep it to a few queries and no slow calls per attempt)."""
        ...

    def logs(self, attempt_id: int, after: int = 0, limit: int = 1000) -> LogChunk:
        """The attempt's log lines after line `after`, at most `limit` of them."""
        ...


__all__ = ["OUT_OF_MEMORY", "AttemptReport", "Availability", "Executor", "LogChunk",
           "ReportState"]
