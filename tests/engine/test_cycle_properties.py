"""Property tests of one scheduling cycle, checked against a brute-force oracle.

Hypothesis draws small random snapshots of three kinds: consistent (docs/semantics.md 3's invariants
hold, as they do when no configuration changed), evolved (a consistent one a cycle later, so
capacity is lent out and reasons are stored, as in a run) and broken (a limit, a capacity, a
strategy or a borrow limit changed under running jobs).  Each property names the semantics.md rule
it checks and recomputes the accounting from scratch with tests/engine/oracle.py, which shares
no code with the engine's scheduler.quota, scheduler.state or scheduler.cycle.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from typing import TypeGuard, TypeVar
from unittest import mock

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from scheduler import (
    CapacityUnit,
    CycleResult,
    Dispatch,
    Job,
    JobStatus,
    PendingReason,
    Policy,
    PoolTermination,
    Preempt,
    PreemptionKind,
    QuotaShare,
    SetPendingReason,
    ShareState,
    Snapshot,
    Strategy,
    TerminateWarmPool,
    WarmPool,
    WarmPoolMatch,
    schedule,
)
from scheduler import cycle as cycle_module
from scheduler.cycle import trace
from scheduler.decisions import Withdraw
from tests.engine import oracle
from tests.engine.oracle import Placement, Replay, World, figures, world_of

NOW = 1_000.0
LIFETIME = Policy().warm_pool_max_lifetime_seconds
MATCHES = (WarmPoolMatch(), WarmPoolMatch(role="etl"))
PRIORITIES = st.integers(0, 3)  # few values, so that ties happen
# Skewed toward what makes cycles interesting: room for several jobs, small jobs, busy queues.
CAPACITIES = st.integers(0, 8) | st.integers(4, 8)
INSTANCE_COUNTS = st.integers(1, 4) | st.just(1)
UNIT_COUNTS = st.integers(1, 3) | st.just(1)
STRATEGIES = st.sampled_from(Strategy) | st.just(Strategy.LEND_AND_BORROW)
JOB_COUNTS = st.integers(0, 12) | st.integers(6, 12)
POOL_COUNTS = st.integers(0, 3) | st.integers(1, 3)
CHAIN_AGES = st.sampled_from([100, 500]) | st.sampled_from([100, LIFETIME, LIFETIME + 50])
BORROW_LIMITS = st.one_of(st.none(), st.just(-1), st.integers(0, 300))  # LEND_AND_BORROW
SHARE_STATES = st.sampled_from(ShareState)
QUEUED_STATUSES = st.sampled_from([JobStatus.SUBMITTED, JobStatus.RUNNABLE])
ACTIVE_STATUSES = st.sampled_from([JobStatus.SCHEDULED, JobStatus.STARTING, JobStatus.RUNNING])
NOT_BEFORES = st.sampled_from([None, NOW - 5, NOW, NOW + 20])  # NOW + 20: still in grace
PREEMPTIONS_LEFT = st.sampled_from([None, 0, 1])
STORED_REASONS = st.sampled_from(PendingReason)
JOB_MATCHES = st.sampled_from(MATCHES)
DISPATCH_AGES = st.sampled_from([5, 10, 50])
START_DELAYS = st.sampled_from([0, 5])
POOL_AGES = st.sampled_from([0, 5, 20])
KEEP_ALIVES = st.sampled_from([5, 15, 60])
GRACES = st.sampled_from([0, 30])

D = TypeVar("D", Dispatch, Preempt, SetPendingReason)

PROPERTY = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
# For the simple timing rules (grace, housekeeping): fewer examples keep the file fast.
QUICK_PROPERTY = settings(PROPERTY, max_examples=150)


# Strategies: consistent snapshots ----------------------------------------------------


@st.composite
def capacity_units(draw: st.DrawFn) -> tuple[CapacityUnit, ...]:
    count = draw(UNIT_COUNTS)
    return tuple(CapacityUnit(f"u{i}", draw(CAPACITIES)) for i in range(count))


@st.composite
def quota_shares(draw: st.DrawFn, capacity: tuple[CapacityUnit, ...]) -> tuple[QuotaShare, ...]:
    """1–4 shares whose limits add up to at most each unit's capacity, except now and then
    (a capacity that shrank below the limits)."""
    overcommitted = draw(st.integers(0, 4)) == 0
    allotted: Counter[str] = Counter()
    shares = []
    for i in range(draw(st.integers(1, 4))):
        units = draw(st.lists(st.sampled_from(capacity), min_size=1, unique=True))
        limits = []
        for unit in units:
            room = unit.max_capacity if overcommitted else unit.max_capacity - allotted[unit.name]
            limits.append((unit.name, draw(st.integers(0, max(room, 0)))))
            allotted[unit.name] += limits[-1][1]
        strategy = draw(STRATEGIES)
        shares.append(
            QuotaShare(
                name=f"qs{i}",
                limits=tuple(limits),
                strategy=strategy,
                borrow_limit=draw(BORROW_LIMITS) if strategy.borrows else None,
                in_share_preemption=draw(st.booleans()),
                state=draw(SHARE_STATES),
            )
        )
    return tuple(shares)


@st.composite
def queued_jobs(
    draw: st.DrawFn, job_id: str, sequence: int, shares: tuple[QuotaShare, ...]
) -> Job:
    """A SUBMITTED or RUNNABLE job, maybe in its grace period, maybe with a stored reason."""
    share = draw(st.sampled_from(shares))
    status = draw(QUEUED_STATUSES)
    stored = status is JobStatus.RUNNABLE and draw(st.booleans())
    return Job(
        id=job_id,
        quota_share=share.name,
        priority=draw(PRIORITIES),
        sequence=sequence,
        instance_type=draw(st.sampled_from(share.units())),
        instance_count=draw(INSTANCE_COUNTS),
        status=status,
        match=draw(JOB_MATCHES),
        not_before=draw(NOT_BEFORES),
        preemptions_left=draw(PREEMPTIONS_LEFT),
        pending_code=draw(STORED_REASONS).value if stored else None,
    )


@st.composite
def started(draw: st.DrawFn, job: Job, instances: tuple[int, ...]) -> Job:
    """`job` as an active job on `instances`, with consistent dispatch and start times."""
    status = draw(ACTIVE_STATUSES)
    dispatched_at = NOW - draw(DISPATCH_AGES)
    running = status is JobStatus.RUNNING
    return dataclasses.replace(
        job,
        status=status,
        instances=instances,
        dispatched_at=dispatched_at,
        started_at=dispatched_at + draw(START_DELAYS) if running else None,
        not_before=None,
        pending_code=None,
    )


@st.composite
def warm_pools(
    draw: st.DrawFn,
    pool_id: str,
    sequence: int,
    shares: tuple[QuotaShare, ...],
    jobs: Sequence[Job],
) -> WarmPool:
    """An Available pool, often left by a job like a waiting one (so that it matches), some
    past their keep-alive or their chain's lifetime."""
    waiting = [job for job in jobs if job.status.queued]
    like_a_waiting_job = draw(st.booleans())
    if waiting and like_a_waiting_job:
        like = draw(st.sampled_from(waiting))
        share, unit, count, match = (
            like.quota_share, like.instance_type, like.instance_count, like.match
        )
    else:
        chosen = draw(st.sampled_from(shares))
        share, unit = chosen.name, draw(st.sampled_from(chosen.units()))
        count, match = draw(INSTANCE_COUNTS), draw(JOB_MATCHES)
    available_since = NOW - draw(POOL_AGES)
    return WarmPool(
        id=pool_id,
        quota_share=share,
        owner_job=f"left-{pool_id}",
        instance_type=unit,
        instance_count=count,
        match=match,
        available_since=available_since,
        expires_at=available_since + draw(KEEP_ALIVES),
        chain_started_at=NOW - draw(CHAIN_AGES),
        priority=draw(PRIORITIES),
        sequence=sequence,
    )


