"""The pure lifecycle of attempts and warm pools (docs/semantics.md 4 and 6).

These rules do not decide placements (that is the cycle's job); they say what happens as
time passes and attempts end, so that the simulator and the live executors agree:
start delays, the simulated executor's work, checkpoints, retries, the preemption-retry
limit, and when a finished job leaves a warm pool.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from .decisions import PoolTermination
from .model import CapacityUnit


class Failure(StrEnum):
    """An algorithm error is the job's own (non-zero exit, max runtime); a platform error
    is ours (lost instance, executor crash)."""

    ALGORITHM_ERROR = "ALGORITHM_ERROR"
    PLATFORM_ERROR = "PLATFORM_ERROR"


class Outcome(StrEnum):
    """How one attempt ended."""

    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    PREEMPTED = "PREEMPTED"
    TERMINATED = "TERMINATED"


class PoolStatus(StrEnum):
    """A job's segment of a warm pool (docs/semantics.md 6)."""

    IN_USE = "InUse"
    AVAILABLE = "Available"
    REUSED = "Reused"
    TERMINATED = "Terminated"


MAX_RUNTIME_EXCEEDED = "MAX_RUNTIME_EXCEEDED"
PREEMPTION_RETRIES_EXHAUSTED = "PREEMPTION_RETRIES_EXHAUSTED"


def start_delay(unit: CapacityUnit, warm_start: bool) -> int:
    """Provisioning time: warm_start_seconds on a warm pool, else cold_start_seconds."""
    return unit.warm_start_seconds if warm_start else unit.cold_start_seconds


@dataclass(frozen=True, slots=True)
class WorkEnd:
    """When and how a RUNNING attempt of the simulated executor ends."""

    at: float
    outcome: Outcome
    failure: Failure | None = None
    reason: str | None = None


def simulated_work_end(
    started_at: float,
    remaining_seconds: float,
    max_runtime_seconds: float,
    fail_at_seconds: float | None = None,
    failure: Failure = Failure.ALGORITHM_ERROR,
) -> WorkEnd:
    """The first of: the scripted failure (a tie with the end of the work counts as the
    failure), running past max_runtime_seconds (an algorithm error), the end of the work."""
    if fail_at_seconds is not None and fail_at_seconds <= min(
        remaining_seconds, max_runtime_seconds
    ):
        return WorkEnd(started_at + fail_at_seconds, Outcome.FAILED, failure, failure.value)
    if remaining_seconds > max_runtime_seconds:
        return WorkEnd(
            started_at + max_runtime_seconds,
            Outcome.FAILED,
            Failure.ALGORITHM_ERROR,
            MAX_RUNTIME_EXCEEDED,
        )
    return WorkEnd(started_at + remaining_seconds, Outcome.SUCCEEDED)


def checkpointed_seconds(running_seconds: float, checkpoint_seconds: float | None) -> float:
    """Work an attempt saved: its last completed checkpoint (every checkpoint_seconds of
    RUNNING time), or nothing without checkpoints."""
    if not checkpoint_seconds or running_seconds <= 0:
        return 0
    return (running_seconds // checkpoint_seconds) * checkpoint_seconds


def retries_left(failed_attempts: int, retry_attempts: int) -> bool:
    """Whether a failed job is retried: retry_attempts counts all attempts, the first
    included, and only failed ones use it up (preemptions never do)."""
    return failed_attempts < retry_attempts


def preemption_fails_job(preempted_count: int, preemption_retries: int | None) -> bool:
    """Whether the preempted_count-th preemption fails the job: with r retries allowed, the
    (r+1)-th does; None allows any number."""
    return preemption_retries is not None and preempted_count > preemption_retries


def preemptions_left(preempted_count: int, preemption_retries: int | None) -> int | None:
    """How many more preemptions the job survives (the engine's Job.preemptions_left)."""
    if preemption_retries is None:
        return None
    return max(0, preemption_retries - preempted_count)


def leaves_warm_pool(
    outcome: Outcome, failure: Failure | None, retrying: bool, was_running: bool
) -> bool:
    """Whether an ended attempt leaves its instances warm (docs/semantics.md 6, Creation): success,
    a user's terminate while RUNNING, or a final algorithm error; never a platform
    failure, a preemption or an attempt that is retried."""
    if retrying:
        return False
    if outcome is Outcome.SUCCEEDED:
        return True
    if outcome is Outcome.TERMINATED:
        return was_running
    return outcome is Outcome.FAILED and failure is Failure.ALGORITHM_ERROR


@dataclass(frozen=True, slots=True)
class PoolSettlement:
    """What becomes of a job's instances when it ends: an Available pool until
    `expires_at`, a Terminated segment with `reason`, or nothing (`status` None)."""

    status: PoolStatus | None
    expires_at: float | None = None
    reason: PoolTermination | None = None


def settle_warm_pool(
    *,
    keep_alive_seconds: float,
    leaves_pool: bool,
    reused_pool: bool,
    ended_at: float,
    chain_started_at: float,
    max_lifetime_seconds: float,
    available_on_unit: int,
    instance_count: int,
    warm_pool_limit: int,
) -> PoolSettlement:
    """Apply docs/semantics.md 6's creation rules and the ends of a segment to a job that ended."""
    if not leaves_pool:
        if reused_pool:
            return PoolSettlement(PoolStatus.TERMINATED, None, PoolTermination.EXPIRED)
        return PoolSettlement(None)
    if keep_alive_seconds <= 0 and not reused_pool:
        return PoolSettlement(None)
    if _lifetime_over(ended_at, keep_alive_seconds, chain_started_at, max_lifetime_seconds):
        return PoolSettlement(PoolStatus.TERMINATED, None, PoolTermination.MAX_LIFETIME)
    if keep_alive_seconds <= 0:
        return PoolSettlement(PoolStatus.TERMINATED, None, PoolTermination.EXPIRED)
    if available_on_unit + instance_count > warm_pool_limit:
        return PoolSettlement(PoolStatus.TERMINATED, None, PoolTermination.LIMIT_EXCEEDED)
    return PoolSettlement(PoolStatus.AVAILABLE, ended_at + keep_alive_seconds)


def _lifetime_over(
    ended_at: float, keep_alive_seconds: float, chain_started_at: float, lifetime: float
) -> bool:
    """Whether a segment ends MAX_LIFETIME as its job ends: the chain's lifetime ended by
    then, and strictly before its keep-alive would, as in housekeeping.  With keep-alive 0
    (a reused pool that ends with its job) that is a lifetime that passed while the job
    ran; a tie with the job's end is EXPIRED, as it would be for an Available pool."""
    lifetime_end = chain_started_at + lifetime
    return lifetime_end <= ended_at and lifetime_end < ended_at + max(keep_alive_seconds, 0)


def pool_end(
    expires_at: float, chain_started_at: float, max_lifetime_seconds: float
) -> tuple[float, PoolTermination]:
    """When an Available pool ends by itself: at its keep-alive expiry, or at the end of
    its chain's lifetime when that comes strictly earlier."""
    lifetime_end = chain_started_at + max_lifetime_seconds
    if lifetime_end < expires_at:
        return lifetime_end, PoolTermination.MAX_LIFETIME
    return expires_at, PoolTermination.EXPIRED


def keep_alive_expiry(available_since: float, keep_alive_seconds: float) -> float:
    """A changed keep-alive counts from when the pool became Available."""
    return available_since + keep_alive_seconds


def billable_seconds(available_since: float, until: float) -> float:
    """Retained billable time: how long the pool stood Available for this job."""
    return max(0.0, until - available_since)
