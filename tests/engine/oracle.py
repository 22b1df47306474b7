"""A slow, obviously-correct oracle for the accounting of docs/semantics.md 3, for property tests.

Every figure is recomputed from scratch, by brute force, from who holds what: nothing is
kept as a running total and nothing is shared with the engine's own accounting (this module
must not import scheduler.quota, scheduler.state or scheduler.cycle; only the frozen model
and decision types).  Speed does not matter here; being easy to check against semantics.md does.

A `World` is one instant: capacity, shares, the active jobs and the Available warm pools.
`fits` places a job in a copy of the world and recomputes everything; `replay` walks a
cycle's decisions (or its trace, with the placements it withdrew) and gives the world just
before each placement, and the world after.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from scheduler.decisions import (
    CycleResult,
    Decision,
    Dispatch,
    PendingReason,
    Preempt,
    SetPendingReason,
    TerminateWarmPool,
    TraceStep,
    Withdraw,
)
from scheduler.model import Job, JobStatus, QuotaShare, Snapshot, Strategy, WarmPool

UNLIMITED = -1


class ReplayError(AssertionError):
    """A cycle's decisions do not make sense against the snapshot they came from."""


# The world at one instant ------------------------------------------------------------


@dataclass(frozen=True)
class World:
    """Who holds what: capacity per unit, shares, active jobs and Available warm pools."""

    now: float
    capacity: Mapping[str, int]
    shares: Mapping[str, QuotaShare]
    active: Mapping[str, Job]
    pools: Mapping[str, WarmPool]

    def holders(self) -> list[Job | WarmPool]:
        """Everything that holds instances (semantics.md 3: active jobs and Available pools)."""
        return [*self.active.values(), *self.pools.values()]

    def units(self) -> set[str]:
        units = set(self.capacity)
        units |= {unit for share in self.shares.values() for unit, _ in share.limits}
        return units | {holder.instance_type for holder in self.holders()}


def world_of(snapshot: Snapshot) -> World:
    """The world a snapshot describes."""
    return World(
        now=snapshot.now,
        capacity={unit.name: unit.max_capacity for unit in snapshot.capacity},
        shares={share.name: share for share in snapshot.shares},
        active={job.id: job for job in snapshot.jobs if job.status.active},
        pools={pool.id: pool for pool in snapshot.warm_pools},
    )


def without(world: World, job_ids: Iterable[str] = (), pool_ids: Iterable[str] = ()) -> World:
    """The world once the given jobs and pools no longer hold anything."""
    gone_jobs, gone_pools = set(job_ids), set(pool_ids)
    return dataclasses.replace(
        world,
        active={i: job for i, job in world.active.items() if i not in gone_jobs},
        pools={i: pool for i, pool in world.pools.items() if i not in gone_pools},
    )


def placed(
    world: World, job: Job, reuse: WarmPool | None, instances: tuple[int, ...] = ()
) -> World:
    """The world once `job` holds instances: the reused pool's own, or `instances` (which a
    hypothetical placement may leave empty: accounting counts instance_count)."""
    held = reuse.instances if reuse is not None else instances
    job = dataclasses.replace(job, status=JobStatus.SCHEDULED, instances=held)
    pools = {i: pool for i, pool in world.pools.items() if reuse is None or i != reuse.id}
    return dataclasses.replace(world, active={**world.active, job.id: job}, pools=pools)


# docs/semantics.md 3, per capacity unit --------------------------------------------------------


def borrow_cap(share: QuotaShare, unit: str) -> int | None:
    """B(s,u) = floor(L × borrow_limit / 100); None when unlimited (−1); a share that is
    not LEND_AND_BORROW may borrow nothing.  A LEND_AND_BORROW share with no borrow_limit
    reads as docs/semantics.md 2's default, −1."""
    if share.strategy is not Strategy.LEND_AND_BORROW:
        return 0
    percent = UNLIMITED if share.borrow_limit is None else share.borrow_limit
    if percent == UNLIMITED:
        return None
    return (share.limit(unit) * percent) // 100


