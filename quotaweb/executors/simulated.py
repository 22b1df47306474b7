"""The simulated executor: nothing runs.  A job's `duration_seconds` is played out by the
engine's pure lifecycle (scheduler.lifecycle.simulated_work_end), so the live system and
the simulator agree on when a simulated attempt runs and ends (docs/semantics.md 4)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from scheduler.lifecycle import simulated_work_end

from ..models.jobs import Executor as ExecutorKind
from ..models.jobs import JobStatus
from ..scheduling.clock import to_engine
from ..scheduling.open_attempts import open_attempts
from .base import AttemptReport, Availability, LogChunk


class SimulatedExecutor:
    """Runs no process: RUNNING at the attempt's `running_at`, ENDED at its work's end."""

    kind = ExecutorKind.SIMULATED.value
    launched = False

    def availability(self) -> Availability:
        return Availability.ok()  # it runs no command, so nothing can be missing

    def start(self, attempt_id: int) -> bool:
        return False  # never launched: poll starts its attempts

    def stop(self, attempt_id: int, grace_seconds: float) -> None:
        return None  # nothing runs

    def poll(self, now: datetime) -> Iterator[AttemptReport]:
        """The attempts due to run, then those whose work is over.  The caller applies
        each report before taking the next, so an attempt that starts here and whose work
        is already over (a zero duration) ends in the same poll."""
        for step in self.poll_steps(now):
            yield from step

    def poll_steps(self, now: datetime) -> Iterator[list[AttemptReport]]:
        """poll's reports in two steps, each applied whole (quotaweb.executors.reports.
        apply_reports) before the next is asked for: the attempts due to run, then those
        whose work is over (read after the first step is written)."""
        due = open_attempts([JobStatus.STARTING], [self.kind], running_at__lte=now,
                            ).values_list("id", "running_at")
        yield [AttemptReport.running(attempt_id, running_at or now)
               for attempt_id, running_at in list(due)]
        yield list(self._ended(now))

    def _ended(self, now: datetime) -> Iterator[AttemptReport]:
        # Only the four values the work's end depends on: every running attempt is read
        # each cycle, and making each an Attempt with its Job (some 70 columns, a dozen of
        # them times) was a quarter of the cycle's CPU under a stream of submissions.
        running = open_attempts([JobStatus.RUNNING], [self.kind]).values_list(
            "id", "started_at", "job__duration_seconds", "job__max_runtime_seconds")
        for attempt_id, started_at, duration, max_runtime in list(running):
            started = to_engine(started_at) or now.timestamp()
            end = simulated_work_end(started, duration or 0, max_runtime)
            if end.at > now.timestamp():
                continue
            yield AttemptReport.ended(attempt_id, datetime.fromtimestamp(end.at, now.tzinfo),
                                      end.outcome, failure=end.failure, reason=end.reason)

    def logs(self, attempt_id: int, after: int = 0, limit: int = 1000) -> LogChunk:
        return LogChunk([], after)  # a simulated job prints nothing