def with_holder(world: World, holder: Job | WarmPool) -> World:
    if isinstance(holder, Job):
        return dataclasses.replace(world, active={**world.active, holder.id: holder})
    return dataclasses.replace(world, pools={**world.pools, holder.id: holder})


@st.composite
def free_instances(draw: st.DrawFn, world: World, unit: str, count: int) -> tuple[int, ...] | None:
    """`count` random distinct instance numbers nobody holds, or None if too few are free."""
    held = {n for h in world.holders() if h.instance_type == unit for n in h.instances}
    free = [n for n in range(world.capacity[unit]) if n not in held]
    if len(free) < count:
        return None
    chosen = st.lists(st.sampled_from(free), min_size=count, max_size=count, unique=True)
    return tuple(sorted(draw(chosen)))


@st.composite
def started_if_consistent(draw: st.DrawFn, world: World, job: Job) -> tuple[Job, World]:
    """`job` active on random free instances, and the world with it, if that world keeps
    docs/semantics.md 3's invariants; else `job` still queued and `world` unchanged."""
    instances = draw(free_instances(world, job.instance_type, job.instance_count))
    if instances is None:
        return job, world
    active = draw(started(job, instances))
    grown = with_holder(world, active)
    return (job, world) if oracle.invariant_violations(grown) else (active, grown)


@st.composite
def kept_if_consistent(
    draw: st.DrawFn, world: World, pool: WarmPool
) -> tuple[WarmPool | None, World]:
    """`pool` on random free instances, and the world with it, if that world keeps docs/semantics.md
    3's invariants; else no pool and `world` unchanged."""
    instances = draw(free_instances(world, pool.instance_type, pool.instance_count))
    if instances is None:
        return None, world
    pool = dataclasses.replace(pool, instances=instances)
    grown = with_holder(world, pool)
    return (None, world) if oracle.invariant_violations(grown) else (pool, grown)


