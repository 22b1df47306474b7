"""Placement in the scheduling cycle (docs/semantics.md 1, 5.3, 5.6): the in-quota pick order,
best-effort ordering, DISABLED shares, several capacity units and instance numbering.

Notation in comments, per unit: C capacity, U(s) used, L(s) limit, free = C − ΣU, P the
borrow pool = F + Σ idle of lenders − Σ borrowed.
"""

from __future__ import annotations

import pytest

from scheduler import Job, ShareState, Snapshot
from scheduler.decisions import Decision
from tests.engine.builders import (
    G5,
    LEND,
    LEND_AND_BORROW,
    NO_IDLE,
    NOW,
    P4,
    WAITING,
    decide,
    dispatch,
    queued,
    running,
    share,
    snapshot,
    unit,
    waits,
)

# The in-quota pass: lowest U/L first, then higher priority, then older (docs/semantics.md 5.3) ----


def two_lenders(*jobs: Job, x: tuple[int, int], y: tuple[int, int]) -> Snapshot:
    """Shares X and Y (LEND) given as (L, U), with C = L(X) + L(Y): room for every head.
    X's running jobs hold instances 0.., Y's the next ones."""
    (x_limit, x_used), (y_limit, y_used) = x, y
    held = [running(f"x_run{i}", share="X", seq=0, instances=(i,)) for i in range(x_used)]
    held += [running(f"y_run{i}", share="Y", seq=0, instances=(x_used + i,)) for i in range(y_used)]
    return snapshot(
        NOW,
        [unit(G5, x_limit + y_limit)],
        [share("X", x_limit), share("Y", y_limit)],
        [*held, *jobs],
    )


IN_QUOTA_ORDER = [
    pytest.param(
        # X: U/L = 2/4; Y: 0/2. Y goes first and takes the lowest free instance.
        two_lenders(
            queued("x1", share="X", seq=1),
            queued("y1", share="Y", seq=2),
            x=(4, 2),
            y=(2, 0),
        ),
        [dispatch("y1", (2,)), dispatch("x1", (3,))],
        id="lowest-U-over-L-first",
    ),
    pytest.param(
        # 1/2 each: y1 has the higher priority.
        two_lenders(
            queued("x1", share="X", seq=1, priority=1),
            queued("y1", share="Y", seq=2, priority=2),
            x=(2, 1),
            y=(2, 1),
        ),
        [dispatch("y1", (2,)), dispatch("x1", (3,))],
        id="tie-higher-head-priority-first",
    ),
    pytest.param(
        # 1/2 each, equal priority: y1 was submitted first.
        two_lenders(
            queued("x1", share="X", seq=2),
            queued("y1", share="Y", seq=1),
            x=(2, 1),
            y=(2, 1),
        ),
        [dispatch("y1", (2,)), dispatch("x1", (3,))],
        id="tie-older-submission-first",
    ),
    pytest.param(
        # Recomputed after each placement: 0/2 tie (x1 older), then Y 0/2 < X 1/2, then the
        # 1/2 tie again (x2 older than y2).
        two_lenders(
            queued("x1", share="X", seq=1),
            queued("x2", share="X", seq=2),
            queued("y1", share="Y", seq=3),
            queued("y2", share="Y", seq=4),
            x=(2, 0),
            y=(2, 0),
        ),
        [dispatch("x1", (0,)), dispatch("y1", (1,)), dispatch("x2", (2,)), dispatch("y2", (3,))],
        id="ratio-recomputed-after-each-placement",
    ),
]


@pytest.mark.parametrize(("snap", "expected"), IN_QUOTA_ORDER)
def test_in_quota_pick_order(snap: Snapshot, expected: list[Decision]) -> None:
    assert decide(snap) == expected


# Best-effort ordering, DISABLED shares ---------------------------------------------------


def test_head_that_cannot_be_placed_is_skipped_for_a_smaller_lower_priority_job() -> None:
    # S (L 2, C 2) runs r; big (n 2) would need 3 > L and S may not borrow or preempt;
    # small (n 1) fits in quota behind it.
    snap = snapshot(
        NOW,
        [unit(G5, 2)],
        [share("S", 2)],
        [
            running("r", share="S", seq=0, priority=9),
            queued("big", share="S", seq=1, priority=5, n=2),
            queued("small", share="S", seq=2, priority=1),
        ],
    )
    assert decide(snap) == [dispatch("small", (1,)), waits("big", WAITING)]


