"""The minimum runtime before preemption (docs/semantics.md 5.8).

Table-driven cases: a young RUNNING attempt is never an in-share victim (its preemptor
waits with WAITING_FOR_MIN_RUNTIME and is placed once the minimum runtime ends), and a
reclaim takes it only when no other victim frees the instances; a job's own value counts
up to its share's.  Property tests over random reclaim scenarios check the rule against a
brute-force search, and that a share without a minimum runtime decides as before.
"""

from __future__ import annotations

import dataclasses
from itertools import combinations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler import (
    CapacityUnit,
    Job,
    PendingReason,
    Policy,
    Preempt,
    PreemptionKind,
    QuotaShare,
    Snapshot,
    schedule,
)
from scheduler.min_runtime import min_runtime_of, shielded_by_min_runtime
from scheduler.model import UNLIMITED_BORROW, Strategy
from tests.engine.builders import (
    G5,
    IN_SHARE,
    LEND_AND_BORROW,
    NOW,
    decide,
    dispatch,
    preempt,
    queued,
    running,
    share,
    snapshot,
    unit,
    waits,
)

MIN_RUNTIME = PendingReason.WAITING_FOR_MIN_RUNTIME


def with_min_runtime(base: QuotaShare, seconds: int) -> QuotaShare:
    return dataclasses.replace(base, min_runtime_seconds=seconds)


def in_share_case(now: float, *, min_runtime: int = 600, job_min: int | None = None) -> Snapshot:
    """S (L 1, in-share preemption) runs `low` (started at NOW − 100); `high` waits."""
    low = dataclasses.replace(
        running("low", share="S", seq=1, priority=1, started_at=NOW - 100),
        min_runtime_seconds=job_min,
    )
    return snapshot(
        now,
        [unit(G5, 1)],
        [with_min_runtime(share("S", 1, in_share_preemption=True), min_runtime)],
        [low, queued("high", share="S", seq=2, priority=5)],
    )


# The rule's one function --------------------------------------------------------------


def test_min_runtime_of_takes_the_job_value_up_to_the_share_value() -> None:
    s = with_min_runtime(share("S"), 300)
    job = running("j", share="S", seq=1)
    assert min_runtime_of(job, s) == 300
    assert min_runtime_of(dataclasses.replace(job, min_runtime_seconds=60), s) == 60
    assert min_runtime_of(dataclasses.replace(job, min_runtime_seconds=900), s) == 300


def test_only_a_running_attempt_is_shielded_and_only_while_young() -> None:
    s = with_min_runtime(share("S"), 300)
    job = running("j", share="S", seq=1, started_at=NOW - 299)
    assert shielded_by_min_runtime(job, s, NOW)
    assert not shielded_by_min_runtime(job, s, NOW + 1)  # exactly 300 s: a victim again
    assert not shielded_by_min_runtime(queued("q", share="S", seq=2), s, NOW)


# In-share preemption -------------------------------------------------------------------


def test_without_min_runtime_the_high_job_preempts_at_once() -> None:
    assert decide(in_share_case(NOW, min_runtime=0)) == [
        preempt("low", by="high", kind=IN_SHARE),
        dispatch("high", (0,)),
        waits("low", PendingReason.WAITING_FOR_CAPACITY),
    ]


def test_a_young_attempt_is_not_an_in_share_victim() -> None:
    assert decide(in_share_case(NOW)) == [waits("high", MIN_RUNTIME)]


def test_once_the_min_runtime_ends_it_is_a_victim_again() -> None:
    assert decide(in_share_case(NOW + 500)) == [
        preempt("low", by="high", kind=IN_SHARE, grace_until=NOW + 500),
        dispatch("high", (0,), starting_at=NOW + 500),
        waits("low", PendingReason.WAITING_FOR_CAPACITY),
    ]


def test_a_job_may_shorten_its_min_runtime() -> None:
    decisions = decide(in_share_case(NOW, job_min=60))  # 100 s old: past its own 60 s
    assert decisions[0] == preempt("low", by="high", kind=IN_SHARE)


def test_a_job_may_not_lengthen_it_beyond_its_share() -> None:
    assert decide(in_share_case(NOW + 500, job_min=5000))[1] == dispatch(
        "high", (0,), starting_at=NOW + 500
    )