@st.composite
def jobs_added(
    draw: st.DrawFn, world: World, sequences: Sequence[int]
) -> tuple[list[Job], World]:
    """Queued jobs, each made active if it keeps the invariants and, half the time, if it
    chose to; the other half (contended) only LEND_AND_BORROW shares' jobs try, borrowing
    what others lend, while every other job waits: that is where reclaims happen."""
    shares = tuple(world.shares.values())
    contended = draw(st.booleans())
    jobs: list[Job] = []
    for i, sequence in enumerate(sequences):
        job = draw(queued_jobs(f"j{i}", sequence, shares))
        borrower = world.shares[job.quota_share].strategy.borrows
        if borrower if contended else draw(st.booleans()):
            job, world = draw(started_if_consistent(world, job))
        jobs.append(job)
    return jobs, world


@st.composite
def pools_added(
    draw: st.DrawFn, world: World, sequences: Sequence[int], jobs: Sequence[Job]
) -> list[WarmPool]:
    """Available pools, each kept only if it keeps the invariants."""
    shares = tuple(world.shares.values())
    pools: list[WarmPool] = []
    for i, sequence in enumerate(sequences):
        pool = draw(warm_pools(f"p{i}", sequence, shares, jobs))
        kept, world = draw(kept_if_consistent(world, pool))
        pools += [kept] if kept is not None else []
    return pools


@st.composite
def consistent_snapshots(draw: st.DrawFn) -> Snapshot:
    """0–12 jobs (queued or active) and 0–3 Available pools, each holder added only while
    docs/semantics.md 3's invariants hold: the state of a run with no configuration change."""
    capacity = draw(capacity_units())
    shares = draw(quota_shares(capacity))
    world = World(NOW, {u.name: u.max_capacity for u in capacity}, {s.name: s for s in shares},
                  {}, {})
    # Limits above a shrunk capacity may leave P < 0 with nothing held: a broken state.
    assume(not oracle.invariant_violations(world))
    job_count, pool_count = draw(JOB_COUNTS), draw(POOL_COUNTS)
    sequences = draw(st.permutations(range(job_count + pool_count)))
    jobs, world = draw(jobs_added(world, sequences[:job_count]))
    pools = draw(pools_added(world, sequences[job_count:], jobs))
    policy = Policy(preemption_grace_seconds=draw(GRACES))
    return Snapshot(NOW, capacity, shares, tuple(jobs), tuple(pools), policy)


# Strategies: snapshots one cycle later -----------------------------------------------


def carried_over(job: Job, result: CycleResult) -> Job | None:
    """`job` as the shell stores it after `result`: dispatched jobs SCHEDULED, preempted
    ones RUNNABLE until their grace ends (or gone, FAILED, on their last retry), waiting
    ones RUNNABLE with the reason they were sent."""
    for decision in result.decisions:
        if isinstance(decision, Dispatch) and decision.job_id == job.id:
            return dataclasses.replace(job, status=JobStatus.SCHEDULED,
                                       instances=decision.instances, dispatched_at=result.now,
                                       not_before=None, pending_code=None)
        if isinstance(decision, Preempt) and decision.job_id == job.id:
            if job.preemptions_left == 0:
                return None
            left = None if job.preemptions_left is None else job.preemptions_left - 1
            job = dataclasses.replace(job, status=JobStatus.RUNNABLE, instances=(),
                                      dispatched_at=None, started_at=None,
                                      not_before=decision.grace_until, preemptions_left=left)
        if isinstance(decision, SetPendingReason) and decision.job_id == job.id:
            job = dataclasses.replace(job, pending_code=decision.reason.value)
    if job.status.queued:
        return dataclasses.replace(job, status=JobStatus.RUNNABLE)
    return job


def owed_shares(world: World) -> tuple[QuotaShare, ...]:
    """Shares with idle capacity on some unit: a job of theirs may have to reclaim it."""
    return tuple(
        share
        for share in world.shares.values()
        if any(figures(world, unit).shares[share.name].idle > 0 for unit in share.units())
    )


@st.composite
def evolved_snapshots(draw: st.DrawFn) -> Snapshot:
    """A consistent snapshot one second and one cycle later, with the engine's decisions
    applied as the shell would and 0–4 jobs submitted since: the states a run reaches, with
    capacity lent out to borrowers and stored pending reasons."""
    first = draw(consistent_snapshots())
    result = schedule(first)
    after = oracle.apply(first, result)
    jobs = [job for job in (carried_over(j, result) for j in first.jobs) if job is not None]
    next_sequence = len(first.jobs) + len(first.warm_pools)  # they hold 0..this-1
    owed = owed_shares(after) or first.shares
    for i in range(draw(st.integers(0, 4))):
        shares = owed if draw(st.booleans()) else first.shares
        jobs.append(draw(queued_jobs(f"k{i}", next_sequence + i, shares)))
    return dataclasses.replace(first, now=first.now + 1, jobs=tuple(jobs),
                               warm_pools=tuple(after.pools.values()))


# Strategies: broken snapshots (a configuration changed under running jobs) -------------


def _replace_share(snapshot: Snapshot, share: QuotaShare) -> Snapshot:
    shares = tuple(share if s.name == share.name else s for s in snapshot.shares)
    return dataclasses.replace(snapshot, shares=shares)


