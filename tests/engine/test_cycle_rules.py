"""The scheduling cycle (semantics.md 5) on small snapshots: the walkthrough of semantics.md 7,
sharing strategies, borrow limits and the borrowing pass.

Elsewhere: test_cycle_placement (in-quota order, best effort, units), test_cycle_reclaim,
test_cycle_in_share, test_cycle_warm_pools, test_pending_reasons, test_inconsistent_snapshot.

Each case gives a snapshot and the whole list of decisions the cycle must take. Notation in
comments, per unit: C capacity, U(s) used, L(s) limit, B(s) borrow cap, free = C − ΣU,
P the borrow pool = F + Σ idle of lenders − Σ borrowed.
"""

from __future__ import annotations

import pytest

from scheduler import Job, JobStatus, Snapshot, Strategy
from scheduler.decisions import Decision
from tests.engine.builders import (
    BORROW_LIMIT,
    G5,
    IN_SHARE,
    LEND,
    LEND_AND_BORROW,
    NO_IDLE,
    NOW,
    RESERVE,
    WAITING,
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

SUBMITTED = JobStatus.SUBMITTED


# docs/semantics.md 7: the walkthrough, one cycle per step -----------------------------------------

WALKTHROUGH_SHARES = (
    share("QS1", 1, strategy=LEND_AND_BORROW, borrow_limit=200, in_share_preemption=True),
    share("QS2", 1, strategy=LEND),
    share("QS3", 1, strategy=RESERVE),
)


def walkthrough(now: float, *jobs: Job) -> Snapshot:
    """Capacity 3 × g5, W = 0, the three shares of docs/semantics.md 7, grace 30 s."""
    return snapshot(now, [unit(G5, 3)], WALKTHROUGH_SHARES, jobs, grace=30)


WALKTHROUGH = [
    pytest.param(
        # high: QS1 in quota (U 0+1 ≤ L 1). med: borrows, B = floor(1×200/100) = 2, free 2,
        # P = QS2's idle 1 → 0. low: would borrow 2 ≤ B but P would be −1 (QS3 reserves).
        walkthrough(
            0,
            queued("qs1_job_high", share="QS1", seq=1, priority=3, status=SUBMITTED),
            queued("qs1_job_med", share="QS1", seq=2, priority=2, status=SUBMITTED),
            queued("qs1_job_low", share="QS1", seq=3, priority=1, status=SUBMITTED),
        ),
        [
            dispatch("qs1_job_high", (0,), starting_at=0),
            dispatch("qs1_job_med", (1,), borrowed=1, starting_at=0),
            waits("qs1_job_low", NO_IDLE, 1),
        ],
        id="t0-high-in-quota-med-borrows-low-waits-for-reserved-capacity",
    ),
    pytest.param(
        # qs2_job_1 in quota but P = 1 − 1 = 0 and placing it lowers P: reclaim QS1's
        # borrowing jobs, lower priority first → med. med returns ahead of low (position 1);
        # low's reason is unchanged, so nothing is written for it.
        walkthrough(
            120,
            running("qs1_job_high", share="QS1", seq=1, priority=3, instances=(0,), started_at=60),
            running("qs1_job_med", share="QS1", seq=2, priority=2, instances=(1,), started_at=60),
            queued("qs1_job_low", share="QS1", seq=3, priority=1, pending=NO_IDLE),
            queued("qs2_job_1", share="QS2", seq=4, priority=1, status=SUBMITTED),
        ),
        [
            preempt("qs1_job_med", by="qs2_job_1", grace_until=150),
            dispatch("qs2_job_1", (1,), starting_at=150),
            waits("qs1_job_med", NO_IDLE, 1),
        ],
        id="t120-qs2-reclaims-med-cross-share",
    ),
    pytest.param(
        # low (now priority 4) cannot borrow (free 1, P 0); in-share it preempts high (3 < 4)
        # and runs on QS1's own instance. med is still in P's way and has no lower victim.
        walkthrough(
            240,
            running("qs1_job_high", share="QS1", seq=1, priority=3, instances=(0,), started_at=60),
            queued("qs1_job_med", share="QS1", seq=2, priority=2, pending=NO_IDLE, not_before=150),
            queued("qs1_job_low", share="QS1", seq=3, priority=4, pending=NO_IDLE),
            running("qs2_job_1", share="QS2", seq=4, priority=1, instances=(1,), started_at=210),
        ),
        [
            preempt("qs1_job_high", by="qs1_job_low", kind=IN_SHARE, grace_until=270),
            dispatch("qs1_job_low", (0,), starting_at=270),
            waits("qs1_job_high", NO_IDLE, 1),
        ],
        id="t240-raised-low-preempts-high-in-share",
    ),
]


@pytest.mark.parametrize(("snap", "expected"), WALKTHROUGH)
def test_walkthrough_of_spec_section_7(snap: Snapshot, expected: list[Decision]) -> None:
    assert decide(snap) == expected


# Sharing strategies (semantics.md 2, 3) --------------------------------------------------------


def borrower_beside(lender_strategy: Strategy) -> Snapshot:
    """A holds its limit and queues one more; Z is idle with the given strategy. C = 2."""
    return snapshot(
        NOW,
        [unit(G5, 2)],
        [share("A", 1, strategy=LEND_AND_BORROW), share("Z", 1, strategy=lender_strategy)],
        [running("a1", share="A", seq=1), queued("a2", share="A", seq=2)],
    )


def over_limit_share(strategy: Strategy) -> Snapshot:
    """S holds its limit and queues one more; Z is idle and lends. C = 2."""
    return snapshot(
        NOW,
        [unit(G5, 2)],
        [share("S", 1, strategy=strategy), share("Z", 1, strategy=LEND)],
        [running("s1", share="S", seq=1), queued("s2", share="S", seq=2)],
    )


STRATEGIES = [
    # free 1, but P = F 0 + (a RESERVE share's idle is not in P) = 0: nothing to borrow.
    pytest.param(borrower_beside(RESERVE), [waits("a2", NO_IDLE)], id="reserve-never-lends"),
    pytest.param(
        borrower_beside(LEND), [dispatch("a2", (1,), borrowed=1)], id="lend-lends-idle-capacity"
    ),
    pytest.param(
        borrower_beside(LEND_AND_BORROW),
        [dispatch("a2", (1,), borrowed=1)],
        id="lend-and-borrow-lends-idle-capacity",
    ),
    pytest.param(over_limit_share(LEND), [waits("s2", WAITING)], id="lend-never-borrows"),
    pytest.param(over_limit_share(RESERVE), [waits("s2", WAITING)], id="reserve-never-borrows"),
    pytest.param(
        over_limit_share(LEND_AND_BORROW),
        [dispatch("s2", (1,), borrowed=1)],
        id="lend-and-borrow-borrows",
    ),
]


@pytest.mark.parametrize(("snap", "expected"), STRATEGIES)
def test_sharing_strategy(snap: Snapshot, expected: list[Decision]) -> None:
    assert decide(snap) == expected


def owed_instance(head: Job) -> Snapshot:
    """C 3: R (RESERVE) and Q (LEND) are idle with L 1 each; A (L 1) holds 2, borrowing Q's
    idle instance: free 1 (R's), P = Q's idle 1 − A's borrowed 1 = 0."""
    return snapshot(
        NOW,
        [unit(G5, 3)],
        [share("R", 1, strategy=RESERVE), share("Q", 1), share("A", 1, strategy=LEND_AND_BORROW)],
        [
            running("a1", share="A", seq=1, instances=(0,), started_at=100),
            running("a2", share="A", seq=2, instances=(1,), started_at=200),
            head,
        ],
    )


def test_reserve_share_takes_its_reserved_instance_without_reclaim() -> None:
    # An in-quota placement of a RESERVE share does not lower P: free 1 → 0 is all it needs.
    assert decide(owed_instance(queued("r1", share="R", seq=3))) == [dispatch("r1", (2,))]


def test_lend_share_reclaims_the_instance_it_lent() -> None:
    # Q's in-quota placement lowers P from 0 to −1: it reclaims a2 (latest start); P 1 → 0.
    assert decide(owed_instance(queued("q1", share="Q", seq=3))) == [
        preempt("a2", by="q1"),
        dispatch("q1", (1,)),
        waits("a2", NO_IDLE),
    ]


# borrow_limit: B = floor(L × borrow_limit / 100) ------------------------------------------


def borrower_with_limit(borrow_limit: int) -> Snapshot:
    """A (L 3) holds 3 and queues four 1-instance jobs; Z (L 5, LEND) is idle. C = 8."""
    return snapshot(
        NOW,
        [unit(G5, 8)],
        [
            share("A", 3, strategy=LEND_AND_BORROW, borrow_limit=borrow_limit),
            share("Z", 5, strategy=LEND),
        ],
        [running("a0", share="A", seq=0, instances=(0, 1, 2))]
        + [queued(f"a{i}", share="A", seq=i) for i in range(1, 5)],
    )


def first_borrow(placed: int) -> list[Decision]:
    """a1..a{placed} borrow instances 3, 4, ...; the rest wait at the borrow limit.

    Each reports borrowed_instances = min(n 1, borrowed(A) after it) = 1.
    """
    dispatched: list[Decision] = [
        dispatch(f"a{i}", (2 + i,), borrowed=1) for i in range(1, placed + 1)
    ]
    waiting: list[Decision] = [
        waits(f"a{i}", BORROW_LIMIT, i - placed) for i in range(placed + 1, 5)
    ]
    return dispatched + waiting


BORROW_LIMITS = [
    pytest.param(0, first_borrow(0), id="zero-means-no-borrowing"),
    pytest.param(50, first_borrow(1), id="L3-50pct-rounds-1.5-down-to-1"),
    pytest.param(66, first_borrow(1), id="L3-66pct-rounds-1.98-down-to-1"),
    pytest.param(100, first_borrow(3), id="L3-100pct-borrows-3"),
    # -1: unlimited; P = 5 covers all four.
    pytest.param(-1, first_borrow(4), id="minus-one-is-unlimited"),
]


@pytest.mark.parametrize(("borrow_limit", "expected"), BORROW_LIMITS)
def test_borrow_limit(borrow_limit: int, expected: list[Decision]) -> None:
    assert decide(borrower_with_limit(borrow_limit)) == expected


# The borrowing pass: FIFO by submission across shares (semantics.md 5.4) ------------------------


def test_older_submission_borrows_first_across_shares() -> None:
    # A and B each hold their limit; Z's one idle instance is the whole pool (P = 1).
    # b1 (seq 1) is older than a1 (seq 2), whatever the share names say.
    snap = snapshot(
        NOW,
        [unit(G5, 3)],
        [
            share("A", 1, strategy=LEND_AND_BORROW),
            share("B", 1, strategy=LEND_AND_BORROW),
            share("Z", 1, strategy=LEND),
        ],
        [
            running("a0", share="A", seq=0, instances=(0,)),
            running("b0", share="B", seq=0, instances=(1,)),
            queued("b1", share="B", seq=1),
            queued("a1", share="A", seq=2),
        ],
    )
    assert decide(snap) == [dispatch("b1", (2,), borrowed=1), waits("a1", NO_IDLE)]


def test_older_borrower_that_does_not_fit_does_not_block_a_smaller_later_one() -> None:
    # P = Z's idle 2. b_big needs 3 (P would be −1); a_small needs 1 and borrows.
    snap = snapshot(
        NOW,
        [unit(G5, 4)],
        [
            share("A", 1, strategy=LEND_AND_BORROW),
            share("B", 1, strategy=LEND_AND_BORROW),
            share("Z", 2, strategy=LEND),
        ],
        [
            running("a0", share="A", seq=0, instances=(0,)),
            running("b0", share="B", seq=0, instances=(1,)),
            queued("b_big", share="B", seq=1, n=3),
            queued("a_small", share="A", seq=2),
        ],
    )
    assert decide(snap) == [dispatch("a_small", (2,), borrowed=1), waits("b_big", NO_IDLE)]


def test_placed_borrower_exposes_its_shares_next_job_to_the_pass() -> None:
    # A and B have no limit (L 0); P = Z's idle 2 (Y reserves its own). a1 borrows first
    # and exposes a2 (seq 3), which joins the pass behind b1 (seq 2) and then finds P = 0.
    snap = snapshot(
        NOW,
        [unit(G5, 4)],
        [
            share("A", 0, strategy=LEND_AND_BORROW),
            share("B", 0, strategy=LEND_AND_BORROW),
            share("Z", 2, strategy=LEND),
            share("Y", 2, strategy=RESERVE),
        ],
        [
            queued("a1", share="A", seq=1),
            queued("b1", share="B", seq=2),
            queued("a2", share="A", seq=3),
        ],
    )
    assert decide(snap) == [
        dispatch("a1", (0,), borrowed=1),
        dispatch("b1", (1,), borrowed=1),
        waits("a2", NO_IDLE),
    ]
