"""What a decision or an attempt's end does, as frozen effects (docs/semantics.md 4, 6).

The engine decides; these pure functions say what each decision or ending changes: the
attempt ended with which outcome, the job requeued or closed (with its counters), the
instances left as an Available pool, reused or terminated (with the billable seconds a
segment retained), and the events it emits, in order.  The simulator applies the effects to
its memory (scheduler.simulate.world), the live system to the database with its
compare-and-swap guards (quotaweb.scheduling.effects); neither decides any of it again.

Times are engine seconds; jobs and pools are engine ids.
"""

from __future__ import annotations

from dataclasses import dataclass

from .decisions import Dispatch, PoolTermination, Preempt, PreemptionKind
from .events import (
    AttemptFailed,
    Dispatched,
    Failed,
    Payload,
    Preempted,
    Succeeded,
    Terminated,
    WarmPoolAvailable,
    WarmPoolReused,
    WarmPoolTerminated,
)
from .lifecycle import (
    PREEMPTION_RETRIES_EXHAUSTED,
    Failure,
    Outcome,
    PoolStatus,
    leaves_warm_pool,
    pool_end,
    preemption_fails_job,
    retries_left,
    settle_warm_pool,
)
from .model import JobStatus

# The state effects apply to ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EndingJob:
    """A job whose open attempt ends, as the ending needs it."""

    job: str
    status: JobStatus
    keep_alive_seconds: int
    instance_count: int
    failed_count: int
    retry_attempts: int
    preempted_count: int
    preemption_retries: int | None
    started_at: float | None  # when the attempt became RUNNING
    reused_pool: str | None = None  # the warm pool the attempt runs on
    reused_chain_started_at: float | None = None


@dataclass(frozen=True, slots=True)
class WarmRoom:
    """What the ending job's capacity unit allows to stay warm."""

    available_on_unit: int
    warm_pool_limit: int
    max_lifetime_seconds: float


@dataclass(frozen=True, slots=True)
class AvailablePool:
    id: str
    owner: str
    available_since: float | None
    expires_at: float
    chain_started_at: float


# Effects -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Emit:
    """An event about `job` (None: about no job), at `at`."""

    job: str | None
    payload: Payload
    at: float


@dataclass(frozen=True, slots=True)
class AttemptEnded:
    """The job's open attempt stopped at `at`; `stop_by` is when its process must be gone
    (preempted or terminated: the executor is asked to stop it)."""

    job: str
    at: float
    outcome: Outcome
    reason: str | None = None
    failure: Failure | None = None
    kind: PreemptionKind | None = None
    preempted_by: str | None = None
    stop_by: float | None = None


@dataclass(frozen=True, slots=True)
class JobRequeued:
    """RUNNABLE again, holding nothing; placeable from `not_before` (None: now).  The new
    counter values say what ended the attempt: a failure (a retry starts from zero) or a
    preemption (checkpointed work is kept)."""

    job: str
    at: float
    not_before: float | None
    failed_count: int | None = None
    preempted_count: int | None = None


@dataclass(frozen=True, slots=True)
class JobClosed:
    """SUCCEEDED or FAILED with `reason`, holding nothing."""

    job: str
    at: float
    status: JobStatus
    reason: str | None
    failed_count: int | None = None
    preempted_count: int | None = None


@dataclass(frozen=True, slots=True)
class JobDispatched:
    """SCHEDULED on the decision's instances with a new attempt."""

    job: str
    at: float
    decision: Dispatch


@dataclass(frozen=True, slots=True)
class PoolAvailable:
    """The job's instances stay warm: `pool` (the one it reused, None for a new pool
    created from its attempt) is Available until `expires_at`, and so is its segment."""

    job: str
    at: float
    pool: str | None
    chain_started_at: float
    expires_at: float