@st.composite
def held_place(draw: st.DrawFn, snapshot: Snapshot) -> tuple[QuotaShare, str]:
    """A share and unit to change, where something is held when anything is: a change
    there is the one that can break an invariant."""
    shares = {share.name: share for share in snapshot.shares}
    holders: list[Job | WarmPool] = [*snapshot.jobs, *snapshot.warm_pools]
    held = [(h.quota_share, h.instance_type) for h in holders if h.instances]
    if held:
        name, unit = draw(st.sampled_from(held))
        return shares[name], unit
    share = draw(st.sampled_from(snapshot.shares))
    return share, draw(st.sampled_from(share.units()))


@st.composite
def shrunk_capacity(draw: st.DrawFn, snapshot: Snapshot) -> Snapshot:
    _, name = draw(held_place(snapshot))
    unit = next(u for u in snapshot.capacity if u.name == name)
    smaller = dataclasses.replace(unit, max_capacity=draw(st.integers(0, unit.max_capacity)))
    capacity = tuple(smaller if u.name == unit.name else u for u in snapshot.capacity)
    return dataclasses.replace(snapshot, capacity=capacity)


@st.composite
def lowered_limit(draw: st.DrawFn, snapshot: Snapshot) -> Snapshot:
    share, unit = draw(held_place(snapshot))
    lowered = draw(st.integers(0, share.limit(unit)))
    limits = tuple((u, lowered if u == unit else v) for u, v in share.limits)
    return _replace_share(snapshot, dataclasses.replace(share, limits=limits))


@st.composite
def changed_strategy(draw: st.DrawFn, snapshot: Snapshot) -> Snapshot:
    share, _ = draw(held_place(snapshot))
    strategy = draw(st.sampled_from(Strategy))
    borrow_limit = draw(st.integers(0, 100)) if strategy.borrows else None
    changed = dataclasses.replace(share, strategy=strategy, borrow_limit=borrow_limit)
    return _replace_share(snapshot, changed)


@st.composite
def broken_snapshots(draw: st.DrawFn) -> Snapshot:
    """A consistent snapshot after 1–3 configuration changes that may break docs/semantics.md 3's
    invariants: a capacity shrunk, a limit lowered, a strategy or borrow limit changed."""
    snapshot = draw(st.one_of(consistent_snapshots(), evolved_snapshots()))
    changes = [shrunk_capacity, lowered_limit, changed_strategy]
    for _ in range(draw(st.integers(1, 3))):
        snapshot = draw(draw(st.sampled_from(changes))(snapshot))
    return snapshot


running_snapshots = st.one_of(consistent_snapshots(), evolved_snapshots())
any_snapshots = st.one_of(running_snapshots, broken_snapshots())


@st.composite
def shuffled(draw: st.DrawFn, snapshot: Snapshot) -> Snapshot:
    return dataclasses.replace(
        snapshot,
        capacity=tuple(draw(st.permutations(snapshot.capacity))),
        shares=tuple(draw(st.permutations(snapshot.shares))),
        jobs=tuple(draw(st.permutations(snapshot.jobs))),
        warm_pools=tuple(draw(st.permutations(snapshot.warm_pools))),
    )


# Helpers -------------------------------------------------------------------------------


def cycle(snapshot: Snapshot) -> tuple[CycleResult, Replay]:
    """The cycle's decisions, and the replay of its trace: with the placements a later
    step withdrew, so that each placement is checked against the world it was made in."""
    result = schedule(snapshot)
    return result, oracle.replay(snapshot, trace(snapshot))


def of_type(result: CycleResult, kind: type[D]) -> list[D]:
    return [d for d in result.decisions if isinstance(d, kind)]


def lowest_free(world: World, unit: str, count: int) -> tuple[int, ...]:
    held = {n for h in world.holders() if h.instance_type == unit for n in h.instances}
    return tuple(n for n in range(world.capacity.get(unit, 0)) if n not in held)[:count]


def placement_figures(placement: Placement) -> tuple[oracle.UnitFigures, oracle.UnitFigures]:
    """The unit's figures just before the placement (victims gone) and just after it."""
    unit = placement.job.instance_type
    before = placement.without_victims()
    after = oracle.placed(
        before, placement.job, placement.reuse(), placement.dispatch.instances
    )
    return figures(before, unit), figures(after, unit)


def brokenness(world: World) -> dict[tuple[str, str], int]:
    """How far each figure of semantics.md 3 is broken (0 when it holds): per unit, how far free
    and P are below 0; per share, how far borrowed exceeds what it may borrow."""
    measures: dict[tuple[str, str], int] = {}
    for unit in world.units():
        unit_figures = figures(world, unit)
        measures[unit, "free"] = max(0, -unit_figures.free)
        measures[unit, "P"] = max(0, -unit_figures.borrow_pool)
        for name, share in unit_figures.shares.items():
            measures[unit, name] = max(0, share.over_cap)
    return measures


