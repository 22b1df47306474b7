"""The simulator's world: state, timers, the lifecycle phase and a cycle.  What a decision
or an attempt's end does comes from scheduler.effects, as it does for the live system; this
module only applies those effects to memory."""

from __future__ import annotations

import heapq
import math
from collections import Counter
from typing import Any

from ..cycle import resume
from ..decisions import (
    CycleResult,
    Dispatch,
    Preempt,
    SetPendingReason,
    TerminateWarmPool,
)
from ..effects import (
    AttemptEnded,
    AvailablePool,
    Effect,
    Emit,
    EndingJob,
    JobClosed,
    JobDispatched,
    JobRequeued,
    PoolAvailable,
    PoolEnded,
    PoolReused,
    SegmentEnded,
    WarmRoom,
    attempt_finished,
    dispatched,
    pool_ended,
    pool_terminated,
    preempted,
)
from ..events import Payload, Running, details
from ..lifecycle import (
    Outcome,
    PoolStatus,
    checkpointed_seconds,
    pool_end,
    simulated_work_end,
    start_delay,
)
from ..min_runtime import min_runtime_ends_at
from ..model import CapacityUnit, JobStatus, QuotaShare, Snapshot
from ..past_usage import PastUsageBook
from ..quota import borrowed
from ..state import CycleState
from .engine_view import EngineView
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
        # Instances held by active jobs, and requested by queued ones, per (share, unit):
        # kept as jobs move, so that the usage figures of a tick cost nothing per job.
        self.held_by_jobs: Counter[tuple[str, str]] = Counter()
        self.queued: Counter[tuple[str, str]] = Counter()
        self.active_jobs: dict[str, SimJob] = {}  # the active jobs, kept as jobs move
        self.view = EngineView()  # the engine's, kept between cycles
        # Decayed past borrowing (semantics.md 5.4), kept only with a half-life: folded
        # after each cycle, as the live shell folds the usage samples it writes then.
        half_life = self.policy.fair_share_half_life_seconds
        self.past: PastUsageBook | None = PastUsageBook(half_life) if half_life > 0 else None

    # Events and timers ------------------------------------------------------------------

    def emit(self, t: int, payload: Payload, job: str | None, share: str | None) -> None:
        # The scenario output names jobs and counts whole seconds.
        self.events.append({"t": t, "type": payload.type.value, "job": job,
                            "quota_share": share,
                            "details": details(payload, job=str, time=int)})

    def emit_job(self, t: int, payload: Payload, job: SimJob) -> None:
        self.emit(t, payload, job.name, job.spec.quota_share)

    def at(self, time: int, kind: int, order: int, ref: Any, token: int) -> None:
        self.timer_seq += 1
        heapq.heappush(self.timers, (time, kind, order, self.timer_seq, ref, token))

    def next_timer(self) -> int | None:
        return self.timers[0][0] if self.timers else None

    # Job status ---------------------------------------------------------------------

    def admit(self, job: SimJob) -> None:
        """A submitted job joins the world (SUBMITTED: queued)."""
        self.jobs[job.name] = job
        self.live[job.name] = job
        self.queued[job.spec.quota_share, job.spec.instance_type] += job.spec.instance_count
        self.view.watch(job)

    def recount(self) -> None:
        """Count the held and queued instances again from the live jobs: for code that
        puts jobs into `jobs` and `live`, or sets their status, without admit() and move()
        (a world built from a live snapshot, say).  The backlog is built again too."""
        self.held_by_jobs, self.queued, self.active_jobs = Counter(), Counter(), {}
        self.view.rebuild()
        for job in self.live.values():
            self.view.watch(job)
            key, count = (job.spec.quota_share, job.spec.instance_type), job.spec.instance_count
            if job.status.active:
                self.held_by_jobs[key] += count
                self.active_jobs[job.name] = job
            elif job.status.queued:
                self.queued[key] += count

    def move(self, job: SimJob, status: JobStatus) -> None:
        """Change the job's status, keeping the held and queued counts."""
        old = job.status
        if old.active is not status.active or old.queued is not status.queued:
            key, count = (job.spec.quota_share, job.spec.instance_type), job.spec.instance_count
            if old.active:
                self.held_by_jobs[key] -= count
                del self.active_jobs[job.name]
            elif old.queued:
                self.queued[key] -= count
            if status.active:
                self.held_by_jobs[key] += count
                self.active_jobs[job.name] = job
            elif status.queued:
                self.queued[key] += count
        job.status = status

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
                    self.apply(pool_ended(available(pool), reason, time), time)
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
        self.move(job, JobStatus.STARTING)
        job.touch()
        delay = start_delay(self.capacity[job.spec.instance_type], job.current.warm_start)
        self.at(t + delay, RUNNING, job.sequence, job, job.current.number)

    def run(self, job: SimJob, t: int) -> None:
        self.move(job, JobStatus.RUNNING)
        job.current.started_at = t
        job.touch()
        self.emit_job(t, Running(), job)
        spec = job.spec
        end = simulated_work_end(t, spec.duration_seconds - job.progress, spec.max_runtime_seconds,
                                 spec.fail_at_seconds, spec.failure)
        job.current.work_end = end
        self.at(math.ceil(end.at), END, job.sequence, job, job.current.number)
        share = self.shares.get(spec.quota_share)
        if share is not None and share.min_runtime_seconds > 0:
            # The attempt becomes a victim like any other then: a cycle must run.
            shield_ends = min_runtime_ends_at(job.as_engine_job(), share)
            if shield_ends is not None and shield_ends > t:
                self.at(math.ceil(shield_ends), WAKE, job.sequence, job, 0)

    def finish(self, job: SimJob, t: int) -> None:
        """The attempt's work ended: success, or a failure retried or final."""
        end = job.current.work_end
        assert end is not None
        self.apply(attempt_finished(self.ending(job), t, end.outcome, self.room(job),
                                    failure=end.failure, reason=end.reason), t)

    # The state effects apply to ---------------------------------------------------------

    def ending(self, job: SimJob) -> EndingJob:
        pool = job.pool
        return EndingJob(
            job=job.name, status=job.status, keep_alive_seconds=job.keep_alive_seconds,
            instance_count=job.spec.instance_count, failed_count=job.failed_count,
            retry_attempts=job.spec.retry_attempts, preempted_count=job.preempted_count,
            preemption_retries=job.spec.preemption_retries,
            started_at=job.current.started_at if job.attempts else None,
            reused_pool=pool.id if pool is not None else None,
            reused_chain_started_at=pool.chain_started_at if pool is not None else None,
        )

    def room(self, job: SimJob) -> WarmRoom:
        unit = self.capacity.get(job.spec.instance_type)
        return WarmRoom(self.available_on(job.spec.instance_type),
                        unit.warm_pool_limit if unit else 0,
                        self.policy.warm_pool_max_lifetime_seconds)

    def available_on(self, unit: str) -> int:
        return sum(p.instance_count for p in self.pools.values() if p.instance_type == unit)

    # Applying effects -------------------------------------------------------------------

    def apply(self, effects: tuple[Effect, ...], t: int) -> None:
        for effect in effects:
            if isinstance(effect, Emit):
                assert effect.job is not None
                self.emit_job(t, effect.payload, self.jobs[effect.job])
            elif isinstance(effect, AttemptEnded):
                self.end_attempt(self.jobs[effect.job], effect, t)
            elif isinstance(effect, JobRequeued):
                self.requeue(self.jobs[effect.job], effect, t)
            elif isinstance(effect, JobClosed):
                job = self.jobs[effect.job]
                count(job, effect.failed_count, effect.preempted_count)
                self.close(job, effect.status, effect.reason)
            elif isinstance(effect, JobDispatched):
                self.dispatch(self.jobs[effect.job], t, effect.decision)
            elif isinstance(effect, PoolAvailable):
                self.pool_available(self.jobs[effect.job], effect, t)
            elif isinstance(effect, PoolReused):
                self.reuse(self.pools.pop(effect.pool), self.jobs[effect.by_job],
                           effect.billed_seconds)
            elif isinstance(effect, SegmentEnded):
                job = self.jobs[effect.job]
                if job.pool is not None:  # its instances are gone
                    job.pool.status = PoolStatus.TERMINATED
                    job.pool = None
                job.segment = Segment(PoolStatus.TERMINATED, job.keep_alive_seconds,
                                      termination_reason=effect.reason)
            elif isinstance(effect, PoolEnded):
                self.end_pool(self.pools[effect.pool], effect)

    def end_attempt(self, job: SimJob, effect: AttemptEnded, t: int) -> None:
        attempt = job.current
        attempt.stopped_at, attempt.outcome = t, effect.outcome
        self.changed = True
        if effect.reason is not None and effect.outcome is not Outcome.PREEMPTED:
            attempt.status_reason = effect.reason
        if effect.outcome is not Outcome.PREEMPTED:
            return
        attempt.kind, attempt.preempted_by = effect.kind, effect.preempted_by
        if attempt.started_at is not None:  # the work up to its last checkpoint is kept
            running = t - attempt.started_at
            saved = checkpointed_seconds(running, job.spec.checkpoint_seconds)
            job.progress = min(job.progress + saved, job.spec.duration_seconds)
            self.lost_work += (running - saved) * job.spec.instance_count

    def requeue(self, job: SimJob, effect: JobRequeued, t: int) -> None:
        count(job, effect.failed_count, effect.preempted_count)
        if effect.failed_count is not None:
            job.progress = 0  # a retry starts from zero
        grace = math.ceil(effect.not_before) if effect.not_before is not None else t
        self.move(job, JobStatus.RUNNABLE)
        job.instances = ()
        job.not_before = grace if grace > t else None
        job.touch()
        if grace > t:
            self.at(grace, WAKE, job.sequence, job, 0)

    def close(self, job: SimJob, status: JobStatus, reason: str | None) -> None:
        self.move(job, status)
        job.status_reason = reason
        job.pending = None
        job.instances = ()
        job.touch()
        self.live.pop(job.name, None)

    def dispatch(self, job: SimJob, t: int, decision: Dispatch) -> None:
        attempt = Attempt(len(job.attempts) + 1, t, int(decision.starting_at),
                          decision.borrowed_instances, decision.warm_start)
        job.attempts.append(attempt)
        self.move(job, JobStatus.SCHEDULED)
        job.pending, job.not_before = None, None
        job.instances = decision.instances
        if job.first_dispatched_at is None:
            job.first_dispatched_at = t
        job.touch()
        self.at(attempt.starting_at, STARTING, job.sequence, job, attempt.number)

    # Warm pools ---------------------------------------------------------------------

    def pool_available(self, job: SimJob, effect: PoolAvailable, t: int) -> None:
        reused = job.pool
        pool = reused or self.new_pool(job, int(effect.chain_started_at))
        job.pool = None
        pool.owner, pool.status = job, PoolStatus.AVAILABLE
        pool.available_since, pool.expires_at = t, int(effect.expires_at)
        self.pools[pool.id] = pool
        job.segment = Segment(PoolStatus.AVAILABLE, job.keep_alive_seconds,
                              pool.expires_at, available_since=t)
        self.arm_pool(pool)

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

    def end_pool(self, pool: Pool, effect: PoolEnded) -> None:
        """An Available pool ends: its owner's segment is Terminated and billed."""
        self.pools.pop(pool.id, None)
        pool.status = PoolStatus.TERMINATED
        pool.version += 1
        segment = pool.owner.segment
        if segment is not None:
            segment.retained_billable_seconds += int(effect.billed_seconds)
            segment.status = PoolStatus.TERMINATED
            segment.termination_reason = effect.reason
        self.changed = True

    def reuse(self, pool: Pool, job: SimJob, billed_seconds: float) -> None:
        segment = pool.owner.segment
        if segment is not None:
            segment.retained_billable_seconds += int(billed_seconds)
            segment.status, segment.reused_by = PoolStatus.REUSED, job.name
        pool.owner, pool.status = job, PoolStatus.IN_USE
        pool.version += 1
        job.pool = pool
        job.segment = Segment(PoolStatus.IN_USE, job.keep_alive_seconds)

    # A cycle ---------------------------------------------------------------------------

    def snapshot(self, t: int) -> Snapshot:
        """The world as one snapshot (for observers: the cycle reads the backlog)."""
        return Snapshot(
            now=t,
            capacity=tuple(self.capacity.values()),
            shares=tuple(self.shares.values()),
            jobs=tuple([job.as_engine_job() for job in self.live.values()]),
            warm_pools=tuple(pool.as_engine_pool() for pool in self.pools.values()),
            policy=self.policy,
            past_borrowed=tuple((share, unit, mean) for (share, unit), mean
                                in sorted(self.past_borrowed(t).items())),
        )

    def past_borrowed(self, t: int) -> dict[tuple[str, str], float]:
        """Each share's decayed past borrowing per unit at `t` (empty without a half-life)."""
        return self.past.means(t) if self.past is not None else {}

    def borrowed_counts(self) -> dict[tuple[str, str], int]:
        """What each share borrows on each unit it lists, counting its Available pools, as
        the usage figures count it (0s left out)."""
        used = Counter(self.held_by_jobs)
        for pool in self.pools.values():
            used[pool.quota_share, pool.instance_type] += pool.instance_count
        counts = {}
        for name, share in self.shares.items():
            for unit, limit in share.limits:
                count = borrowed(used[name, unit], limit)
                if count:
                    counts[name, unit] = count
        return counts

    def cycle(self, t: int) -> tuple[CycleResult, CycleState]:
        holdings, backlog = self.view.sync(self.jobs, self.live, tuple(self.capacity.values()),
                                           tuple(self.shares.values()))
        pools = [pool.as_engine_pool() for pool in self.pools.values()]
        result, state = resume(t, self.policy, holdings, pools, backlog, self.past_borrowed(t))
        lifetime = self.policy.warm_pool_max_lifetime_seconds
        for decision in result.decisions:
            if isinstance(decision, SetPendingReason):
                job = self.jobs[decision.job_id]
                self.move(job, JobStatus.RUNNABLE)
                job.pending = decision.reason
                job.touch()
                continue
            self.changed = True
            if isinstance(decision, TerminateWarmPool):
                ending = available(self.pools[decision.pool_id])
                self.apply(pool_terminated(ending, decision.reason, t, lifetime), t)
            elif isinstance(decision, Preempt):
                self.apply(preempted(self.ending(self.jobs[decision.job_id]), decision, t), t)
            elif isinstance(decision, Dispatch):
                reused = decision.warm_pool_id
                taken = available(self.pools[reused]) if reused is not None else None
                self.apply(dispatched(decision, t, taken), t)
        if self.past is not None:
            listed = [(name, unit) for name, share in self.shares.items()
                      for unit in share.units()]
            self.past.record(t, self.borrowed_counts(), listed)
        return result, state


def available(pool: Pool) -> AvailablePool:
    return AvailablePool(pool.id, pool.owner.name, pool.available_since, pool.expires_at,
                         pool.chain_started_at)


def count(job: SimJob, failed_count: int | None, preempted_count: int | None) -> None:
    if failed_count is not None:
        job.failed_count = failed_count
    if preempted_count is not None:
        job.preempted_count = preempted_count


