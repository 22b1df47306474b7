"""The engine's frozen data model: what a scheduling cycle sees (docs/semantics.md 1, 2, 4, 6).

Everything here is an immutable value.  The shell (Django) and the simulator both build a
`Snapshot` of these and hand it to `scheduler.cycle.schedule`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Strategy(StrEnum):
    """How a quota share treats its idle capacity (docs/semantics.md 2)."""

    RESERVE = "RESERVE"
    LEND = "LEND"
    LEND_AND_BORROW = "LEND_AND_BORROW"

    @property
    def lends(self) -> bool:
        return self is not Strategy.RESERVE

    @property
    def borrows(self) -> bool:
        return self is Strategy.LEND_AND_BORROW


class ShareState(StrEnum):
    ENABLED = "ENABLED"
    DISABLED = "DISABLED"


class JobStatus(StrEnum):
    """SUBMITTED → RUNNABLE → SCHEDULED → STARTING → RUNNING → SUCCEEDED | FAILED."""

    SUBMITTED = "SUBMITTED"
    RUNNABLE = "RUNNABLE"
    SCHEDULED = "SCHEDULED"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"

    @property
    def queued(self) -> bool:
        """Waiting for capacity: a cycle treats SUBMITTED exactly like RUNNABLE."""
        return self is JobStatus.RUNNABLE or self is JobStatus.SUBMITTED

    @property
    def active(self) -> bool:
        """Holding instances: SCHEDULED, STARTING or RUNNING."""
        return (
            self is JobStatus.RUNNING or self is JobStatus.STARTING or self is JobStatus.SCHEDULED
        )

    @property
    def terminal(self) -> bool:
        return self is JobStatus.SUCCEEDED or self is JobStatus.FAILED


UNLIMITED_BORROW = -1


@dataclass(frozen=True, slots=True)
class CapacityUnit:
    """One instance type of the service environment (docs/semantics.md 1)."""

    name: str
    max_capacity: int
    warm_pool_limit: int = 0
    cold_start_seconds: int = 60
    warm_start_seconds: int = 5
    fair_sharing: bool = False  # borrowers take its idle capacity by weight (semantics.md 5.4)


@dataclass(frozen=True, slots=True)
class QuotaShare:
    """A team's virtual queue with its limits and sharing strategy (docs/semantics.md 2).

    `limits` maps capacity unit → L(s,u); a unit that is not listed has limit 0.
    `borrow_limit` is None unless the strategy is LEND_AND_BORROW (−1 = unlimited; None
    there reads as the default, −1).
    `fair_share_weight` orders borrowers where fair sharing is on (semantics.md 5.4);
    `min_runtime_seconds` shields the share's young RUNNING attempts from preemption
    (semantics.md 5.8).
    """

    name: str
    limits: tuple[tuple[str, int], ...]
    strategy: Strategy
    borrow_limit: int | None = None
    in_share_preemption: bool = False
    state: ShareState = ShareState.ENABLED
    max_keep_alive_seconds: int = 3600
    fair_share_weight: int = 1
    min_runtime_seconds: int = 0

    def limit(self, unit: str) -> int:
        """L(s,u): the share's capacity limit on `unit`, 0 when not listed."""
        for name, value in self.limits:
            if name == unit:
                return value
        return 0

    def units(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.limits)


@dataclass(frozen=True, slots=True)
class WarmPoolMatch:
    """The attributes that must be equal for a job to reuse a warm pool (semantics.md 6, Matching).

    instance_type and instance_count are part of the match too; they live on the job and
    the pool themselves.  Sets are frozensets so that order does not matter.
    """

    role: str = ""
    volume_size_gb: int = 0
    volume_kms_key_id: str = ""
    security_group_ids: frozenset[str] = frozenset()
    subnets: frozenset[str] = frozenset()
    enable_network_isolation: bool = False
    enable_inter_container_traffic_encryption: bool = False


@dataclass(frozen=True, slots=True)
class Job:
    """A job as a cycle sees it.

    `sequence` is the submission order (the database id, or the file order in a scenario);
    a preempted or retried job keeps it, and so keeps its place.  For an active job,
    `instances` are the instance numbers it holds, `dispatched_at` when its current attempt
    was placed and `started_at` when it became RUNNING (None before).  A queued job may not
    be placed before `not_before` (the end of its previous attempt's preemption grace).
    `preemptions_left` is how many more preemptions it survives (None: unlimited; 0: the
    next one fails it).
    `pending_code` is the reason the shell last stored, so that a cycle reports only
    changes.  `min_runtime_seconds` is the job's own minimum runtime (None: its share's;
    never more than its share's, semantics.md 5.8).
    """

    id: str
    quota_share: str
    priority: int
    sequence: int
    instance_type: str
    instance_count: int
    status: JobStatus
    match: WarmPoolMatch = WarmPoolMatch()
    instances: tuple[int, ...] = ()
    dispatched_at: float | None = None
    started_at: float | None = None
    not_before: float | None = None
    preemptions_left: int | None = None
    pending_code: str | None = None
    min_runtime_seconds: int | None = None


@dataclass(frozen=True, slots=True)
class WarmPool:
    """An Available warm pool: a set of instances kept for `owner_job`'s share (semantics.md 6).

    `priority` and `sequence` are those of the job that left it (victim ordering uses them);
    `chain_started_at` is when the chain's first job became RUNNING (the 28-day lifetime).
    """

    id: str
    quota_share: str
    owner_job: str
    instance_type: str
    instance_count: int
    match: WarmPoolMatch
    available_since: float
    expires_at: float
    chain_started_at: float
    priority: int
    sequence: int
    instances: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Policy:
    """Deployment settings that change decisions (docs/semantics.md numbers in brackets)."""

    preemption_grace_seconds: float = 30
    warm_pool_max_lifetime_seconds: float = 2_419_200
    fair_sharing: bool = False  # on every unit (FAIR_SHARING; a unit may turn it on alone)
    # With a half-life, fair sharing also counts each share's decayed past borrowing
    # (FAIR_SHARE_HALF_LIFE_SECONDS; 0: off, semantics.md 5.4).
    fair_share_half_life_seconds: int = 0


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one cycle decides from: capacity, shares, non-terminal jobs and the
    Available warm pools, at time `now`.  `past_borrowed` gives (share, unit, mean) for each
    share whose decayed past borrowing on a unit is above 0 (past_usage.py); it is read only
    where fair sharing with a half-life is on."""

    now: float
    capacity: tuple[CapacityUnit, ...]
    shares: tuple[QuotaShare, ...]
    jobs: tuple[Job, ...]
    warm_pools: tuple[WarmPool, ...] = ()
    policy: Policy = field(default_factory=Policy)
    past_borrowed: tuple[tuple[str, str, float], ...] = ()