def waiting_after(snapshot: Snapshot, result: CycleResult) -> list[Job]:
    """The jobs left waiting: queued and not dispatched, or preempted with retries left."""
    dispatched = {d.job_id for d in of_type(result, Dispatch)}
    preempted = {p.job_id for p in of_type(result, Preempt)}
    return [
        job
        for job in snapshot.jobs
        if (job.status.queued and job.id not in dispatched)
        or (job.id in preempted and job.preemptions_left != 0)
    ]


def expected_positions(waiting: list[Job]) -> dict[str, int]:
    """semantics.md 4: 1 + the waiting jobs ahead in the share's order (priority, submission)."""
    positions: dict[str, int] = {}
    for share in {job.quota_share for job in waiting}:
        queue = sorted((j for j in waiting if j.quota_share == share), key=oracle.queue_order)
        positions.update({job.id: i for i, job in enumerate(queue, start=1)})
    return positions


def placeable_now(world: World, job: Job) -> bool:
    """Not misconfigured (semantics.md 4, 1–2) and past its grace period (semantics.md 5, Grace)."""
    in_grace = job.not_before is not None and job.not_before > world.now
    return not in_grace and oracle.misconfiguration(world, job) is None


def victim_share(placement: Placement, victim: oracle.Victim) -> str:
    if isinstance(victim, TerminateWarmPool):
        return placement.pool(victim.pool_id).quota_share
    return placement.before.active[victim.job_id].quota_share


def victim_unit(placement: Placement, victim: oracle.Victim) -> str:
    if isinstance(victim, TerminateWarmPool):
        return placement.pool(victim.pool_id).instance_type
    return placement.before.active[victim.job_id].instance_type


def is_reclaim(placement: Placement) -> bool:
    """docs/semantics.md 5.3: a placement that takes other shares' jobs or pools."""
    share = placement.job.quota_share
    return any(victim_share(placement, v) != share for v in placement.victims)


# a. docs/semantics.md 3's invariants -------------------------------------------------------------


@PROPERTY
@given(running_snapshots)
def test_a_cycle_keeps_the_invariants_of_the_accounting(snapshot: Snapshot) -> None:
    """semantics.md 3, Invariants: with no configuration change, after a cycle no instance is held
    twice or lies outside 0..C−1, free ≥ 0, P ≥ 0, a share above its limit is
    LEND_AND_BORROW within B, no RESERVE share's idle capacity is used by others
    (free ≥ Σ idle of RESERVE shares) and no LEND share borrows."""
    assert oracle.invariant_violations(world_of(snapshot)) == []  # the generator's promise
    _, replay = cycle(snapshot)
    assert oracle.invariant_violations(replay.after) == []


@PROPERTY
@given(any_snapshots)
def test_every_placement_fits_when_it_is_made(snapshot: Snapshot) -> None:
    """semantics.md 3: every placement leaves free ≥ 0, leaves P ≥ 0 when it lowers P, and keeps a
    share above its limit LEND_AND_BORROW within B; it takes the lowest free instance
    numbers or the reused pool's own (docs/semantics.md 1), and reports borrowed_instances as
    min(n, borrowed(s) after) — broken inputs included."""
    _, replay = cycle(snapshot)
    for placement in replay.placements:
        job, dispatch = placement.job, placement.dispatch
        before, after = placement_figures(placement)
        assert oracle.placement_allowed(before, after, job.quota_share), placement
        if dispatch.warm_pool_id is None:
            free = lowest_free(placement.without_victims(), job.instance_type, job.instance_count)
            assert dispatch.instances == free
        borrowed = after.shares[job.quota_share].borrowed
        assert dispatch.borrowed_instances == min(job.instance_count, borrowed)


# b. Broken states ----------------------------------------------------------------------


@PROPERTY
@given(broken_snapshots())
def test_a_cycle_never_makes_a_broken_state_worse(snapshot: Snapshot) -> None:
    """semantics.md 3: a configuration change may leave the invariants broken; a cycle never makes
    a broken one worse: per unit, free and P below 0 do not sink further, and per share,
    borrowed beyond B does not grow."""
    before = brokenness(world_of(snapshot))
    _, replay = cycle(snapshot)
    after = brokenness(replay.after)
    worse = {key: (before[key], after[key]) for key in before if after[key] > before[key]}
    assert worse == {}


# c. No job lost or duplicated; victims from the right shares ---------------------------


