"""Slurm job states as attempt outcomes (docs/executors.md, Slurm; docs/semantics.md 4).

A job Slurm ends for its own reasons ends the attempt with that reason: the time limit is
the job's MAX_RUNTIME_EXCEEDED, memory is OutOfMemory (as SageMaker names it), both the
job's own fault; a node or boot failure is the platform's, which the rules retry; a
cancel that Quotaweb did not ask for ends the attempt saying so.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.lifecycle import Failure, Outcome

from .commands import JobState

OUT_OF_MEMORY = "OutOfMemory"
MAX_RUNTIME_EXCEEDED = "MAX_RUNTIME_EXCEEDED"

# Not ended yet: Slurm still has the job queued, starting, running or cleaning up.
WAITING = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
                     "RESV_DEL_HOLD", "SUSPENDED", "STOPPED", "RESIZING", "SIGNALING",
                     "STAGE_OUT"})
RUNNING = frozenset({"RUNNING", "COMPLETING"})
# Ended by the platform (the node, its boot, Slurm's own preemption): retried.
PLATFORM = frozenset({"NODE_FAIL", "BOOT_FAIL", "PREEMPTED", "REVOKED", "SPECIAL_EXIT"})


@dataclass(frozen=True)
class Ending:
    """How an attempt ends, from its Slurm job's final state."""

    outcome: Outcome
    failure: Failure | None
    reason: str | None
    exit_code: int | None


def is_open(state: str) -> bool:
    return state in WAITING or state in RUNNING


def shell_exit_code(code: tuple[int, int] | None) -> int | None:
    """Slurm's (status, signal) as the shell's single number: 128 + n for signal n."""
    if code is None:
        return None
    status, signal = code
    if signal > 64:
        # Not a signal: Slurm's own mark (0:125 after an out-of-memory kill).
        return status or None
    return 128 + signal if signal and not status else status


def ending(job: JobState, code: tuple[int, int] | None) -> Ending | None:
    """The attempt's end for a job in this state; None while the job has not ended."""
    state = job.state
    if is_open(state):
        return None
    exit_code = shell_exit_code(code)
    on = f" on {job.nodes}" if job.nodes and job.nodes != "(null)" else ""
    if state == "COMPLETED":
        return Ending(Outcome.SUCCEEDED, None, None, 0)
    if state == "OUT_OF_MEMORY":
        return Ending(Outcome.FAILED, Failure.ALGORITHM_ERROR, OUT_OF_MEMORY, exit_code)
    if state in ("TIMEOUT", "DEADLINE"):
        return Ending(Outcome.FAILED, Failure.ALGORITHM_ERROR, MAX_RUNTIME_EXCEEDED, exit_code)
    if state == "FAILED":
        return Ending(Outcome.FAILED, Failure.ALGORITHM_ERROR, f"Exit code {exit_code}",
                      exit_code)
    if state in PLATFORM:
        detail = f" ({job.reason})" if job.reason and job.reason != "None" else ""
        return Ending(Outcome.FAILED, Failure.PLATFORM_ERROR,
                      f"Slurm ended its job {job.job_id} with {state}{on}{detail}", None)
    if state == "CANCELLED":
        return Ending(Outcome.FAILED, Failure.PLATFORM_ERROR,
                      f"Slurm job {job.job_id} was cancelled in Slurm, not by Quotaweb "
                      "(scancel by an operator or an administrator)", exit_code)
    return Ending(Outcome.FAILED, Failure.PLATFORM_ERROR,
                  f"Slurm ended its job {job.job_id} in state {state}{on}", exit_code)


def unknown(job_id: int) -> Ending:
    """The controller no longer knows the job (purged, or its state was lost)."""
    return Ending(Outcome.FAILED, Failure.PLATFORM_ERROR,
                  f"Slurm no longer knows its job {job_id}", None)