@dataclass(frozen=True)
class ShareFigures:
    """One share on one unit: U(s), L(s), own, borrowed, idle and B(s)."""

    strategy: Strategy
    used: int
    limit: int
    cap: int | None

    @property
    def own(self) -> int:
        return min(self.used, self.limit)

    @property
    def borrowed(self) -> int:
        return max(0, self.used - self.limit)

    @property
    def idle(self) -> int:
        return max(0, self.limit - self.used)

    @property
    def over_cap(self) -> int:
        """How far borrowed(s) exceeds what the share may borrow (≤ 0 when within it)."""
        return 0 if self.cap is None else self.borrowed - self.cap


@dataclass(frozen=True)
class UnitFigures:
    """One unit: C, each share's figures, free, unowned F and the borrow pool P."""

    capacity: int
    shares: Mapping[str, ShareFigures]

    @property
    def free(self) -> int:
        return self.capacity - sum(s.used for s in self.shares.values())

    @property
    def unowned(self) -> int:
        return self.capacity - sum(s.limit for s in self.shares.values())

    @property
    def borrow_pool(self) -> int:
        lendable = sum(s.idle for s in self.shares.values() if s.strategy is not Strategy.RESERVE)
        return self.unowned + lendable - sum(s.borrowed for s in self.shares.values())

    @property
    def reserved_idle(self) -> int:
        """Σ idle(s) over RESERVE shares: capacity nobody else may use."""
        return sum(s.idle for s in self.shares.values() if s.strategy is Strategy.RESERVE)


def share_usage(world: World, share: str, unit: str) -> int:
    """U(s): instances held on `unit` by the share's active jobs and Available pools."""
    return sum(
        holder.instance_count
        for holder in world.holders()
        if holder.quota_share == share and holder.instance_type == unit
    )


def figures(world: World, unit: str) -> UnitFigures:
    """Every figure of docs/semantics.md 3 for `unit`, counted from scratch."""
    shares = {
        name: ShareFigures(
            strategy=share.strategy,
            used=share_usage(world, name, unit),
            limit=share.limit(unit),
            cap=borrow_cap(share, unit),
        )
        for name, share in world.shares.items()
    }
    return UnitFigures(world.capacity.get(unit, 0), shares)


# Placement ---------------------------------------------------------------------------


def matching_pools(world: World, job: Job) -> list[WarmPool]:
    """The share's Available pools the job matches, best first (docs/semantics.md 6, Matching):
    soonest expiry, then Available first, then left by the earlier submission."""
    pools = [
        pool
        for pool in world.pools.values()
        if pool.quota_share == job.quota_share
        and pool.instance_type == job.instance_type
        and pool.instance_count == job.instance_count
        and pool.match == job.match
    ]
    return sorted(pools, key=lambda p: (p.expires_at, p.available_since, p.sequence, p.id))


def matching_pool(world: World, job: Job) -> WarmPool | None:
    pools = matching_pools(world, job)
    return pools[0] if pools else None


def placement_allowed(before: UnitFigures, after: UnitFigures, share: str) -> bool:
    """docs/semantics.md 3, fits: after the placement free ≥ 0; P ≥ 0 if the placement lowered P;
    and a share above its limit is LEND_AND_BORROW with borrowed ≤ B."""
    if after.free < 0:
        return False
    if after.borrow_pool < before.borrow_pool and after.borrow_pool < 0:
        return False
    mine = after.shares[share]
    if mine.used > mine.limit:
        return mine.strategy is Strategy.LEND_AND_BORROW and mine.over_cap <= 0
    return True


def fits(world: World, job: Job) -> bool:
    """Whether `job` fits as things stand, reusing a matching pool of its share if there is
    one: place it in a copy of the world and recompute everything."""
    after = placed(world, job, matching_pool(world, job))
    unit = job.instance_type
    return placement_allowed(figures(world, unit), figures(after, unit), job.quota_share)