@PROPERTY
@given(any_snapshots)
def test_no_job_is_lost_or_duplicated(snapshot: Snapshot) -> None:
    """semantics.md 4–5: each queued job is dispatched at most once, and only when it is neither
    misconfigured nor in its grace period; each active job is preempted at most once; no
    job is both; every job left waiting gets at most one SetPendingReason, and a job
    preempted with retries left gets exactly one, one failing its last retry none; after
    the cycle the active jobs are those not preempted plus those dispatched."""
    result, replay = cycle(snapshot)
    jobs = {job.id: job for job in snapshot.jobs}
    world = world_of(snapshot)
    dispatched = Counter(d.job_id for d in of_type(result, Dispatch))
    preempted = Counter(p.job_id for p in of_type(result, Preempt))
    pending = Counter(p.job_id for p in of_type(result, SetPendingReason))
    assert max(dispatched.values(), default=1) == 1 and max(preempted.values(), default=1) == 1
    assert not dispatched.keys() & preempted.keys()
    assert all(jobs[i].status.queued and placeable_now(world, jobs[i]) for i in dispatched)
    assert all(jobs[i].status.active for i in preempted)
    waiting = {job.id for job in waiting_after(snapshot, result)}
    assert set(pending) <= waiting and max(pending.values(), default=1) == 1
    retried = {i for i in preempted if jobs[i].preemptions_left != 0}
    assert retried <= set(pending)
    still_active = {i for i in world.active if i not in preempted}
    assert set(replay.after.active) == still_active | set(dispatched)


@PROPERTY
@given(any_snapshots)
def test_a_withdrawn_placement_never_reaches_the_decisions(snapshot: Snapshot) -> None:
    """docs/semantics.md 5.6, Placed this cycle: a job placed and then taken later in the cycle
    is neither dispatched nor preempted; it waits again, and the decisions are the trace
    without its placement and its withdrawal."""
    result = schedule(snapshot)
    steps = trace(snapshot)
    withdrawn = {step.job_id for step in steps if isinstance(step, Withdraw)}
    taken = withdrawn | {p.job_id for p in of_type(result, Preempt)}
    assert not taken & {d.job_id for d in of_type(result, Dispatch)}
    waiting = {job.id for job in waiting_after(snapshot, result)}
    assert withdrawn <= waiting
    kept = [
        step for step in steps
        if not isinstance(step, Withdraw)
        and not (isinstance(step, Dispatch) and step.job_id in withdrawn)
    ]
    assert [d for d in result.decisions if not isinstance(d, SetPendingReason)] == kept


@PROPERTY
@given(any_snapshots)
def test_victims_come_from_the_shares_their_kind_allows(snapshot: Snapshot) -> None:
    """semantics.md 5.3–5.5: IN_SHARE victims are the preemptor's share's jobs of strictly lower
    priority; CROSS_SHARE victims (and other shares' evicted pools) belong to other shares
    that were borrowing, and such a reclaim places its job in quota; all victims are on
    the placed job's unit, and the two kinds never mix in one placement."""
    _, replay = cycle(snapshot)
    for placement in replay.placements:
        job, unit = placement.job, placement.job.instance_type
        kinds = {v.kind for v in placement.victims if isinstance(v, Preempt)}
        assert len(kinds) <= 1
        assert all(victim_unit(placement, v) == unit for v in placement.victims)
        if PreemptionKind.IN_SHARE in kinds:
            assert not is_reclaim(placement)
            for job_id in placement.victim_jobs:
                assert placement.before.active[job_id].priority < job.priority
        if PreemptionKind.CROSS_SHARE in kinds or is_reclaim(placement):
            owners = {victim_share(placement, v) for v in placement.victims} - {job.quota_share}
            assert owners and all(
                figures(placement.before, unit).shares[s].borrowed > 0 for s in owners
            )
            assert all(victim_share(placement, v) != job.quota_share
                       for v in placement.victims if isinstance(v, Preempt))
            assert placement.dispatch.borrowed_instances == 0


@QUICK_PROPERTY
@given(any_snapshots)
def test_running_victims_give_a_grace_period(snapshot: Snapshot) -> None:
    """semantics.md 5, Grace: a preempted RUNNING job may run again after now + grace, any other
    victim at once; the preemptor starts after the grace when any job victim was RUNNING."""
    _, replay = cycle(snapshot)
    grace = snapshot.policy.preemption_grace_seconds
    for placement in replay.placements:
        running = False
        for victim in placement.victims:
            if isinstance(victim, Preempt):
                was_running = placement.before.active[victim.job_id].status is JobStatus.RUNNING
                assert victim.was_running == was_running
                assert victim.grace_until == snapshot.now + (grace if was_running else 0)
                running = running or was_running
        assert placement.dispatch.starting_at == snapshot.now + (grace if running else 0)


# d. Determinism ------------------------------------------------------------------------


@st.composite
def long_queues(draw: st.DrawFn) -> Snapshot:
    """A snapshot whose queued jobs come in runs of alike jobs (copies submitted right after
    each other), so that many rounds only skip heads."""
    snapshot = draw(running_snapshots)
    jobs: list[Job] = []
    sequence = 0
    for job in snapshot.jobs:
        copies = draw(st.integers(0, 4)) if job.status.queued else 0
        for copy in range(copies + 1):
            sequence += 1
            name = job.id if copy == 0 else f"{job.id}_{copy}"
            jobs.append(dataclasses.replace(job, id=name, sequence=sequence))
    return dataclasses.replace(snapshot, jobs=tuple(jobs))


def round_by_round(snapshot: Snapshot) -> CycleResult:
    """The cycle without skipping quiet rounds at once: every round played out."""
    with mock.patch.object(cycle_module, "skip_quiet_rounds", lambda state: None):
        return schedule(snapshot)