@dataclass(frozen=True, slots=True)
class PoolReused:
    """`by_job` takes the Available `pool`; its previous owner's segment ends Reused with
    `billed_seconds` more retained, and `by_job` gets an In-use segment."""

    pool: str
    previous_owner: str
    by_job: str
    billed_seconds: float


@dataclass(frozen=True, slots=True)
class SegmentEnded:
    """The job's segment ends Terminated with `reason`; the instances of `pool` (the pool
    it ran on, if any) are gone."""

    job: str
    pool: str | None
    reason: PoolTermination


@dataclass(frozen=True, slots=True)
class PoolEnded:
    """An Available pool ends at `at`: Terminated, its owner's segment too, with
    `billed_seconds` more retained."""

    pool: str
    owner: str
    at: float
    reason: PoolTermination
    billed_seconds: float


Effect = (
    Emit | AttemptEnded | JobRequeued | JobClosed | JobDispatched | PoolAvailable
    | PoolReused | SegmentEnded | PoolEnded
)
Effects = tuple[Effect, ...]


# Attempts ending -----------------------------------------------------------------------


def attempt_finished(
    job: EndingJob, at: float, outcome: Outcome, room: WarmRoom, *,
    failure: Failure | None = None, reason: str | None = None,
) -> Effects:
    """An attempt's work ended: success, or a failure retried while attempts remain."""
    ended = AttemptEnded(job.job, at, outcome, reason, failure)
    if outcome is Outcome.SUCCEEDED:
        return (ended, Emit(job.job, Succeeded(), at), *settle(job, at, room, leaves=True),
                JobClosed(job.job, at, JobStatus.SUCCEEDED, None))
    failed = job.failed_count + 1
    if retries_left(failed, job.retry_attempts):
        return (ended, Emit(job.job, AttemptFailed(failure), at),
                *settle(job, at, room, leaves=False),
                JobRequeued(job.job, at, None, failed_count=failed))
    leaves = leaves_warm_pool(outcome, failure, False, True)
    return (ended, Emit(job.job, Failed(reason), at), *settle(job, at, room, leaves=leaves),
            JobClosed(job.job, at, JobStatus.FAILED, reason, failed_count=failed))


def job_terminated(
    job: EndingJob, at: float, reason: str, room: WarmRoom, *, stop_by: float,
    pool_ends_with_share: bool = False,
) -> Effects:
    """A user's terminate (or its share's deletion): the job FAILS with `reason`; its
    attempt, if any, ends TERMINATED, and RUNNING instances may stay warm.  When the share
    goes, the job leaves nothing and a pool it runs on ends (USER)."""
    active = job.status.active
    effects: list[Effect] = []
    if active:
        effects.append(AttemptEnded(job.job, at, Outcome.TERMINATED, reason, stop_by=stop_by))
    if active and pool_ends_with_share and job.reused_pool is not None:
        effects += _segment_ended(job.job, job.reused_pool, PoolTermination.USER, at)
    effects.append(Emit(job.job, Terminated(reason), at))
    if active and not pool_ends_with_share:
        leaves = leaves_warm_pool(Outcome.TERMINATED, None, False,
                                  job.status is JobStatus.RUNNING)
        effects += settle(job, at, room, leaves=leaves)
    effects.append(JobClosed(job.job, at, JobStatus.FAILED, reason))
    return tuple(effects)