def in_quota_after(world: World, job: Job) -> bool:
    """Whether U(s) ≤ L(s) once `job` is placed (it fits in quota rather than borrows)."""
    after = placed(world, job, matching_pool(world, job))
    share = world.shares[job.quota_share]
    return share_usage(after, share.name, job.instance_type) <= share.limit(job.instance_type)


def in_quota_eligible(world: World, job: Job) -> bool:
    """semantics.md 5.3: in quota after placement, reusing a matching pool, or else counting the
    share's pools on the unit (none of which it matches) as gone."""
    if matching_pool(world, job) is not None:
        return in_quota_after(world, job)
    own_pools = [
        pool.id
        for pool in world.pools.values()
        if pool.quota_share == job.quota_share and pool.instance_type == job.instance_type
    ]
    return in_quota_after(without(world, pool_ids=own_pools), job)


# docs/semantics.md 4: misconfiguration and pending reasons --------------------------------------


def most_holdable(share: QuotaShare, unit: str) -> int | None:
    """L + B for LEND_AND_BORROW (None: unlimited), L otherwise."""
    cap = borrow_cap(share, unit)
    return None if cap is None else share.limit(unit) + cap


def misconfiguration(world: World, job: Job) -> PendingReason | None:
    """Reasons 1–2 of docs/semantics.md 4, or None when the job could some day be placed."""
    unit = job.instance_type
    if unit not in world.capacity or job.instance_count > world.capacity[unit]:
        return PendingReason.SERVICE_ENVIRONMENT_MAX_RESOURCE
    most = most_holdable(world.shares[job.quota_share], unit)
    if most is not None and job.instance_count > most:
        return PendingReason.QUOTA_MANAGEMENT_LIMIT_EXCEEDED
    return None


def pending_reason(world: World, job: Job) -> PendingReason:
    """The first reason of semantics.md 4 that applies, as the engine interprets it: in quota (or
    unable to borrow) → waiting for capacity; else beyond B → borrow limit; else not
    fitting → no idle capacity to borrow; else waiting for capacity."""
    misconfigured = misconfiguration(world, job)
    if misconfigured is not None:
        return misconfigured
    share = world.shares[job.quota_share]
    if in_quota_eligible(world, job) or share.strategy is not Strategy.LEND_AND_BORROW:
        return PendingReason.WAITING_FOR_CAPACITY
    after = figures(placed(world, job, matching_pool(world, job)), job.instance_type)
    if after.shares[share.name].over_cap > 0:
        return PendingReason.BORROW_LIMIT_REACHED
    if not fits(world, job):
        return PendingReason.NO_IDLE_CAPACITY_TO_BORROW
    return PendingReason.WAITING_FOR_CAPACITY


def queue_order(job: Job) -> tuple[int, int, str]:
    """docs/semantics.md 5.2: priority high first, then submission order."""
    return (-job.priority, job.sequence, job.id)


# docs/semantics.md 3's invariants --------------------------------------------------------------


def invariant_violations(world: World, *, numbers_within_capacity: bool = True) -> list[str]:
    """Every way `world` breaks docs/semantics.md 3's invariants, as sentences (empty: none)."""
    problems: list[str] = []
    for unit in sorted(world.units()):
        problems += _instance_problems(world, unit, numbers_within_capacity)
        problems += _accounting_problems(unit, figures(world, unit))
    return problems


def _instance_problems(world: World, unit: str, within_capacity: bool) -> list[str]:
    held = Counter(
        number
        for holder in world.holders()
        if holder.instance_type == unit
        for number in holder.instances
    )
    problems = [f"{unit}: instance {n} held {k} times" for n, k in held.items() if k > 1]
    if within_capacity:
        capacity = world.capacity.get(unit, 0)
        problems += [f"{unit}: instance {n} outside 0..{capacity - 1}" for n in held
                     if not 0 <= n < capacity]
    return problems