@PROPERTY
@given(st.one_of(any_snapshots, long_queues()))
def test_skipping_quiet_rounds_at_once_changes_no_decision(snapshot: Snapshot) -> None:
    """docs/semantics.md 5.6: a skipped head steps aside alone and its share's next job joins in the
    next round; the cycle's shortcut over rounds that only skip heads must decide exactly
    what playing every round out decides."""
    assert schedule(snapshot) == round_by_round(snapshot)


def is_housekeeping(decision: object) -> TypeGuard[TerminateWarmPool]:
    """A pool ended for its time (docs/semantics.md 5.1), not evicted for a job."""
    return isinstance(decision, TerminateWarmPool) and decision.by_job is None


@PROPERTY
@given(st.data())
def test_the_same_snapshot_gives_the_same_decisions(data: st.DataObject) -> None:
    """docs/semantics.md 5 ("it reads no clock and no database"): a cycle is a function of the
    snapshot, whatever the order of its capacity, shares, jobs and pools."""
    snapshot = data.draw(any_snapshots)
    result = schedule(snapshot)
    assert schedule(snapshot) == result
    again = schedule(data.draw(shuffled(snapshot)))
    assert again == result


# e. Maximality -------------------------------------------------------------------------


@PROPERTY
@given(any_snapshots)
def test_no_job_left_waiting_fits_after_the_cycle(snapshot: Snapshot) -> None:
    """semantics.md 5.6: the cycle repeats until nothing more can be placed, and skipping a head
    does not block its share (best effort).  So after it, no waiting job that is placeable
    (not misconfigured, past its grace, not preempted in this cycle) fits as things stand,
    reusing a matching pool if there is one, without preempting or evicting anything."""
    result, replay = cycle(snapshot)
    preempted = {p.job_id for p in of_type(result, Preempt)}
    fitting = [
        job.id
        for job in waiting_after(snapshot, result)
        if job.id not in preempted
        and placeable_now(replay.after, job)
        and oracle.fits(replay.after, job)
    ]
    assert fitting == []


# f. Pending reasons --------------------------------------------------------------------


@PROPERTY
@given(any_snapshots)
def test_every_waiting_job_has_its_pending_reason_and_position(snapshot: Snapshot) -> None:
    """semantics.md 4: every job left waiting has the first pending reason that applies after the
    cycle.  A SetPendingReason is sent exactly when that differs from the stored reason or
    the job is not RUNNABLE yet (SUBMITTED, or just preempted), and it carries the job's
    position: 1..k in its share's order of waiting jobs (priority, then submission)."""
    result, replay = cycle(snapshot)
    sent = {p.job_id: (p.reason, p.position) for p in of_type(result, SetPendingReason)}
    waiting = waiting_after(snapshot, result)
    positions = expected_positions(waiting)
    for job in waiting:
        reason = oracle.pending_reason(replay.after, job)
        must_send = job.pending_code != reason.value or job.status is not JobStatus.RUNNABLE
        expected = (reason, positions[job.id]) if must_send else None
        assert sent.get(job.id) == expected, job.id


# g. Minimal victims --------------------------------------------------------------------


def needed(placement: Placement, victim: oracle.Victim) -> bool:
    """Whether the placement needs `victim` (semantics.md 5.3/5.5): without it the job would not
    fit, or — an own pool evicted for an in-quota head — would no longer be in quota."""
    spared = placement.without_victims(but=victim)
    if not oracle.fits(spared, placement.job):
        return True
    own_pool = (
        isinstance(victim, TerminateWarmPool)
        and victim_share(placement, victim) == placement.job.quota_share
    )
    in_quota = oracle.in_quota_after(placement.without_victims(), placement.job)
    return own_pool and in_quota and not oracle.in_quota_after(spared, placement.job)


@PROPERTY
@given(any_snapshots)
def test_every_victim_is_needed(snapshot: Snapshot) -> None:
    """docs/semantics.md 5.3/5.5 ("spare each one without which the head still fits"): for every
    placement that preempts or evicts, sparing any single victim, in the state just before
    that placement, leaves the job unable to be placed."""
    _, replay = cycle(snapshot)
    for placement in replay.placements:
        spared = [v for v in placement.victims if not needed(placement, v)]
        assert spared == [], placement


# Warm pools ----------------------------------------------------------------------------


@PROPERTY
@given(any_snapshots)
def test_a_placement_reuses_the_matching_pool_expiring_soonest(snapshot: Snapshot) -> None:
    """semantics.md 6, Matching: every placement takes a matching Available pool of its share when
    there is one: the one expiring soonest, then Available first, then the earlier job's."""
    _, replay = cycle(snapshot)
    for placement in replay.placements:
        best = oracle.matching_pool(placement.without_victims(), placement.job)
        assert placement.dispatch.warm_pool_id == (best.id if best else None)


