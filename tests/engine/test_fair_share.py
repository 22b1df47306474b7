"""Fair sharing of idle capacity by weight (docs/semantics.md 5.4, Fair sharing).

Table-driven cases of the borrowing pass's order with fair sharing on, for the fleet or for
one unit, and property tests over random borrowing scenarios: with fair sharing on, a share
that took idle capacity in a cycle never ends it more than one instance per weight ahead of
a share still waiting with a job that fits; with it off, weights change nothing.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler import CapacityUnit, Dispatch, Job, Policy, QuotaShare, Snapshot, schedule
from scheduler.model import UNLIMITED_BORROW, Strategy
from tests.engine.builders import (
    G5,
    LEND_AND_BORROW,
    NO_IDLE,
    NOW,
    P4,
    decide,
    dispatch,
    queued,
    running,
    share,
    snapshot,
    unit,
    waits,
)


def weighted(name: str, weight: int, limit: int = 0, **kwargs: object) -> QuotaShare:
    """A LEND_AND_BORROW share (unlimited borrowing) with `fair_share_weight` = weight."""
    base = share(name, limit, strategy=LEND_AND_BORROW, **kwargs)  # type: ignore[arg-type]
    return dataclasses.replace(base, fair_share_weight=weight)


def fair(snap: Snapshot, *, fleet: bool = True) -> Snapshot:
    """The same snapshot with fair sharing on for the fleet."""
    return dataclasses.replace(snap, policy=dataclasses.replace(snap.policy, fair_sharing=fleet))


def dispatched(snap: Snapshot) -> list[str]:
    return [d.job_id for d in schedule(snap).decisions if isinstance(d, Dispatch)]


def sweep(share_name: str, count: int, first_seq: int, unit_name: str = G5) -> list[Job]:
    return [queued(f"{share_name.lower()}{i}", share=share_name, seq=first_seq + i, unit=unit_name)
            for i in range(count)]


def two_sweeps(capacity: int = 4, weight_a: int = 1, weight_b: int = 1) -> Snapshot:
    """A submitted a sweep of 6 before B submitted its own; neither has a limit, so every
    instance of the unit is idle capacity they both borrow."""
    return snapshot(
        NOW,
        [unit(G5, capacity)],
        [weighted("A", weight_a), weighted("B", weight_b)],
        sweep("A", 6, 1) + sweep("B", 6, 100),
    )


# Without fair sharing: today's first come, first served -------------------------------


def test_off_the_first_sweep_takes_every_idle_instance() -> None:
    assert dispatched(two_sweeps()) == ["a0", "a1", "a2", "a3"]


def test_off_weights_change_nothing() -> None:
    assert decide(two_sweeps(weight_a=1, weight_b=5)) == decide(two_sweeps())


# With fair sharing: lowest borrowed / weight first -------------------------------------


def test_on_equal_weights_alternate() -> None:
    assert dispatched(fair(two_sweeps())) == ["a0", "b0", "a1", "b1"]


def test_on_the_decisions_carry_the_borrowed_counts() -> None:
    decisions = decide(fair(two_sweeps(capacity=2)))
    assert decisions[:2] == [
        dispatch("a0", (0,), borrowed=1),
        dispatch("b0", (1,), borrowed=1),
    ]
    assert waits("a1", NO_IDLE, 1) in decisions and waits("b1", NO_IDLE, 1) in decisions


def test_on_weights_divide_the_idle_capacity() -> None:
    # 6 idle instances, weights 2 : 1 -> A 4, B 2.
    placed = dispatched(fair(two_sweeps(capacity=6, weight_a=2, weight_b=1)))
    assert sum(name.startswith("a") for name in placed) == 4
    assert sum(name.startswith("b") for name in placed) == 2


def test_on_what_a_share_already_borrows_counts() -> None:
    # A already borrows 2 with running jobs: the 2 idle instances both go to B.
    snap = snapshot(
        NOW,
        [unit(G5, 4)],
        [weighted("A", 1), weighted("B", 1)],
        [running("r0", share="A", seq=1, instances=(0,)),
         running("r1", share="A", seq=2, instances=(1,)),
         *sweep("A", 3, 3), *sweep("B", 3, 100)],
    )
    assert dispatched(snap) == ["a0", "a1"]
    assert dispatched(fair(snap)) == ["b0", "b1"]


def test_on_a_tie_goes_to_the_older_submission() -> None:
    snap = snapshot(NOW, [unit(G5, 1)], [weighted("A", 1), weighted("B", 1)],
                    [*sweep("B", 1, 1), *sweep("A", 1, 2)])
    assert dispatched(fair(snap)) == ["b0"]


def test_in_quota_placement_is_unchanged() -> None:
    # A owns 2 instances: its own jobs are placed in quota first, whatever B borrows.
    snap = snapshot(
        NOW,
        [unit(G5, 4)],
        [weighted("A", 1, limit=2), weighted("B", 1)],
        sweep("A", 6, 1) + sweep("B", 6, 100),
    )
    placed = dispatched(fair(snap))
    assert placed[:2] == ["a0", "a1"]  # in quota
    # Borrowing: both have borrowed 0, so the older head (A's) goes first, then B's.
    assert placed[2:] == ["a2", "b0"]


def test_per_unit_switch_leaves_other_units_first_come() -> None:
    units = [CapacityUnit(G5, 2, fair_sharing=True), CapacityUnit(P4, 2)]
    shares = [weighted("A", 1, limits={G5: 0, P4: 0}), weighted("B", 1, limits={G5: 0, P4: 0})]
    jobs = sweep("A", 2, 1) + sweep("B", 2, 100) + [
        queued(f"ap{i}", share="A", seq=10 + i, unit=P4) for i in range(2)
    ] + [queued(f"bp{i}", share="B", seq=200 + i, unit=P4) for i in range(2)]
    placed = dispatched(snapshot(NOW, units, shares, jobs))
    assert sorted(name for name in placed if name[1:2] != "p") == ["a0", "b0"]
    assert sorted(name for name in placed if name[1:2] == "p") == ["ap0", "ap1"]


# Properties over random borrowing scenarios --------------------------------------------


@st.composite
def borrowing_scenarios(draw: st.DrawFn) -> Snapshot:
    """Borrowers with no limit of their own (every job borrows), random weights, random
    borrowing already held, and a queue of one-instance jobs each, on one unit whose idle
    capacity is partly unowned and partly a lending share's."""
    count = draw(st.integers(2, 4))
    lender_limit = draw(st.integers(0, 4))
    capacity = lender_limit + draw(st.integers(0, 10))
    names = [f"S{i}" for i in range(count)]
    shares = [QuotaShare("L", ((G5, lender_limit),), Strategy.LEND)] + [
        QuotaShare(name, ((G5, 0),), Strategy.LEND_AND_BORROW, UNLIMITED_BORROW,
                   fair_share_weight=draw(st.integers(1, 4)))
        for name in names
    ]
    jobs: list[Job] = []
    next_instance, seq = 0, 0
    for name in names:
        for _ in range(draw(st.integers(0, 2))):
            if next_instance < capacity - lender_limit:
                seq += 1
                jobs.append(running(f"{name}_r{seq}", share=name, seq=seq,
                                    instances=(next_instance,)))
                next_instance += 1
    order = draw(st.permutations([name for name in names
                                  for _ in range(draw(st.integers(0, 8)))]))
    for name in order:
        seq += 1
        jobs.append(queued(f"{name}_q{seq}", share=name, seq=seq,
                           priority=draw(st.integers(0, 1))))
    return Snapshot(NOW, (CapacityUnit(G5, capacity),), tuple(shares), tuple(jobs),
                    policy=Policy(preemption_grace_seconds=0, fair_sharing=True))


