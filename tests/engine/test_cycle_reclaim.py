"""Reclaim in the cycle (semantics.md 5.3, 5.6, 5.7 and Grace): which victims a reclaim takes and
the fewest of them, lowered limits, the grace a RUNNING victim gets, and that a victim is
not placed again in its cycle. In-share preemption is in test_cycle_in_share.py.

Notation in comments, per unit: C capacity, U(s) used, L(s) limit, free = C − ΣU, P the
borrow pool = F + Σ idle of lenders − Σ borrowed.
"""

from __future__ import annotations

import pytest

from scheduler import Job, JobStatus, Snapshot, WarmPool
from scheduler.decisions import Decision
from tests.engine.builders import (
    G5,
    LEND_AND_BORROW,
    NO_IDLE,
    NOW,
    WAITING,
    decide,
    dispatch,
    evict,
    pool,
    preempt,
    queued,
    running,
    scheduled,
    share,
    snapshot,
    unit,
    waits,
)

STARTING = JobStatus.STARTING


# Reclaim victim order: one case per criterion ---------------------------------------------


def reclaim_from(*held: Job, pools: tuple[WarmPool, ...] = ()) -> Snapshot:
    """Q (LEND, L 1) queues q1 (n 1); A (LEND_AND_BORROW, L 1) holds both instances (C 2),
    so A borrows 1 and q1 must reclaim exactly one instance from A."""
    return snapshot(
        NOW,
        [unit(G5, 2)],
        [share("Q", 1), share("A", 1, strategy=LEND_AND_BORROW)],
        [*held, queued("q1", share="Q", seq=9)],
        pools,
    )


VICTIM_ORDER = [
    pytest.param(
        # The pool goes first although the job that left it had the higher priority.
        reclaim_from(
            running("a_job", share="A", seq=1, instances=(0,), priority=0),
            pools=(pool("a_pool", share="A", instances=(1,), priority=5),),
        ),
        [evict("a_pool", by="q1"), dispatch("q1", (1,))],
        id="warm-pools-before-jobs",
    ),
    pytest.param(
        reclaim_from(
            pools=(
                pool("p_hi", share="A", instances=(0,), priority=2, available_since=NOW - 10),
                pool("p_lo", share="A", instances=(1,), priority=1, available_since=NOW - 90),
            )
        ),
        [evict("p_lo", by="q1"), dispatch("q1", (1,))],
        id="pools-lower-priority-first",
    ),
    pytest.param(
        reclaim_from(
            pools=(
                pool("p_recent", share="A", instances=(0,), available_since=NOW - 10, seq=1),
                pool("p_early", share="A", instances=(1,), available_since=NOW - 90, seq=2),
            )
        ),
        [evict("p_recent", by="q1"), dispatch("q1", (0,))],
        id="pools-most-recently-available-first",
    ),
    pytest.param(
        reclaim_from(
            pools=(
                pool("p_first", share="A", instances=(0,), seq=1),
                pool("p_second", share="A", instances=(1,), seq=2),
            )
        ),
        [evict("p_second", by="q1"), dispatch("q1", (1,))],
        id="pools-later-submission-first",
    ),
    pytest.param(
        # a_lo is the less recent start and the older submission: only priority picks it.
        reclaim_from(
            running("a_lo", share="A", seq=1, instances=(0,), priority=1, started_at=100),
            running("a_hi", share="A", seq=2, instances=(1,), priority=2, started_at=200),
        ),
        [preempt("a_lo", by="q1"), dispatch("q1", (0,)), waits("a_lo", NO_IDLE)],
        id="lower-priority-first",
    ),
    pytest.param(
        # SCHEDULED counts as more recent than any RUNNING job, despite its earlier dispatch
        # and older submission; it was not RUNNING, so there is no grace.
        reclaim_from(
            scheduled("a_sched", share="A", seq=1, instances=(0,), dispatched_at=100),
            running("a_run", share="A", seq=2, instances=(1,), started_at=NOW - 1),
        ),
        [
            preempt("a_sched", by="q1", was_running=False),
            dispatch("q1", (0,)),
            waits("a_sched", NO_IDLE),
        ],
        id="scheduled-before-running",
    ),
    pytest.param(
        reclaim_from(
            scheduled(
                "a_boot", share="A", seq=1, instances=(0,), dispatched_at=100, status=STARTING
            ),
            running("a_run", share="A", seq=2, instances=(1,), started_at=NOW - 1),
        ),
        [
            preempt("a_boot", by="q1", was_running=False),
            dispatch("q1", (0,)),
            waits("a_boot", NO_IDLE),
        ],
        id="starting-before-running",
    ),
    pytest.param(
        # a_new started later, though submitted earlier.
        reclaim_from(
            running("a_new", share="A", seq=1, instances=(0,), started_at=200),
            running("a_old", share="A", seq=2, instances=(1,), started_at=100),
        ),
        [preempt("a_new", by="q1"), dispatch("q1", (0,)), waits("a_new", NO_IDLE)],
        id="latest-start-first",
    ),
    pytest.param(
        reclaim_from(
            scheduled("a_new", share="A", seq=1, instances=(0,), dispatched_at=NOW - 5),
            scheduled("a_old", share="A", seq=2, instances=(1,), dispatched_at=NOW - 50),
        ),
        [
            preempt("a_new", by="q1", was_running=False),
            dispatch("q1", (0,)),
            waits("a_new", NO_IDLE),
        ],
        id="latest-dispatch-first-among-scheduled",
    ),
    pytest.param(
        # Same priority, same start: the later submission goes.
        reclaim_from(
            running("a_first", share="A", seq=1, instances=(0,), started_at=100),
            running("a_second", share="A", seq=2, instances=(1,), started_at=100),
        ),
        [preempt("a_second", by="q1"), dispatch("q1", (1,)), waits("a_second", NO_IDLE)],
        id="later-submission-first",
    ),
]