def test_a_lower_priority_waiter_does_not_wait_for_the_min_runtime() -> None:
    snap = in_share_case(NOW)
    snap = dataclasses.replace(snap, jobs=(*snap.jobs, queued("lower", share="S", seq=3)))
    assert decide(snap) == [waits("high", MIN_RUNTIME),
                            waits("lower", PendingReason.WAITING_FOR_CAPACITY, 2)]


# Reclaim -------------------------------------------------------------------------------


def reclaim_case(*, young_started: float, min_runtime: int = 600) -> Snapshot:
    """Q (LEND, L 1) queues q1; A (L 0, borrows) holds both instances: `old` (started long
    ago) and `young`.  Without a minimum runtime the most recent start, young, goes."""
    borrower = with_min_runtime(share("A", 0, strategy=LEND_AND_BORROW), min_runtime)
    return snapshot(
        NOW,
        [unit(G5, 2)],
        [share("Q", 1), borrower],
        [running("old", share="A", seq=1, instances=(0,), started_at=NOW - 5000),
         running("young", share="A", seq=2, instances=(1,), started_at=young_started),
         queued("q1", share="Q", seq=3)],
    )


def test_reclaim_takes_the_most_recent_start_without_min_runtime() -> None:
    assert decide(reclaim_case(young_started=NOW - 10, min_runtime=0))[0] == preempt(
        "young", by="q1"
    )


def test_reclaim_takes_an_older_attempt_before_a_young_one() -> None:
    assert decide(reclaim_case(young_started=NOW - 10))[:2] == [
        preempt("old", by="q1"), dispatch("q1", (0,))
    ]


def test_reclaim_takes_a_young_attempt_when_nothing_else_frees_the_instances() -> None:
    # Both attempts are young: the owner still gets its instance back, now.
    snap = reclaim_case(young_started=NOW - 10)
    jobs = tuple(dataclasses.replace(j, started_at=NOW - 20) if j.id == "old" else j
                 for j in snap.jobs)
    decisions = decide(dataclasses.replace(snap, jobs=jobs))
    assert decisions[0] == preempt("young", by="q1")
    assert decisions[1] == dispatch("q1", (1,))


# Properties over random reclaim scenarios ---------------------------------------------


@st.composite
def reclaim_scenarios(draw: st.DrawFn) -> Snapshot:
    """One owner (LEND, limit L) with a queued job of n instances; two or three borrowing
    shares (limit 0..1, unlimited borrowing) hold running jobs of random sizes and ages
    on the unit, with a random minimum runtime; free capacity may remain."""
    owner_limit = draw(st.integers(1, 4))
    borrowers = [f"B{i}" for i in range(draw(st.integers(1, 3)))]
    limits = {name: draw(st.integers(0, 1)) for name in borrowers}
    shares = [QuotaShare("O", ((G5, owner_limit),), Strategy.LEND)] + [
        QuotaShare(name, ((G5, limits[name]),), Strategy.LEND_AND_BORROW, UNLIMITED_BORROW,
                   min_runtime_seconds=draw(st.sampled_from([0, 300, 600])))
        for name in borrowers
    ]
    jobs: list[Job] = []
    instance, seq = 0, 0
    for name in borrowers:
        for _ in range(draw(st.integers(1, 3))):
            size = draw(st.integers(1, 2))
            seq += 1
            jobs.append(dataclasses.replace(
                running(f"{name}_{seq}", share=name, seq=seq,
                        instances=tuple(range(instance, instance + size)),
                        priority=draw(st.integers(0, 2)),
                        started_at=NOW - draw(st.sampled_from([5, 100, 400, 700, 5000]))),
                min_runtime_seconds=draw(st.none() | st.sampled_from([0, 200, 1000])),
            ))
            instance += size
    capacity = max(instance + draw(st.integers(0, 1)), owner_limit + sum(limits.values()))
    seq += 1
    jobs.append(queued("want", share="O", seq=seq, n=draw(st.integers(1, owner_limit))))
    return Snapshot(NOW, (CapacityUnit(G5, capacity),), tuple(shares), tuple(jobs),
                    policy=Policy(preemption_grace_seconds=0))