def _accounting_problems(unit: str, unit_figures: UnitFigures) -> list[str]:
    problems = []
    if unit_figures.free < 0:
        problems.append(f"{unit}: free = {unit_figures.free} < 0")
    if unit_figures.borrow_pool < 0:
        problems.append(f"{unit}: borrow pool P = {unit_figures.borrow_pool} < 0")
    if unit_figures.free < unit_figures.reserved_idle:
        problems.append(
            f"{unit}: free = {unit_figures.free} < RESERVE idle {unit_figures.reserved_idle}"
        )
    for name, share in sorted(unit_figures.shares.items()):
        if share.used > share.limit and share.strategy is not Strategy.LEND_AND_BORROW:
            problems.append(f"{unit}: {share.strategy.value} share {name} borrows")
        elif share.over_cap > 0:
            problems.append(f"{unit}: {name} borrows {share.borrowed} > B = {share.cap}")
    return problems


# Replaying a cycle -------------------------------------------------------------------

Victim = Preempt | TerminateWarmPool | Withdraw


@dataclass(frozen=True)
class Placement:
    """One Dispatch with its victims, and the world just before the victims were taken.

    A victim may be a job placed earlier in the cycle (Withdraw); a pool that job had
    taken is Available again (`restored`) until its own TerminateWarmPool."""

    dispatch: Dispatch
    victims: tuple[Victim, ...]
    before: World
    job: Job
    restored: Mapping[str, tuple[str, WarmPool]] = field(default_factory=dict)

    @property
    def victim_jobs(self) -> list[str]:
        return [v.job_id for v in self.victims if isinstance(v, Preempt | Withdraw)]

    @property
    def victim_pools(self) -> list[str]:
        return [v.pool_id for v in self.victims if isinstance(v, TerminateWarmPool)]

    def reuse(self) -> WarmPool | None:
        pool_id = self.dispatch.warm_pool_id
        return None if pool_id is None else self.before.pools[pool_id]

    def pool(self, pool_id: str) -> WarmPool:
        return self.before.pools.get(pool_id) or self.restored[pool_id][1]

    def without_victims(self, *, but: Victim | None = None) -> World:
        """The world before the placement with every victim gone (but `but`, if given)."""
        victims = [v for v in self.victims if v is not but]
        jobs = [v.job_id for v in victims if isinstance(v, Preempt | Withdraw)]
        pools = [v.pool_id for v in victims if isinstance(v, TerminateWarmPool)]
        world = without(self.before, jobs, pools)
        back = {
            pool_id: pool for pool_id, (withdrawn, pool) in self.restored.items()
            if withdrawn in jobs and pool_id not in pools
        }
        return dataclasses.replace(world, pools={**world.pools, **back})


@dataclass(frozen=True)
class Replay:
    housekept: World
    placements: tuple[Placement, ...]
    after: World


