"""The simulator's world: state, timers, the lifecycle phase and applying a cycle's
decisions.  Everything here follows scheduler.lifecycle, as the live executors do."""

from __future__ import annotations

import heapq
import math
from typing import Any

from ..cycle import schedule_with_state
from ..decisions import (
    CycleResult,
    Dispatch,
    PoolTermination,
    Preempt,
    SetPendingReason,
    TerminateWarmPool,
)
from ..lifecycle import (
    PREEMPTION_RETRIES_EXHAUSTED,
    Outcome,
    PoolStatus,
    checkpointed_seconds,
    leaves_warm_pool,
    pool_end,
    preemption_fails_job,
    retries_left,
    settle_warm_pool,
    simulated_work_end,
    start_delay,
)
from ..model import CapacityUnit, JobStatus, QuotaShare, Snapshot
from ..state import CycleState
from .records import Attempt, Pool, Segment, SimJob
from .scenario import Scenario

# Timer kinds, in the order they apply within one second.
STARTING, RUNNING, END, POOL_END, WAKE = range(5)


class World:
    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.policy = scenario.policy
        self.capacity: dict[str, CapacityUnit] = {u.name: u for u in scenario.capacity}
        self.shares: dict[str, QuotaShare] = {s.name: s for s in scenario.shares}
        self.jobs: dict[str, SimJob] = {}
        self.live: dict[str, SimJob] = {}  # not terminal, in submission order
        self.pools: dict[str, Pool] = {}  # Available pools
        self.events: list[dict[str, Any]] = []
        self.timers: list[tuple[int, int, int, int, Any, int]] = []
        self.timer_seq = 0
        self.pool_seq = 0
        self.lost_work = 0.0
        self.changed = False  # whether anything happened that a cycle could act on

    # Events and timers ------------------------------------------------------------------

    def emit(self, t: int, event_type: str, job: str | None, share: str | None,
             details: dict[str, Any] | None = None) -> None:
        self.events.append({"t": t, "type": event_type, "job": job, "quota_share": share,
                            "details": details or {}})

    def emit_job(self, t: int, event_type: str, job: SimJob, **details: Any) -> None:
        self.emit(t, event_type, job.name, job.spec.quota_share, details)

    def at(self, time: int, kind: int, order: int, ref: Any, token: int) -> None:
        self.timer_seq += 1
        heapq.heappush(self.timers, (time, kind, order, self.timer_seq, ref, token))

    def next_timer(self) -> int | None:
        return self.timers[0][0] if self.timers else None

    # The lifecycle phase ---------------------------------------------------------------

    def advance(self, until: int) -> None:
        """Apply every start, end and expiry due by `until`, each at its exact second."""
        while self.timers and self.timers[0][0] <= until:
            time, kind, _, _, ref, token = heapq.heappop(self.timers)
            if kind == POOL_END:
                pool: Pool = ref
                if pool.status is PoolStatus.AVAILABLE and pool.version == token:
                    _, reason = pool_end(pool.expires_at, pool.chain_started_at,
                                         self.policy.warm_pool_max_lifetime_seconds)
                    self.end_pool(pool, time, reason)
                continue
            if kind == WAKE:
                self.changed = True
                continue
            job: SimJob = ref
            if not job.attempts or job.current.number != token or job.status.terminal:
                continue
            if kind == STARTING and job.status is JobStatus.SCHEDULED:
                self.start(job, time)
            elif kind == RUNNING and job.status is JobStatus.STARTING:
                self.run(job, time)
            elif kind == END and job.status is JobStatus.RUNNING:
                self.finish(job, time)

    def start(self, job: SimJob, t: int) -> None:
        job.status = JobStatus.STARTING
        job.touch()
        delay = start_delay(self.capacity[job.spec.instance_type], job.current.warm_start)
        self.at(t + delay, RUNNING, job.sequence, job, job.current.number)

    def run(self, job: SimJob, t: int) -> None:
        job.status = JobStatus.RUNNING
        job.current.started_at = t
        job.touch()
        self.emit_job(t, "RUNNING", job)
        spec = job.spec
        end = simulated_work_end(t, spec.duration_seconds - job.progress, spec.max_runtime_seconds,
                                 spec.fail_at_seconds, spec.failure)
        job.current.work_end = end
        self.at(math.ceil(end.at), END, job.sequence, job, job.current.number)

    def finish(self, job: SimJob, t: int) -> None:
        """The attempt's work ended: success, or a failure retried or final."""
        attempt = job.current
        end = attempt.work_end
        assert end is not None
        attempt.stopped_at = t
        attempt.outcome = end.outcome
        self.changed = True
        if end.outcome is Outcome.SUCCEEDED:
            self.emit_job(t, "SUCCEEDED", job)
            self.settle(job, t, leaves=True)
            self.close(job, JobStatus.SUCCEEDED, None)
            return
        attempt.status_reason = end.reason
        job.failed_count += 1
        retrying = retries_left(job.failed_count, job.spec.retry_attempts)
        if retrying:
            failure = end.failure.value if end.failure else None
            self.emit_job(t, "ATTEMPT_FAILED", job, failure=failure, retrying=True)
            self.settle(job, t, leaves=False)
            job.progress = 0  # a retry starts from zero
            self.requeue(job, None)
            return
        self.emit_job(t, "FAILED", job, reason=end.reason)
        self.settle(job, t, leaves=leaves_warm_pool(end.outcome, end.failure, False, True))
        self.close(job, JobStatus.FAILED, end.reason)

    def close(self, job: SimJob, status: JobStatus, reason: str | None) -> None:
        job.status = status
        job.status_reason = reason
        job.pending = None
        job.instances = ()
        job.touch()
        self.live.pop(job.name, None)

    def requeue(self, job: SimJob, not_before: int | None) -> None:
        job.status = JobStatus.RUNNABLE
        job.instances = ()
        job.not_before = not_before
        job.touch()

    # Warm pools ---------------------------------------------------------------------

    def available_on(self, unit: str) -> int:
        return sum(p.instance_count for p in self.pools.values() if p.instance_type == unit)

    def settle(self, job: SimJob, t: int, *, leaves: bool) -> None:
        """What the job's instances become as its attempt ends (docs/semantics.md 6)."""
        reused = job.pool
        if reused is None and not (leaves and job.keep_alive_seconds > 0):
            return
        attempt = job.current
        if reused is not None:
            chain_start = reused.chain_started_at
        else:  # the chain starts when its first job became RUNNING (0 is a time too)
            chain_start = attempt.started_at if attempt.started_at is not None else t
        unit = self.capacity.get(job.spec.instance_type)
        settlement = settle_warm_pool(
            keep_alive_seconds=job.keep_alive_seconds,
            leaves_pool=leaves,
            reused_pool=reused is not None,
            ended_at=t,
            chain_started_at=chain_start,
            max_lifetime_seconds=self.policy.warm_pool_max_lifetime_seconds,
            available_on_unit=self.available_on(job.spec.instance_type),
            instance_count=job.spec.instance_count,
            warm_pool_limit=unit.warm_pool_limit if unit else 0,
        )
        job.pool = None
        if settlement.status is PoolStatus.AVAILABLE:
            assert settlement.expires_at is not None
            pool = reused or self.new_pool(job, chain_start)
            pool.owner, pool.status = job, PoolStatus.AVAILABLE
            pool.available_since, pool.expires_at = t, int(settlement.expires_at)
            self.pools[pool.id] = pool
            job.segment = Segment(PoolStatus.AVAILABLE, job.keep_alive_seconds,
                                  pool.expires_at, available_since=t)
            self.emit_job(t, "WARM_POOL_AVAILABLE", job, expires_at=pool.expires_at)
            self.arm_pool(pool)
        elif settlement.status is PoolStatus.TERMINATED:
            if reused is not None:
                reused.status = PoolStatus.TERMINATED
            job.segment = Segment(PoolStatus.TERMINATED, job.keep_alive_seconds,
                                  termination_reason=settlement.reason)
            self.emit_job(t, "WARM_POOL_TERMINATED", job,
                          reason=settlement.reason.value if settlement.reason else None)

    def new_pool(self, job: SimJob, chain_start: int) -> Pool:
        self.pool_seq += 1
        return Pool(f"wp-{self.pool_seq}", job.spec.quota_share, job.spec.instance_type,
                    job.spec.instance_count, job.spec.match, job.instances, chain_start,
                    job, PoolStatus.AVAILABLE)

    def arm_pool(self, pool: Pool) -> None:
        pool.version += 1
        time, _ = pool_end(pool.expires_at, pool.chain_started_at,
                           self.policy.warm_pool_max_lifetime_seconds)
        self.at(int(math.ceil(time)), POOL_END, int(pool.id[3:]), pool, pool.version)

    def end_pool(self, pool: Pool, t: int, reason: PoolTermination) -> None:
        """An Available pool ends: its owner's segment is Terminated and billed."""
        self.pools.pop(pool.id, None)
        pool.status = PoolStatus.TERMINATED
        pool.version += 1
        segment = pool.owner.segment
        if segment is not None:
            segment.retained_billable_seconds += _since(segment, t)
            segment.status = PoolStatus.TERMINATED
            segment.termination_reason = reason
        self.changed = True
        self.emit_job(t, "WARM_POOL_TERMINATED", pool.owner, reason=reason.value)

    # A cycle ---------------------------------------------------------------------------

    def snapshot(self, t: int) -> Snapshot:
        return Snapshot(
            now=t,
            capacity=tuple(self.capacity.values()),
            shares=tuple(self.shares.values()),
            jobs=tuple(job.as_engine_job() for job in self.live.values()),
            warm_pools=tuple(pool.as_engine_pool() for pool in self.pools.values()),
            policy=self.policy,
        )

    def cycle(self, t: int, snapshot: Snapshot) -> tuple[CycleResult, CycleState]:
        result, state = schedule_with_state(snapshot)
        for decision in result.decisions:
            if isinstance(decision, SetPendingReason):
                job = self.jobs[decision.job_id]
                job.status, job.pending = JobStatus.RUNNABLE, decision.reason
                job.touch()
                continue
            self.changed = True
            if isinstance(decision, TerminateWarmPool):
                self.end_pool(self.pools[decision.pool_id], t, decision.reason)
            elif isinstance(decision, Preempt):
                self.preempt(self.jobs[decision.job_id], t, decision)
            elif isinstance(decision, Dispatch):
                self.dispatch(self.jobs[decision.job_id], t, decision)
        return result, state

    def preempt(self, job: SimJob, t: int, decision: Preempt) -> None:
        attempt = job.current
        attempt.stopped_at, attempt.outcome = t, Outcome.PREEMPTED
        attempt.kind, attempt.preempted_by = decision.kind, decision.preempted_by
        if attempt.started_at is not None:
            running = t - attempt.started_at
            saved = checkpointed_seconds(running, job.spec.checkpoint_seconds)
            job.progress = min(job.progress + saved, job.spec.duration_seconds)
            self.lost_work += (running - saved) * job.spec.instance_count
        job.preempted_count += 1
        self.emit_job(t, "PREEMPTED", job, kind=decision.kind.value,
                      preempted_by=decision.preempted_by)
        if job.pool is not None:  # its segment's instances go to the preemptor
            job.pool.status = PoolStatus.TERMINATED
            job.pool = None
            job.segment = Segment(PoolStatus.TERMINATED, job.keep_alive_seconds,
                                  termination_reason=PoolTermination.EVICTED)
            self.emit_job(t, "WARM_POOL_TERMINATED", job, reason=PoolTermination.EVICTED.value)
        if preemption_fails_job(job.preempted_count, job.spec.preemption_retries):
            self.emit_job(t, "FAILED", job, reason=PREEMPTION_RETRIES_EXHAUSTED)
            self.close(job, JobStatus.FAILED, PREEMPTION_RETRIES_EXHAUSTED)
            return
        grace = int(math.ceil(decision.grace_until))
        self.requeue(job, grace if grace > t else None)
        if grace > t:
            self.at(grace, WAKE, job.sequence, job, 0)

    def dispatch(self, job: SimJob, t: int, decision: Dispatch) -> None:
        attempt = Attempt(len(job.attempts) + 1, t, int(decision.starting_at),
                          decision.borrowed_instances, decision.warm_start)
        job.attempts.append(attempt)
        job.status, job.pending, job.not_before = JobStatus.SCHEDULED, None, None
        job.instances = decision.instances
        if job.first_dispatched_at is None:
            job.first_dispatched_at = t
        job.touch()
        self.emit_job(t, "DISPATCHED", job, borrowed_instances=decision.borrowed_instances,
                      warm_start=decision.warm_start)
        if decision.warm_pool_id is not None:
            self.reuse(self.pools.pop(decision.warm_pool_id), job, t)
        self.at(attempt.starting_at, STARTING, job.sequence, job, attempt.number)

    def reuse(self, pool: Pool, job: SimJob, t: int) -> None:
        previous = pool.owner
        segment = previous.segment
        if segment is not None:
            segment.retained_billable_seconds += _since(segment, t)
            segment.status, segment.reused_by = PoolStatus.REUSED, job.name
        self.emit_job(t, "WARM_POOL_REUSED", previous, reused_by=job.name)
        pool.owner, pool.status = job, PoolStatus.IN_USE
        pool.version += 1
        job.pool = pool
        job.segment = Segment(PoolStatus.IN_USE, job.keep_alive_seconds)


def _since(segment: Segment, t: int) -> int:
    """Seconds the segment has stood Available by `t` (its billable time)."""
    return t - segment.available_since if segment.available_since is not None else 0