def test_a_skipped_head_steps_aside_alone_and_its_next_job_joins_the_next_round() -> None:
    # C 3, S0 and S1 have no limit (L 0) and borrow; S0's j5 holds 2, so P = 1. Round 1:
    # j1 and j7 (n 2) cannot borrow and are skipped. Round 2: j9 (n 2) is S0's head, even
    # though j7 failed at the same size, so S1's j12 is the only one that can borrow and
    # takes the last instance before S0's j11 joins in round 3.
    snap = snapshot(
        NOW,
        [unit(G5, 3)],
        [share("S0", 0, strategy=LEND_AND_BORROW), share("S1", 0, strategy=LEND_AND_BORROW)],
        [
            running("j5", share="S0", seq=1, instances=(0, 1)),
            queued("j1", share="S1", seq=2, n=2),
            queued("j7", share="S0", seq=3, n=2),
            queued("j9", share="S0", seq=4, n=2),
            queued("j11", share="S0", seq=5),
            queued("j12", share="S1", seq=6),
        ],
    )
    assert decide(snap) == [
        dispatch("j12", (2,), borrowed=1),
        waits("j7", NO_IDLE, 1),
        waits("j9", NO_IDLE, 2),
        waits("j11", NO_IDLE, 3),
        waits("j1", NO_IDLE, 1),
    ]


def test_disabled_share_still_runs_its_queued_jobs() -> None:
    snap = snapshot(
        NOW,
        [unit(G5, 2)],
        [share("D", 1, state=ShareState.DISABLED), share("Z", 1)],
        [queued("d1", share="D", seq=1)],
    )
    assert decide(snap) == [dispatch("d1", (0,))]


def test_disabled_share_still_lends_its_idle_capacity() -> None:
    snap = snapshot(
        NOW,
        [unit(G5, 2)],
        [share("A", 1, strategy=LEND_AND_BORROW), share("D", 1, state=ShareState.DISABLED)],
        [running("a1", share="A", seq=1), queued("a2", share="A", seq=2)],
    )
    assert decide(snap) == [dispatch("a2", (1,), borrowed=1)]


# Multi-instance jobs and several capacity units -------------------------------------------


def test_jobs_of_one_unit_do_not_affect_another() -> None:
    # g5 is full (a_g5 holds A's limit, z_g5 Z's); p4 is empty: a_p4 (n 2) is in quota for 1
    # and borrows Z's idle p4 instance (P_p4 = 1 → 0), numbered from 0 on p4.
    limits = {G5: 1, P4: 1}
    snap = snapshot(
        NOW,
        [unit(G5, 2), unit(P4, 2)],
        [
            share("A", strategy=LEND_AND_BORROW, limits=limits),
            share("Z", strategy=LEND, limits=limits),
        ],
        [
            running("a_g5", share="A", seq=0, instances=(0,)),
            running("z_g5", share="Z", seq=0, instances=(1,)),
            queued("a_more_g5", share="A", seq=1),
            queued("a_p4", share="A", seq=2, n=2, unit=P4),
        ],
    )
    assert decide(snap) == [dispatch("a_p4", (0, 1), borrowed=1), waits("a_more_g5", NO_IDLE)]


def test_placement_takes_the_lowest_free_instance_numbers() -> None:
    snap = snapshot(
        NOW,
        [unit(G5, 4)],
        [share("S", 4)],
        [
            running("r1", share="S", seq=0, instances=(1,)),
            running("r3", share="S", seq=0, instances=(3,)),
            queued("pair", share="S", seq=1, n=2),
        ],
    )
    assert decide(snap) == [dispatch("pair", (0, 2))]


def test_multi_instance_borrower_reports_only_the_instances_it_borrows() -> None:
    # A: U 1 + 3 = 4 against L 2 → borrowed 2 of its 3 instances; P = Z's idle 2 → 0.
    snap = snapshot(
        NOW,
        [unit(G5, 4)],
        [share("A", 2, strategy=LEND_AND_BORROW), share("Z", 2)],
        [running("a1", share="A", seq=1), queued("a2", share="A", seq=2, n=3)],
    )
    assert decide(snap) == [dispatch("a2", (1, 2, 3), borrowed=2)]