def fits_after(snap: Snapshot, gone: set[str], want: Job) -> bool:
    """Whether `want` fits (docs/semantics.md 3, When a job fits) once `gone` are gone,
    recomputed from scratch."""
    capacity = snap.capacity[0].max_capacity
    used = {s.name: 0 for s in snap.shares}
    for job in snap.jobs:
        if job.status.active and job.id not in gone:
            used[job.quota_share] += job.instance_count
    used[want.quota_share] += want.instance_count
    if capacity - sum(used.values()) < 0:
        return False
    limit = {s.name: s.limit(G5) for s in snap.shares}
    unowned = capacity - sum(limit.values())
    pool = unowned + sum(max(0, limit[s] - used[s]) - max(0, used[s] - limit[s])
                         for s in used)
    return pool >= 0 and used[want.quota_share] <= limit[want.quota_share]


def other_way_exists(snap: Snapshot, want: Job) -> bool:
    """Whether some set of victims without a young attempt lets `want` fit in quota, each
    victim taken while its share still borrows (brute force over every subset)."""
    shares = {s.name: s for s in snap.shares}
    limit = {s.name: s.limit(G5) for s in snap.shares}
    used = {s.name: 0 for s in snap.shares}
    for job in snap.jobs:
        if job.status.active:
            used[job.quota_share] += job.instance_count
    allowed = [j for j in snap.jobs if j.status.active and j.quota_share != want.quota_share
               and not shielded_by_min_runtime(j, shares[j.quota_share], snap.now)]
    for size in range(len(allowed) + 1):
        for subset in combinations(allowed, size):
            takeable = True
            for name in {j.quota_share for j in subset}:
                mine = [j.instance_count for j in subset if j.quota_share == name]
                # Taken one by one while still borrowing: all but the last keep it borrowing.
                if used[name] - (sum(mine) - min(mine)) <= limit[name]:
                    takeable = False
            if takeable and fits_after(snap, {j.id for j in subset}, want):
                return True
    return False


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reclaim_scenarios())
def test_a_young_attempt_is_reclaimed_only_when_no_other_way_exists(snap: Snapshot) -> None:
    want = next(job for job in snap.jobs if job.id == "want")
    shares = {s.name: s for s in snap.shares}
    active = {job.id: job for job in snap.jobs if job.status.active}
    victims = [d.job_id for d in schedule(snap).decisions if isinstance(d, Preempt)]
    young = [v for v in victims
             if shielded_by_min_runtime(active[v], shares[active[v].quota_share], snap.now)]
    if young:
        assert not other_way_exists(snap, want), (victims, young)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reclaim_scenarios())
def test_the_owner_always_gets_its_capacity_back(snap: Snapshot) -> None:
    """The minimum runtime never blocks a reclaim: the owner is placed exactly when it is
    placed without any minimum runtime."""
    plain = dataclasses.replace(snap, shares=tuple(
        dataclasses.replace(s, min_runtime_seconds=0) for s in snap.shares))
    placed = {d.job_id for d in schedule(snap).decisions if not isinstance(d, Preempt)
              and getattr(d, "instances", None) is not None}
    placed_plain = {d.job_id for d in schedule(plain).decisions if not isinstance(d, Preempt)
                    and getattr(d, "instances", None) is not None}
    assert placed == placed_plain


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reclaim_scenarios())
def test_no_min_runtime_decides_as_before(snap: Snapshot) -> None:
    """Job-level values without a share-level minimum runtime change nothing."""
    plain = dataclasses.replace(snap, shares=tuple(
        dataclasses.replace(s, min_runtime_seconds=0) for s in snap.shares))
    cleared = dataclasses.replace(plain, jobs=tuple(
        dataclasses.replace(j, min_runtime_seconds=None) for j in plain.jobs))
    assert schedule(plain) == schedule(cleared)


def test_in_share_victims_are_never_young() -> None:
    """Over a grid of ages and minimum runtimes: an IN_SHARE preemption never takes an
    attempt younger than its minimum runtime."""
    for age in (10, 299, 300, 301, 900):
        for minimum in (0, 300):
            snap = in_share_case(NOW)
            low = dataclasses.replace(snap.jobs[0], started_at=NOW - age)
            s = with_min_runtime(snap.shares[0], minimum)
            case = dataclasses.replace(snap, shares=(s,), jobs=(low, snap.jobs[1]))
            preempted = [d for d in schedule(case).decisions if isinstance(d, Preempt)]
            assert bool(preempted) == (age >= minimum), (age, minimum)
            assert all(d.kind is PreemptionKind.IN_SHARE for d in preempted)
