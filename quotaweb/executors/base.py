"""The executors behind one interface: how an attempt that the cycle placed starts running.

Both executors follow the same lifecycle (scheduler.lifecycle, docs/semantics.md 4): the cycle
dispatches an attempt (SCHEDULED), `quotaweb.scheduling.transitions.advance` moves it to
STARTING when the victims' grace ends and decides when provisioning is over (`running_at`,
from cold_start_seconds or warm_start_seconds).  What happens next depends on the job's
`executor`:

- **simulated** (`duration_seconds`): nothing runs.  `transitions.advance` marks the
  attempt RUNNING at `running_at` and ends it at `started_at + duration_seconds` (or at
  max_runtime_seconds) by the engine's pure `simulated_work_end`, so the simulator and the
  live system agree.  There is no process, no log and no supervisor: its `start_attempt`
  is never called, because `advance` lists only local attempts to launch.
- **local** (`command`): `advance` returns the attempt's id in the cycle report's
  `to_launch`; the caller (the in-process runtime loop, or the Celery executor task) calls
  `quotaweb.executors.local.start_attempt(attempt_id)` on the host that should run it.
  That spawns the command, marks the attempt RUNNING and hands the process to this
  process's Supervisor (quotaweb.executors.supervisor), which heartbeats it, ships its
  log lines, stops it on preemption, terminate or max runtime, and reports its end through
  `quotaweb.scheduling.attempts.finish_attempt`.

An attempt ends through exactly one compare-and-swap on `Attempt.outcome` (finish_attempt,
or apply's preemption, or the terminate service), whoever comes first; an executor that
finds the outcome already set only stops the process and records its exit code.
"""

from __future__ import annotations

from typing import Protocol

from ..models.jobs import Executor


class AttemptExecutor(Protocol):
    """What the launcher calls for each id in a cycle report's `to_launch`."""

    def __call__(self, attempt_id: int) -> bool:
        """Start the attempt here; False when it was not started (already claimed by
        another host, no longer STARTING, or not yet due)."""
        ...


def launches_processes(executor: str) -> bool:
    """Whether jobs of this executor need `start_attempt` (only local ones do; simulated
    attempts are advanced by quotaweb.scheduling.transitions alone)."""
    return executor == Executor.LOCAL


__all__ = ["AttemptExecutor", "launches_processes"]
