"""The simulator's mutable records of jobs, attempts and warm pools."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..decisions import PendingReason, PoolTermination, PreemptionKind
from ..lifecycle import Outcome, PoolStatus, WorkEnd, billable_seconds, preemptions_left
from ..model import Job, JobStatus, WarmPool, WarmPoolMatch
from .scenario import JobSpec


@dataclass(slots=True)
class Attempt:
    number: int
    scheduled_at: int
    starting_at: int
    borrowed_instances: int
    warm_start: bool
    started_at: int | None = None
    stopped_at: int | None = None
    outcome: Outcome | None = None
    status_reason: str | None = None
    kind: PreemptionKind | None = None
    preempted_by: str | None = None
    work_end: WorkEnd | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "scheduled_at": self.scheduled_at,
            "started_at": self.started_at,
            "stopped_at": self.stopped_at,
            "outcome": self.outcome.value if self.outcome else None,
            "borrowed_instances": self.borrowed_instances,
            "warm_start": self.warm_start,
        }
        if self.outcome is Outcome.PREEMPTED:
            data["kind"] = self.kind.value if self.kind else None
            data["preempted_by"] = self.preempted_by
        return data


@dataclass(slots=True)
class Segment:
    """One job's segment of a warm pool (docs/semantics.md 6, Identity)."""

    status: PoolStatus
    keep_alive_seconds: int
    expires_at: int | None = None
    available_since: int | None = None
    retained_billable_seconds: int = 0
    reused_by: str | None = None
    termination_reason: PoolTermination | None = None

    def to_json(self, until: int) -> dict[str, Any]:
        billable = self.retained_billable_seconds
        if self.status is PoolStatus.AVAILABLE and self.available_since is not None:
            # Whole seconds in the simulator's output: its clock ticks in whole seconds.
            billable += int(billable_seconds(self.available_since, until))
        return {
            "status": self.status.value,
            "keep_alive_seconds": self.keep_alive_seconds,
            "expires_at": self.expires_at,
            "retained_billable_seconds": billable,
            "reused_by": self.reused_by,
            "termination_reason": (
                self.termination_reason.value if self.termination_reason else None
            ),
        }


@dataclass(slots=True)
class SimJob:
    spec: JobSpec
    sequence: int
    submitted_at: int
    priority: int
    keep_alive_seconds: int
    status: JobStatus = JobStatus.SUBMITTED
    status_reason: str | None = None
    pending: PendingReason | None = None
    attempts: list[Attempt] = field(default_factory=list)
    preempted_count: int = 0
    failed_count: int = 0
    progress: float = 0
    not_before: int | None = None
    instances: tuple[int, ...] = ()
    pool: Pool | None = None  # the pool it runs on (reused), while active
    segment: Segment | None = None  # its own segment of a warm pool
    first_dispatched_at: int | None = None
    frozen: Job | None = None
    changed: set[str] | None = None  # where touch() records its name (EngineView)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def current(self) -> Attempt:
        return self.attempts[-1]

    def touch(self) -> None:
        """The job changed: its frozen view is stale, and the world's backlog must hear."""
        self.frozen = None
        if self.changed is not None:
            self.changed.add(self.spec.name)

    def as_engine_job(self) -> Job:
        """The frozen view a cycle sees, cached until the job changes."""
        if self.frozen is None:
            active = self.status.active
            self.frozen = Job(
                id=self.name,
                quota_share=self.spec.quota_share,
                priority=self.priority,
                sequence=self.sequence,
                instance_type=self.spec.instance_type,
                instance_count=self.spec.instance_count,
                status=self.status,
                match=self.spec.match,
                instances=self.instances,
                dispatched_at=self.current.scheduled_at if active else None,
                started_at=self.current.started_at if active else None,
                not_before=self.not_before,
                preemptions_left=preemptions_left(
                    self.preempted_count, self.spec.preemption_retries
                ),
                pending_code=self.pending.value if self.pending else None,
                min_runtime_seconds=self.spec.min_runtime_seconds,
            )
        return self.frozen


@dataclass(slots=True)
class Pool:
    """A physical warm pool: instances that move from job to job along a chain."""

    id: str
    quota_share: str
    instance_type: str
    instance_count: int
    match: WarmPoolMatch
    instances: tuple[int, ...]
    chain_started_at: int
    owner: SimJob
    status: PoolStatus
    available_since: int = 0
    expires_at: int = 0
    version: int = 0

    def as_engine_pool(self) -> WarmPool:
        return WarmPool(
            id=self.id,
            quota_share=self.quota_share,
            owner_job=self.owner.name,
            instance_type=self.instance_type,
            instance_count=self.instance_count,
            match=self.match,
            available_since=self.available_since,
            expires_at=self.expires_at,
            chain_started_at=self.chain_started_at,
            priority=self.owner.priority,
            sequence=self.owner.sequence,
            instances=self.instances,
        )
