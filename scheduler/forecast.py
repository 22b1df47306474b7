"""Estimated start: when each waiting job is expected to be placed (docs/semantics.md 8).

The forecast runs the same engine the live system runs, forward from a live snapshot: the
simulator's World applies scheduler.schedule's decisions through scheduler.effects, and
the lifecycle's start delays, grace periods and warm-pool expiries, with no further
arrivals.  Each job's runtime is an estimate (`Runtime`, with its basis stated); a job
whose runtime is unknown never ends in the forecast, so what waits only for it gets no
estimate.  Time jumps from event to event (the next end, grace end, start or expiry), and a
second in which nothing can change costs nothing.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .decisions import Dispatch, Preempt
from .lifecycle import Failure, Outcome, PoolStatus, WorkEnd
from .min_runtime import min_runtime_ends_at, min_runtime_of
from .model import Job, JobStatus, Snapshot, WarmPool
from .past_usage import PastUsage
from .simulate.records import Attempt, Pool, SimJob
from .simulate.scenario import JobSpec, Scenario
from .simulate.world import END, RUNNING, STARTING, WAKE, World

# A job with an unknown runtime ends after this many seconds, i.e. never: the forecast
# stops before it.  Every real event comes before it (keep-alives are at most an hour, a
# pool's lifetime 28 days).
NEVER = 10**12
HORIZON = NEVER // 2  # an event this far ahead is one of those never-ending jobs' ends
RECENT_RUNS = 5  # how many of the share's last runs of a name the median is taken over
NAMED = 3  # how many ending jobs a basis names before "and N more"


@dataclass(frozen=True, slots=True)
class Runtime:
    """How long a job's attempt is expected to run once RUNNING, and why (None: unknown)."""

    seconds: float | None
    basis: str

    def __post_init__(self) -> None:
        if self.seconds is not None and not self.seconds >= 0:
            raise ValueError(f"a runtime must be a non-negative number, not {self.seconds!r}")


UNKNOWN = Runtime(None, "runtime unknown")


@dataclass(frozen=True, slots=True)
class JobOutlook:
    """What the forecast needs about a job beyond the engine's Job: its runtime, its
    keep-alive (a warm pool it leaves may be reused) and the name people know it by."""

    runtime: Runtime = UNKNOWN
    keep_alive_seconds: int = 0
    name: str | None = None


@dataclass(frozen=True, slots=True)
class Estimate:
    """`start_at` is when the job is expected to be placed (engine seconds), None when it
    cannot be known; `basis` says what it waits for."""

    start_at: float | None
    basis: str


@dataclass(slots=True)
class _Step:
    """What happened at one forecast second before its cycle: the ends that freed
    capacity, by job, and the warm pools that ended."""

    ended: list[str] = field(default_factory=list)
    pools_ended: int = 0
    # `when_they_end` of the ends, per instance type of the job placed: made once per
    # second, not once per job placed (a second may place hundreds after hundreds end).
    said: dict[str, str] = field(default_factory=dict)


def recent_runtime(
    runs: Sequence[float], max_runtime_seconds: float | None, name: str
) -> Runtime:
    """The runtime estimate of a command job: the median of the share's last runs of jobs
    with the same name (newest first in `runs`), else its max runtime, else unknown."""
    recent = [float(r) for r in runs[:RECENT_RUNS]]
    if recent:
        runs_word = "run" if len(recent) == 1 else "runs"
        return Runtime(statistics.median(recent),
                       f"median of the share's last {len(recent)} {runs_word} of {name!r}")
    if max_runtime_seconds is not None:
        return Runtime(float(max_runtime_seconds), f"its max runtime, {_span(max_runtime_seconds)}")
    return UNKNOWN


def forecast(snapshot: Snapshot, outlooks: Mapping[str, JobOutlook]) -> dict[str, Estimate]:
    """An Estimate for every queued job of `snapshot` (a job missing from `outlooks` has
    an unknown runtime)."""
    return _Forecast(snapshot, outlooks).run()