@pytest.mark.parametrize(("snap", "expected"), VICTIM_ORDER)
def test_reclaim_victim_order(snap: Snapshot, expected: list[Decision]) -> None:
    assert decide(snap) == expected


def test_victim_whose_preemption_fails_it_is_not_left_waiting() -> None:
    # preemptions_left 0: this preemption fails a1 (the lifecycle records it), so the cycle
    # gives it no pending reason.
    snap = reclaim_from(
        running("a1", share="A", seq=1, instances=(0,), started_at=200, preemptions_left=0),
        running("a2", share="A", seq=2, instances=(1,), started_at=100),
    )
    assert decide(snap) == [preempt("a1", by="q1"), dispatch("q1", (0,))]


def test_reclaim_takes_only_from_shares_still_borrowing() -> None:
    # C 4: Q (L 2) idle; A and B (L 1 each) hold 2 each, borrowing 1 each; q1 needs 2.
    # Order: A's jobs (priority 0) before B's (priority 1), latest start first.
    # a2 taken (A now at its limit), a1 passed over, b2 taken: free 2, P 2 → 0.
    snap = snapshot(
        NOW,
        [unit(G5, 4)],
        [
            share("Q", 2),
            share("A", 1, strategy=LEND_AND_BORROW),
            share("B", 1, strategy=LEND_AND_BORROW),
        ],
        [
            running("a1", share="A", seq=1, instances=(0,), started_at=100),
            running("a2", share="A", seq=2, instances=(1,), started_at=200),
            running("b1", share="B", seq=3, priority=1, instances=(2,), started_at=100),
            running("b2", share="B", seq=4, priority=1, instances=(3,), started_at=200),
            queued("q1", share="Q", seq=5, n=2),
        ],
    )
    assert decide(snap) == [
        preempt("a2", by="q1"),
        preempt("b2", by="q1"),
        dispatch("q1", (1, 3)),
        waits("a2", NO_IDLE),
        waits("b2", NO_IDLE),
    ]


def test_reclaim_spares_a_victim_taken_early_that_turns_out_unneeded() -> None:
    # C 4: Q (L 3) idle; A (L 1) holds 4 (borrowed 3), P = 3 − 3 = 0; q1 needs 2.
    # Walk: a_small (priority 0) → free 1, not enough; a_big (n 2) → free 3, fits.
    # Spare last first: a_big is needed; without a_small free is 2, P 3 − 1 = 2 → 0: spared.
    snap = snapshot(
        NOW,
        [unit(G5, 4)],
        [share("Q", 3), share("A", 1, strategy=LEND_AND_BORROW)],
        [
            running("a_small", share="A", seq=1, priority=0, instances=(0,)),
            running("a_big", share="A", seq=2, priority=1, instances=(1, 2)),
            running("a_base", share="A", seq=3, priority=5, instances=(3,)),
            queued("q1", share="Q", seq=4, n=2),
        ],
    )
    assert decide(snap) == [
        preempt("a_big", by="q1"),
        dispatch("q1", (1, 2)),
        waits("a_big", NO_IDLE),
    ]


def test_reclaim_preempts_nothing_when_even_every_candidate_is_not_enough() -> None:
    # Capacity shrank to 2 below ΣL = 3. A borrows 1; taking a2 leaves free 1 < 2 and A is
    # then no longer borrowing, so a1 is no candidate: nothing is preempted.
    snap = snapshot(
        NOW,
        [unit(G5, 2)],
        [share("Q", 2), share("A", 1, strategy=LEND_AND_BORROW)],
        [
            running("a1", share="A", seq=1, instances=(0,), started_at=100),
            running("a2", share="A", seq=2, instances=(1,), started_at=200),
            queued("q1", share="Q", seq=3, n=2),
        ],
    )
    assert decide(snap) == [waits("q1", WAITING)]


# Lowered limits (semantics.md 5.7) --------------------------------------------------------------


def lowered_limit(*queued_jobs: Job) -> Snapshot:
    """S's limit was lowered to 1 while it held 2 (borrowed 1); T (L 2) is idle. C 3."""
    return snapshot(
        NOW,
        [unit(G5, 3)],
        [share("S", 1), share("T", 2)],
        [
            running("s1", share="S", seq=1, instances=(0,), started_at=100),
            running("s2", share="S", seq=2, instances=(1,), started_at=200),
            *queued_jobs,
        ],
    )