def replay(snapshot: Snapshot, result: CycleResult | Iterable[Decision | TraceStep]) -> Replay:
    """Walk the decisions (or a trace) in order: housekeeping, then each placement's victims
    and its Dispatch; raise ReplayError on a step the state cannot take."""
    steps = result.decisions if isinstance(result, CycleResult) else tuple(result)
    queued = {job.id: job for job in snapshot.jobs if job.status.queued}
    world = world_of(snapshot)
    housekept: World | None = None
    placements: list[Placement] = []
    reused: dict[str, WarmPool] = {}  # by job: the pool its placement took
    restored: dict[str, tuple[str, WarmPool]] = {}
    victims: list[Victim] = []
    orphans: list[Victim] = []  # taken for a placement that was withdrawn later
    before = world
    for decision in steps:
        if isinstance(decision, SetPendingReason):
            continue
        if isinstance(decision, TerminateWarmPool) and decision.by_job is None:
            _expect(not placements and not victims, f"late housekeeping {decision}")
            world = _terminate(world, decision.pool_id)
            continue
        if housekept is None:
            housekept = world
        if victims and _taker(victims[0]) != _taker(decision):
            orphans, victims = orphans + victims, []
        if not victims:
            before, restored = world, {}
        if isinstance(decision, Preempt):
            _expect(decision.job_id in world.active, f"preempts a job not active: {decision}")
            world, victims = without(world, job_ids=[decision.job_id]), [*victims, decision]
        elif isinstance(decision, Withdraw):
            world = _withdraw(world, decision, placements, reused, restored)
            victims = [*victims, decision]
        elif isinstance(decision, TerminateWarmPool):
            world, victims = _terminate(world, decision.pool_id), [*victims, decision]
        elif isinstance(decision, Dispatch):
            placement = _placement(before, victims, decision, queued, restored)
            world = _dispatched(world, placement)
            placements.append(placement)
            if placement.reuse() is not None:
                reused[decision.job_id] = placement.before.pools[decision.warm_pool_id or ""]
            victims = []
    withdrawn = {_taker(victim) for victim in orphans + victims}
    placed = {placement.dispatch.job_id for placement in placements}
    _expect(not withdrawn & placed, f"victims precede no Dispatch of {withdrawn & placed}")
    return Replay(housekept or world, tuple(placements), world)


def _taker(step: Victim | Dispatch) -> str | None:
    """The job a step makes room for, or places."""
    if isinstance(step, Preempt):
        return step.preempted_by
    if isinstance(step, Dispatch):
        return step.job_id
    return step.by_job


def _withdraw(
    world: World,
    step: Withdraw,
    placements: list[Placement],
    reused: Mapping[str, WarmPool],
    restored: dict[str, tuple[str, WarmPool]],
) -> World:
    """Undo a placement made earlier in the cycle; a pool it had taken is Available again."""
    _expect(any(p.dispatch.job_id == step.job_id for p in placements),
            f"withdraws {step.job_id}, which was not placed in this cycle")
    _expect(step.job_id in world.active, f"withdraws {step.job_id}, which holds nothing")
    world = without(world, job_ids=[step.job_id])
    pool = reused.get(step.job_id)
    if pool is None:
        return world
    restored[pool.id] = (step.job_id, pool)
    return dataclasses.replace(world, pools={**world.pools, pool.id: pool})


def apply(snapshot: Snapshot, result: CycleResult | Iterable[Decision | TraceStep]) -> World:
    """The world after the cycle's decisions."""
    return replay(snapshot, result).after


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise ReplayError(message)


def _terminate(world: World, pool_id: str) -> World:
    _expect(pool_id in world.pools, f"terminates pool {pool_id}, which is not Available")
    return without(world, pool_ids=[pool_id])


def _placement(
    before: World,
    victims: list[Victim],
    dispatch: Dispatch,
    queued: Mapping[str, Job],
    restored: Mapping[str, tuple[str, WarmPool]],
) -> Placement:
    _expect(dispatch.job_id in queued, f"dispatches {dispatch.job_id}, which is not queued")
    for victim in victims:
        by = victim.preempted_by if isinstance(victim, Preempt) else victim.by_job
        _expect(by == dispatch.job_id, f"{victim} precedes the Dispatch of {dispatch.job_id}")
    return Placement(dispatch, tuple(victims), before, queued[dispatch.job_id], dict(restored))


def _dispatched(world: World, placement: Placement) -> World:
    dispatch, job = placement.dispatch, placement.job
    _expect(job.id not in world.active, f"dispatches {job.id} twice")
    _expect(len(dispatch.instances) == job.instance_count, f"wrong instance count: {dispatch}")
    reuse = None
    if dispatch.warm_pool_id is not None:
        _expect(dispatch.warm_pool_id in world.pools, f"reuses a pool not Available: {dispatch}")
        reuse = world.pools[dispatch.warm_pool_id]
        _expect(reuse.instances == dispatch.instances, f"not the pool's instances: {dispatch}")
    return placed(world, job, reuse, dispatch.instances)
