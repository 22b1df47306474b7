"""What a cycle decides: small frozen decisions, each with a reason code and a sentence."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class PendingReason(StrEnum):
    """Why a RUNNABLE job waits: the first that applies, in this order (docs/semantics.md 4)."""

    SERVICE_ENVIRONMENT_MAX_RESOURCE = "MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE"
    QUOTA_MANAGEMENT_LIMIT_EXCEEDED = "MISCONFIGURATION:QUOTA_MANAGEMENT_LIMIT_EXCEEDED"
    WAITING_FOR_MIN_RUNTIME = "WAITING_FOR_MIN_RUNTIME"
    BORROW_LIMIT_REACHED = "BORROW_LIMIT_REACHED"
    NO_IDLE_CAPACITY_TO_BORROW = "NO_IDLE_CAPACITY_TO_BORROW"
    WAITING_FOR_CAPACITY = "WAITING_FOR_CAPACITY"

    @property
    def message(self) -> str:
        return PENDING_MESSAGES[self]


PENDING_MESSAGES: dict[PendingReason, str] = {
    PendingReason.SERVICE_ENVIRONMENT_MAX_RESOURCE: (
        "The job needs more instances of its type than the service environment has."
    ),
    PendingReason.QUOTA_MANAGEMENT_LIMIT_EXCEEDED: (
        "The job needs more instances than its quota share could ever hold, "
        "borrowing included."
    ),
    PendingReason.BORROW_LIMIT_REACHED: (
        "The job would have to borrow beyond its quota share's borrow limit."
    ),
    PendingReason.NO_IDLE_CAPACITY_TO_BORROW: (
        "The job would have to borrow, and other shares do not have enough idle capacity "
        "to lend."
    ),
    PendingReason.WAITING_FOR_MIN_RUNTIME: (
        "The job could preempt lower-priority jobs of its quota share, but they have not "
        "yet run for their minimum runtime; it runs when they have."
    ),
    PendingReason.WAITING_FOR_CAPACITY: (
        "The quota share is at its limit, or the capacity it is owed is held by jobs "
        "that may not be preempted; the job runs when capacity frees up."
    ),
}


class PreemptionKind(StrEnum):
    CROSS_SHARE = "CROSS_SHARE"
    IN_SHARE = "IN_SHARE"


class PoolTermination(StrEnum):
    """Why a warm pool (one job's segment of it) ended (docs/semantics.md 6)."""

    EXPIRED = "EXPIRED"
    USER = "USER"
    EVICTED = "EVICTED"
    MAX_LIFETIME = "MAX_LIFETIME"
    LIMIT_EXCEEDED = "LIMIT_EXCEEDED"


@dataclass(frozen=True, slots=True)
class TerminateWarmPool:
    """End an Available pool: expired, past its lifetime, or evicted for `by_job`."""

    pool_id: str
    reason: PoolTermination
    by_job: str | None = None


@dataclass(frozen=True, slots=True)
class Preempt:
    """End `job_id`'s attempt so that `preempted_by` can take its instances.

    `grace_until` is when the job may be placed again (its checkpoint window); it equals
    the cycle's time when the job was not yet RUNNING.
    """

    job_id: str
    kind: PreemptionKind
    preempted_by: str
    was_running: bool
    grace_until: float


@dataclass(frozen=True, slots=True)
class Dispatch:
    """Place `job_id` on `instances`: SCHEDULED now, STARTING at `starting_at`.

    `starting_at` is later than now only when a RUNNING victim gets its grace period.
    `warm_pool_id` names the reused pool, if any.
    """

    job_id: str
    instances: tuple[int, ...]
    borrowed_instances: int
    warm_pool_id: str | None
    starting_at: float

    @property
    def warm_start(self) -> bool:
        return self.warm_pool_id is not None


@dataclass(frozen=True, slots=True)
class SetPendingReason:
    """A queued job's pending reason changed, or it became RUNNABLE; `position` is its place
    in its share's order at this cycle (informational: it shifts with every dispatch)."""

    job_id: str
    reason: PendingReason
    position: int

    @property
    def message(self) -> str:
        return self.reason.message


Decision = TerminateWarmPool | Preempt | Dispatch | SetPendingReason


@dataclass(frozen=True, slots=True)
class Withdraw:
    """Not a decision: a step of a cycle's trace (`scheduler.cycle.trace`).  `job_id`, placed
    earlier in the cycle, was taken by `by_job`, so that placement was undone and neither
    it nor this step reaches the decisions."""

    job_id: str
    by_job: str


TraceStep = TerminateWarmPool | Preempt | Dispatch | Withdraw


@dataclass(frozen=True, slots=True)
class CycleResult:
    """The decisions of one cycle, in the order they were taken."""

    now: float
    decisions: tuple[Decision, ...]