class _Forecast:
    def __init__(self, snapshot: Snapshot, outlooks: Mapping[str, JobOutlook]) -> None:
        self.now = snapshot.now
        self.outlooks = outlooks
        scenario = Scenario(name="forecast", tick_seconds=1, until=NEVER,
                            policy=snapshot.policy, capacity=snapshot.capacity,
                            shares=snapshot.shares)
        self.world = World(scenario)
        self.waiting = [job.id for job in snapshot.jobs if job.status.queued]
        self.wanted = set(self.waiting)
        self.grace_ends: dict[str, int] = {}
        self.placed: dict[str, Estimate] = {}
        for job in snapshot.jobs:
            self.seed_job(job)
        for number, pool in enumerate(snapshot.warm_pools, start=1):
            self.seed_pool(pool, number)
        self.world.recount()  # the jobs were put in directly, not admitted
        self.seed_past(snapshot)

    # Seeding the world from the live snapshot ------------------------------------------

    def seed_past(self, snapshot: Snapshot) -> None:
        """The decayed past borrowing as the snapshot gives it at now (forecast second 0),
        with each share's borrowed count of now held from there (semantics.md 5.4)."""
        book = self.world.past
        if book is None:
            return
        counts = self.world.borrowed_counts()
        for share, unit, mean in snapshot.past_borrowed:
            book.entries[share, unit] = PastUsage(mean, 0, counts.get((share, unit), 0))
        for pair, count in counts.items():
            if pair not in book.entries:
                book.entries[pair] = PastUsage(0.0, 0, count)

    def outlook(self, job_id: str) -> JobOutlook:
        return self.outlooks.get(job_id) or JobOutlook()

    def name(self, job_id: str) -> str:
        return self.outlook(job_id).name or job_id

    def at(self, engine_time: float | None) -> int:
        """An engine time as forecast seconds after now (the World counts whole seconds)."""
        return 0 if engine_time is None else math.floor(engine_time - self.now)

    def seed_job(self, job: Job) -> None:
        outlook = self.outlook(job.id)
        seconds = outlook.runtime.seconds
        duration = NEVER if seconds is None else math.ceil(seconds)
        spec = JobSpec(
            name=job.id, quota_share=job.quota_share, priority=job.priority,
            instance_type=job.instance_type, instance_count=job.instance_count,
            keep_alive_seconds=outlook.keep_alive_seconds, match=job.match, retry_attempts=1,
            preemption_retries=job.preemptions_left, max_runtime_seconds=NEVER,
            duration_seconds=duration, fail_at_seconds=None, failure=Failure.ALGORITHM_ERROR,
            checkpoint_seconds=None, min_runtime_seconds=job.min_runtime_seconds,
        )
        sim = SimJob(spec, job.sequence, 0, job.priority, outlook.keep_alive_seconds,
                     status=job.status, instances=job.instances)
        if job.not_before is not None and job.not_before > self.now:
            sim.not_before = math.ceil(job.not_before - self.now)
            self.world.at(sim.not_before, WAKE, job.sequence, sim, 0)
            self.grace_ends[job.id] = sim.not_before
        self.world.jobs[job.id] = sim
        self.world.live[job.id] = sim
        if job.status.active:
            self.seed_attempt(job, sim, duration)

    def seed_attempt(self, job: Job, sim: SimJob, duration: int) -> None:
        scheduled = self.at(job.dispatched_at)
        attempt = Attempt(1, scheduled, max(scheduled, 0), 0, False)
        sim.attempts.append(attempt)
        if job.status is JobStatus.RUNNING:
            attempt.started_at = self.at(job.started_at)
            # An overdue job is expected to end at once: its estimate was short.
            end = max(attempt.started_at + duration, 0)
            attempt.work_end = WorkEnd(end, Outcome.SUCCEEDED)
            self.world.at(end, END, job.sequence, sim, 1)
            share = self.world.shares.get(job.quota_share)
            shield_ends = min_runtime_ends_at(job, share) if share is not None else None
            if shield_ends is not None and shield_ends > self.now:
                # From then on it may be preempted: a cycle runs (semantics.md 5.8).
                self.world.at(math.ceil(shield_ends - self.now), WAKE, job.sequence, sim, 0)
        elif job.status is JobStatus.STARTING:
            unit = self.world.capacity.get(job.instance_type)
            delay = unit.cold_start_seconds if unit is not None else 0
            self.world.at(max(scheduled + delay, 0), RUNNING, job.sequence, sim, 1)
        else:
            self.world.at(0, STARTING, job.sequence, sim, 1)

    def seed_pool(self, warm: WarmPool, number: int) -> None:
        owner = self.world.jobs.get(warm.owner_job) or self.absent_owner(warm)
        pool = Pool(f"wp-{number}", warm.quota_share, warm.instance_type, warm.instance_count,
                    warm.match, warm.instances, self.at(warm.chain_started_at), owner,
                    PoolStatus.AVAILABLE, self.at(warm.available_since),
                    math.ceil(warm.expires_at - self.now))
        self.world.pools[pool.id] = pool
        self.world.pool_seq = number
        self.world.arm_pool(pool)

    def absent_owner(self, warm: WarmPool) -> SimJob:
        """The finished job whose pool this is: only its priority and order matter."""
        spec = JobSpec(warm.owner_job, warm.quota_share, warm.priority, warm.instance_type,
                       warm.instance_count, 0, warm.match, 1, None, NEVER, NEVER, None,
                       Failure.ALGORITHM_ERROR, None)
        owner = SimJob(spec, warm.sequence, 0, warm.priority, 0, status=JobStatus.SUCCEEDED)
        self.world.jobs[warm.owner_job] = owner  # its pool's events name it
        return owner

    # Running forward --------------------------------------------------------------------

    def run(self) -> dict[str, Estimate]:
        world, t = self.world, 0
        while True:
            world.changed = False
            step = self.advance(t)
            result, _ = world.cycle(t)
            self.record(t, step, result.decisions)
            world.advance(t)  # starts with no delay become RUNNING at t
            if len(self.placed) == len(self.waiting):
                break
            later = world.next_timer()
            candidates = [t + 1] if world.changed else []
            if later is not None and later < HORIZON:
                candidates.append(max(t + 1, later))
            if not candidates:
                break
            t = min(candidates)
        return {job: self.placed.get(job) or self.unplaced(job) for job in self.waiting}

    def advance(self, t: int) -> _Step:
        """The lifecycle phase at `t`, noting which jobs stopped holding instances."""
        world = self.world
        holding = list(world.active_jobs)
        pools = len(world.pools)
        world.advance(t)
        step = _Step(pools_ended=max(0, pools - len(world.pools)))
        step.ended = [name for name in holding if name not in world.active_jobs]
        return step

    def record(self, t: int, step: _Step, decisions: Sequence[object]) -> None:
        victims: dict[str, list[str]] = {}
        for decision in decisions:
            if isinstance(decision, Preempt):
                victims.setdefault(decision.preempted_by, []).append(decision.job_id)
        for decision in decisions:
            if not isinstance(decision, Dispatch) or decision.job_id in self.placed:
                continue
            if decision.job_id not in self.wanted:
                continue
            basis = self.basis(t, decision, step, victims.get(decision.job_id, []))
            self.placed[decision.job_id] = Estimate(self.now + t, basis)

    # Saying why ---------------------------------------------------------------------------

    def basis(self, t: int, decision: Dispatch, step: _Step, victims: list[str]) -> str:
        job = self.world.jobs[decision.job_id]
        parts = []
        if step.ended:
            parts.append(self.ends_before(step, job.spec.instance_type))
        if victims:
            parts.append("by preempting " + self.listed(victims))
            if any(self.shield_ended(name, t) for name in victims):
                parts.append("once their minimum runtime ends" if len(victims) > 1
                             else "once its minimum runtime ends")
        if decision.warm_pool_id is not None:
            parts.append("on a warm pool")
        if not parts and t == 0:
            return "at the next cycle: capacity is free now"
        if not parts and step.pools_ended:
            parts.append("when a warm pool ends")
        if not parts and self.grace_ends.get(decision.job_id) == t:
            parts.append("when its preemption grace ends")
        return ", ".join(parts) or "as capacity frees up"

    def ends_before(self, step: _Step, instance_type: str) -> str:
        """What a job of `instance_type` placed after the step's ends waited for: the ends
        of its type, or all of them when none was of its type."""
        said = step.said.get(instance_type)
        if said is None:
            same_type = [name for name in step.ended
                         if self.world.jobs[name].spec.instance_type == instance_type]
            said = step.said[instance_type] = self.when_they_end(same_type or step.ended)
        return said

    def shield_ended(self, name: str, t: int) -> bool:
        """Whether the victim's minimum runtime ended just now (it was what the job waited
        for: semantics.md 5.8)."""
        victim = self.world.jobs[name]
        share = self.world.shares.get(victim.spec.quota_share)
        if share is None or share.min_runtime_seconds == 0 or not victim.attempts:
            return False
        started = victim.current.started_at
        if started is None:
            return False
        return started + min_runtime_of(victim.as_engine_job(), share) == t

    def when_they_end(self, names: list[str]) -> str:
        ordered = sorted(names, key=lambda name: self.world.jobs[name].sequence)
        runtimes = "; ".join(f"{self.name(n)}: {self.outlook(n).runtime.basis}"
                             for n in ordered[:NAMED])
        verb = "ends" if len(ordered) == 1 else "end"
        return f"when {self.listed(ordered)} {verb} ({runtimes})"

    def listed(self, names: list[str]) -> str:
        shown = [self.name(n) for n in names[:NAMED]]
        more = len(names) - len(shown)
        text = ", ".join(shown)
        return f"{text} and {more} more" if more > 0 else text

    def unplaced(self, job_id: str) -> Estimate:
        """A job the forecast never placed: it waits for a job whose runtime is unknown
        (which never ends in the forecast), or it does not fit at all."""
        job = self.world.jobs[job_id]
        unknown = sorted((other for other in self.world.active_jobs.values()
                          if other.spec.duration_seconds >= NEVER),
                         key=lambda other: other.sequence)
        if not unknown:
            return Estimate(None, "does not fit with the current limits and capacity")
        same_type = [o.name for o in unknown if o.spec.instance_type == job.spec.instance_type]
        blocking = same_type or [o.name for o in unknown]
        return Estimate(None, f"waits for {self.listed(blocking)}, whose runtime is unknown")


def starts_in(seconds: float) -> str:
    """How far off a start is, in round words."""
    if seconds < 30:
        return "starts in a moment"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"starts in about {max(minutes, 1)} min"
    hours = round(seconds / 3600)
    if hours < 48:
        return f"starts in about {hours} h"
    return f"starts in about {round(seconds / 86400)} days"


def _span(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{int(seconds // 3600)} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{int(seconds // 60)} min"
    return f"{seconds:g} s"