def test_usage_above_a_lowered_limit_is_not_preempted_for_its_own_sake() -> None:
    assert decide(lowered_limit()) == []


def test_usage_above_a_lowered_limit_is_reclaimed_for_an_in_quota_head() -> None:
    # t1 (n 2) in quota; free 1. S counts as borrowing 1: s2 (latest start) is taken,
    # free 2, P = T's idle 2 → 0.
    assert decide(lowered_limit(queued("t1", share="T", seq=3, n=2))) == [
        preempt("s2", by="t1"),
        dispatch("t1", (1, 2)),
        waits("s2", WAITING),
    ]


# Grace (semantics.md 5, Grace) ------------------------------------------------------------------


def grace_case(*victims: Job, pools: tuple[WarmPool, ...] = ()) -> Snapshot:
    """Q (L 2) queues q1 (n 2); A (L 0) borrows both instances. C 2, grace 30 s."""
    return snapshot(
        NOW,
        [unit(G5, 2)],
        [share("Q", 2), share("A", 0, strategy=LEND_AND_BORROW)],
        [*victims, queued("q1", share="Q", seq=9, n=2)],
        pools,
        grace=30,
    )


GRACE = [
    pytest.param(
        # Only a job victim has a checkpoint to write: an evicted pool delays nothing.
        grace_case(pools=(pool("a_pool", share="A", instances=(0, 1)),)),
        [evict("a_pool", by="q1"), dispatch("q1", (0, 1))],
        id="evicted-pool-gives-no-wait",
    ),
    pytest.param(
        grace_case(running("a1", share="A", seq=1, instances=(0, 1))),
        [
            preempt("a1", by="q1", grace_until=NOW + 30),
            dispatch("q1", (0, 1), starting_at=NOW + 30),
            waits("a1", NO_IDLE),
        ],
        id="running-victim-delays-the-preemptor-by-the-grace",
    ),
    pytest.param(
        grace_case(scheduled("a1", share="A", seq=1, instances=(0, 1), status=STARTING)),
        [preempt("a1", by="q1", was_running=False), dispatch("q1", (0, 1)), waits("a1", NO_IDLE)],
        id="starting-victim-gives-no-wait",
    ),
    pytest.param(
        # One RUNNING victim is enough for the preemptor to wait; the STARTING one's own
        # grace ends now.
        grace_case(
            running("a_run", share="A", seq=1, instances=(0,)),
            scheduled("a_boot", share="A", seq=2, instances=(1,), status=STARTING),
        ),
        [
            preempt("a_boot", by="q1", was_running=False),
            preempt("a_run", by="q1", grace_until=NOW + 30),
            dispatch("q1", (0, 1), starting_at=NOW + 30),
            waits("a_run", NO_IDLE, 1),
            waits("a_boot", NO_IDLE, 2),
        ],
        id="any-running-victim-delays-the-preemptor",
    ),
]


@pytest.mark.parametrize(("snap", "expected"), GRACE)
def test_grace(snap: Snapshot, expected: list[Decision]) -> None:
    assert decide(snap) == expected


def in_grace(not_before: float) -> Snapshot:
    """An idle share whose only job was preempted and may run again at `not_before`."""
    return snapshot(
        NOW,
        [unit(G5, 1)],
        [share("S", 1)],
        [queued("s1", share="S", seq=1, not_before=not_before, pending=WAITING)],
    )


def test_job_in_its_grace_period_is_not_placed() -> None:
    assert decide(in_grace(NOW + 1)) == []


def test_job_whose_grace_ended_now_is_placed() -> None:
    assert decide(in_grace(NOW)) == [dispatch("s1", (0,))]


def test_job_preempted_in_a_cycle_is_not_placed_again_in_that_cycle() -> None:
    # C 4: Q1, Q2 (L 1 each) idle; A (L 2) holds 4, borrowing 2; P = 2 − 2 = 0.
    # q1 (older) reclaims a1 (latest start). q2 reclaims a3 (next latest, n 2) though 1
    # would do: a3 frees 2, q2 takes one, and A (U 1, L 2) has room in quota for a1 — but
    # a1 was preempted in this cycle, so it waits.
    snap = snapshot(
        NOW,
        [unit(G5, 4)],
        [share("Q1", 1), share("Q2", 1), share("A", 2, strategy=LEND_AND_BORROW)],
        [
            running("a3", share="A", seq=1, instances=(2, 3), started_at=250),
            running("a2", share="A", seq=2, instances=(1,), started_at=200),
            running("a1", share="A", seq=3, instances=(0,), started_at=300),
            queued("q1", share="Q1", seq=4),
            queued("q2", share="Q2", seq=5),
        ],
    )
    assert decide(snap) == [
        preempt("a1", by="q1"),
        dispatch("q1", (0,)),
        preempt("a3", by="q2"),
        dispatch("q2", (2,)),
        waits("a3", NO_IDLE, 1),  # U 1 + 2 > L 2 would borrow, and free is 1 < 2
        waits("a1", WAITING, 2),  # in quota (U 1 + 1 ≤ 2): waits only for being preempted
    ]