def borrowed_after(snap: Snapshot) -> tuple[dict[str, int], set[str], set[str]]:
    """Each share's borrowed instances after the cycle, the shares that placed and the
    shares that still wait."""
    result = schedule(snap)
    placed = {d.job_id for d in result.decisions if isinstance(d, Dispatch)}
    borrowed = {s.name: 0 for s in snap.shares}
    placing, waiting = set(), set()
    for job in snap.jobs:
        if job.status.active or job.id in placed:
            borrowed[job.quota_share] += job.instance_count
        if job.id in placed:
            placing.add(job.quota_share)
        elif job.status.queued:
            waiting.add(job.quota_share)
    return borrowed, placing, waiting


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(borrowing_scenarios())
def test_fair_sharing_keeps_borrowers_within_one_instance_per_weight(snap: Snapshot) -> None:
    """No share that took idle capacity in the cycle ends it more than one instance ahead,
    in borrowed / weight, of a share that still waits with a job that fits (one-instance
    jobs with unlimited borrowing: every waiting job would fit if capacity were there)."""
    borrowed, placing, waiting = borrowed_after(snap)
    weights = {s.name: s.fair_share_weight for s in snap.shares}
    for taker in placing:
        for other in waiting - {taker}:
            assert (Fraction(borrowed[taker] - 1, weights[taker])
                    <= Fraction(borrowed[other], weights[other])), (taker, other, borrowed)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(borrowing_scenarios())
def test_fair_sharing_places_as_many(snap: Snapshot) -> None:
    """Fair sharing changes who borrows, never how much: the same number of instances is
    placed as first come, first served places."""
    off = dataclasses.replace(snap, policy=dataclasses.replace(snap.policy, fair_sharing=False))
    assert len(dispatched(snap)) == len(dispatched(off))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(borrowing_scenarios())
def test_fair_sharing_off_ignores_weights(snap: Snapshot) -> None:
    off = dataclasses.replace(snap, policy=dataclasses.replace(snap.policy, fair_sharing=False))
    unweighted = dataclasses.replace(
        off, shares=tuple(dataclasses.replace(s, fair_share_weight=1) for s in off.shares))
    assert schedule(off) == schedule(unweighted)