def settle(job: EndingJob, at: float, room: WarmRoom, *, leaves: bool) -> Effects:
    """What the job's instances become as its attempt ends (docs/semantics.md 6)."""
    reused = job.reused_pool
    if reused is None and not (leaves and job.keep_alive_seconds > 0):
        return ()
    if reused is not None and job.reused_chain_started_at is not None:
        chain_start = job.reused_chain_started_at
    else:  # the chain starts when its first job became RUNNING (0 is a time too)
        chain_start = job.started_at if job.started_at is not None else at
    settlement = settle_warm_pool(
        keep_alive_seconds=job.keep_alive_seconds,
        leaves_pool=leaves,
        reused_pool=reused is not None,
        ended_at=at,
        chain_started_at=chain_start,
        max_lifetime_seconds=room.max_lifetime_seconds,
        available_on_unit=room.available_on_unit,
        instance_count=job.instance_count,
        warm_pool_limit=room.warm_pool_limit,
    )
    if settlement.status is PoolStatus.AVAILABLE:
        assert settlement.expires_at is not None
        return (PoolAvailable(job.job, at, reused, chain_start, settlement.expires_at),
                Emit(job.job, WarmPoolAvailable(settlement.expires_at), at))
    if settlement.status is PoolStatus.TERMINATED:
        return _segment_ended(job.job, reused, settlement.reason or PoolTermination.EXPIRED,
                              at)
    return ()


def _segment_ended(job: str, pool: str | None, reason: PoolTermination, at: float) -> Effects:
    return SegmentEnded(job, pool, reason), Emit(job, WarmPoolTerminated(reason), at)


# A cycle's decisions -------------------------------------------------------------------


def preempted(job: EndingJob, decision: Preempt, at: float) -> Effects:
    """A victim's attempt ends PREEMPTED; the instances of a pool it runs on go to the
    preemptor (EVICTED); the job is requeued after its grace, or FAILS once its
    preemption retries are used up."""
    effects: list[Effect] = [
        AttemptEnded(job.job, at, Outcome.PREEMPTED, kind=decision.kind,
                     preempted_by=decision.preempted_by, stop_by=decision.grace_until),
        Emit(job.job, Preempted(decision.kind, decision.preempted_by), at),
    ]
    if job.reused_pool is not None:
        effects += _segment_ended(job.job, job.reused_pool, PoolTermination.EVICTED, at)
    count = job.preempted_count + 1
    if preemption_fails_job(count, job.preemption_retries):
        effects += (Emit(job.job, Failed(PREEMPTION_RETRIES_EXHAUSTED), at),
                    JobClosed(job.job, at, JobStatus.FAILED, PREEMPTION_RETRIES_EXHAUSTED,
                              preempted_count=count))
    else:
        effects.append(JobRequeued(job.job, at, decision.grace_until, preempted_count=count))
    return tuple(effects)


def dispatched(decision: Dispatch, at: float, reused: AvailablePool | None) -> Effects:
    """A job is placed, on the warm pool the decision names when it reuses one."""
    effects: list[Effect] = [
        JobDispatched(decision.job_id, at, decision),
        Emit(decision.job_id, Dispatched(decision.borrowed_instances, decision.warm_start),
             at),
    ]
    if reused is not None:
        effects += (
            PoolReused(reused.id, reused.owner, decision.job_id,
                       _billed(reused.available_since, at)),
            Emit(reused.owner, WarmPoolReused(decision.job_id), at),
        )
    return tuple(effects)


def pool_terminated(
    pool: AvailablePool, reason: PoolTermination, now: float, max_lifetime_seconds: float
) -> Effects:
    """An Available pool ends.  Evicted, it ends now; expired by time, it ended when it
    fell due, however late the cycle came, and is stamped and billed so."""
    ended_at = now
    if reason is not PoolTermination.EVICTED:
        due, _ = pool_end(pool.expires_at, pool.chain_started_at, max_lifetime_seconds)
        ended_at = min(now, due)
    return pool_ended(pool, reason, ended_at)


def pool_ended(pool: AvailablePool, reason: PoolTermination, at: float) -> Effects:
    """An Available pool ends at `at` (expired, evicted, or ended by a user)."""
    return (PoolEnded(pool.id, pool.owner, at, reason, _billed(pool.available_since, at)),
            Emit(pool.owner, WarmPoolTerminated(reason), at))


def _billed(available_since: float | None, at: float) -> float:
    """Seconds a segment stood Available by `at` (its retained billable time)."""
    return max(0, at - available_since) if available_since is not None else 0