def housekeeping_ending(pool: WarmPool, snapshot: Snapshot) -> PoolTermination | None:
    lifetime_end = pool.chain_started_at + snapshot.policy.warm_pool_max_lifetime_seconds
    if min(lifetime_end, pool.expires_at) > snapshot.now:
        return None
    return PoolTermination.MAX_LIFETIME if lifetime_end < pool.expires_at else (
        PoolTermination.EXPIRED
    )


@QUICK_PROPERTY
@given(any_snapshots)
def test_housekeeping_ends_exactly_the_pools_past_their_time(snapshot: Snapshot) -> None:
    """semantics.md 5.1 and 6: pools past their keep-alive end EXPIRED, or MAX_LIFETIME when the
    chain's lifetime ends strictly earlier, before any placement; no other pool ends so."""
    result = schedule(snapshot)
    housekeeping = [d for d in result.decisions if is_housekeeping(d)]
    assert result.decisions[: len(housekeeping)] == tuple(housekeeping)
    expected = {
        pool.id: housekeeping_ending(pool, snapshot) for pool in snapshot.warm_pools
    }
    assert {d.pool_id: d.reason for d in housekeeping} == {
        pool_id: reason for pool_id, reason in expected.items() if reason is not None
    }


# Sanity: the oracle can fail -----------------------------------------------------------

WALKTHROUGH_SHARES = (
    QuotaShare("QS1", (("g5", 1),), Strategy.LEND_AND_BORROW, 200, in_share_preemption=True),
    QuotaShare("QS2", (("g5", 1),), Strategy.LEND),
    QuotaShare("QS3", (("g5", 1),), Strategy.RESERVE),
)


def walkthrough_job(job_id: str, share: str, instances: tuple[int, ...] = ()) -> Job:
    status = JobStatus.RUNNING if instances else JobStatus.RUNNABLE
    dispatched = NOW - 10 if instances else None
    return Job(job_id, share, 1, 0, "g5", len(instances) or 1, status, instances=instances,
               dispatched_at=dispatched, started_at=dispatched)


def walkthrough_world(*active: Job) -> World:
    """semantics.md 7: 3 × g5; QS1 LEND_AND_BORROW 200 %, QS2 LEND, QS3 RESERVE, limit 1 each."""
    return World(NOW, {"g5": 3}, {s.name: s for s in WALKTHROUGH_SHARES},
                 {job.id: job for job in active}, {})


def test_the_oracle_counts_the_walkthrough_after_its_first_cycle() -> None:
    """semantics.md 7, step 1: high on QS1's own instance, med borrowing QS2's idle one; low does
    not fit, since QS3 reserves its idle instance."""
    world = walkthrough_world(
        walkthrough_job("high", "QS1", (0,)), walkthrough_job("med", "QS1", (1,))
    )
    unit = figures(world, "g5")
    qs1 = unit.shares["QS1"]
    assert (qs1.used, qs1.own, qs1.borrowed, qs1.idle, qs1.cap) == (2, 1, 1, 0, 2)
    assert (unit.free, unit.unowned, unit.borrow_pool, unit.reserved_idle) == (1, 0, 0, 1)
    assert oracle.invariant_violations(world) == []
    assert not oracle.fits(world, walkthrough_job("low", "QS1"))
    assert oracle.pending_reason(world, walkthrough_job("low", "QS1")) is (
        PendingReason.NO_IDLE_CAPACITY_TO_BORROW
    )


def test_the_invariant_checker_flags_reserve_capacity_used_by_another_share() -> None:
    """A hand-made bad placement (QS1 borrowing QS3's reserved idle instance) breaks P ≥ 0 and
    free ≥ Σ idle of RESERVE shares, and the oracle says it did not fit."""
    world = walkthrough_world(
        walkthrough_job("high", "QS1", (0,)), walkthrough_job("med", "QS1", (1,))
    )
    bad = oracle.placed(world, walkthrough_job("low", "QS1"), None, (2,))
    assert oracle.invariant_violations(bad) == [
        "g5: borrow pool P = -1 < 0",
        "g5: free = 0 < RESERVE idle 1",
    ]
    assert not oracle.placement_allowed(figures(world, "g5"), figures(bad, "g5"), "QS1")


def test_the_invariant_checker_flags_instances_held_twice_and_a_lend_share_borrowing() -> None:
    world = walkthrough_world(
        walkthrough_job("a", "QS2", (0, 1)), walkthrough_job("b", "QS3", (1,))
    )
    assert oracle.invariant_violations(world) == [
        "g5: instance 1 held 2 times",
        "g5: LEND share QS2 borrows",
    ]


def test_the_replay_flags_a_dispatch_of_a_job_that_is_not_queued() -> None:
    snapshot = Snapshot(NOW, (CapacityUnit("g5", 3),), WALKTHROUGH_SHARES,
                        (walkthrough_job("high", "QS1", (0,)),))
    bogus = CycleResult(NOW, (Dispatch("high", (1,), 0, None, NOW),))
    try:
        oracle.replay(snapshot, bogus)
    except oracle.ReplayError as error:
        assert "not queued" in str(error)
    else:
        raise AssertionError("the replay accepted a dispatch of an active job")
