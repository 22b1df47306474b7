"""Pending reasons and positions of the jobs a cycle leaves waiting (docs/semantics.md 4), and when
a SetPendingReason is written.

Notation in comments, per unit: C capacity, U(s) used, L(s) limit, B(s) borrow cap,
free = C − ΣU, P the borrow pool = F + Σ idle of lenders − Σ borrowed.
"""

from __future__ import annotations

import pytest

from scheduler import Job, JobStatus, QuotaShare, Snapshot
from scheduler.decisions import Decision
from tests.engine.builders import (
    BORROW_LIMIT,
    G5,
    LEND,
    LEND_AND_BORROW,
    MAX_RESOURCE,
    NO_IDLE,
    NOW,
    P4,
    QUOTA_EXCEEDED,
    RESERVE,
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


def one_unit(capacity: int, shares: list[QuotaShare], *jobs: Job) -> Snapshot:
    return snapshot(NOW, [unit(G5, capacity)], shares, jobs)


REASONS = [
    # 1. SERVICE_ENVIRONMENT_MAX_RESOURCE
    pytest.param(
        one_unit(3, [share("S", 3)], queued("j", share="S", seq=1, n=4)),
        [waits("j", MAX_RESOURCE)],
        id="1-more-instances-than-the-unit-has",
    ),
    pytest.param(
        snapshot(
            NOW,
            [unit(G5, 3)],
            [share("S", limits={G5: 1, P4: 1})],
            [queued("j", share="S", seq=1, unit=P4)],
        ),
        [waits("j", MAX_RESOURCE)],
        id="1-unit-not-in-the-service-environment",
    ),
    pytest.param(
        snapshot(NOW, [unit(G5, 0)], [share("S", 0)], [queued("j", share="S", seq=1)]),
        [waits("j", MAX_RESOURCE)],
        id="1-unit-with-no-capacity",
    ),
    pytest.param(
        # n 4 is also beyond L 1: the first reason that applies wins.
        one_unit(3, [share("S", 1)], queued("j", share="S", seq=1, n=4)),
        [waits("j", MAX_RESOURCE)],
        id="1-comes-before-2",
    ),
    # 2. QUOTA_MANAGEMENT_LIMIT_EXCEEDED: n > L + B (L for shares that cannot borrow)
    pytest.param(
        one_unit(3, [share("S", 1, strategy=LEND)], queued("j", share="S", seq=1, n=2)),
        [waits("j", QUOTA_EXCEEDED)],
        id="2-lend-share-more-than-its-limit",
    ),
    pytest.param(
        one_unit(3, [share("S", 1, strategy=RESERVE)], queued("j", share="S", seq=1, n=2)),
        [waits("j", QUOTA_EXCEEDED)],
        id="2-reserve-share-more-than-its-limit",
    ),
    pytest.param(
        # B = floor(1 × 100 / 100) = 1: at most 2.
        one_unit(
            3,
            [share("S", 1, strategy=LEND_AND_BORROW, borrow_limit=100), share("Z", 2)],
            queued("j", share="S", seq=1, n=3),
        ),
        [waits("j", QUOTA_EXCEEDED)],
        id="2-more-than-limit-plus-borrow-limit",
    ),
    pytest.param(
        # Unlimited borrowing: 3 on L 1 is no misconfiguration; P = Z's idle 2 lets it run.
        one_unit(
            3,
            [share("S", 1, strategy=LEND_AND_BORROW), share("Z", 2)],
            queued("j", share="S", seq=1, n=3),
        ),
        [dispatch("j", (0, 1, 2), borrowed=2)],
        id="2-not-with-unlimited-borrowing",
    ),
    # 3. BORROW_LIMIT_REACHED
    pytest.param(
        # borrow_limit 0: B 0; Z's idle instance is there, but S may not take it.
        one_unit(
            2,
            [share("S", 1, strategy=LEND_AND_BORROW, borrow_limit=0), share("Z", 1)],
            running("s1", share="S", seq=1),
            queued("s2", share="S", seq=2),
        ),
        [waits("s2", BORROW_LIMIT)],
        id="3-beyond-the-borrow-limit",
    ),
    pytest.param(
        # B = floor(2 × 50 / 100) = 1, S already borrows 1; there is no idle capacity either.
        one_unit(
            4,
            [share("S", 2, strategy=LEND_AND_BORROW, borrow_limit=50), share("Z", 2)],
            running("s1", share="S", seq=1, instances=(0, 1, 2)),
            running("z1", share="Z", seq=2, instances=(3,)),
            queued("s2", share="S", seq=3),
        ),
        [waits("s2", BORROW_LIMIT)],
        id="3-comes-before-4",
    ),
    # 4. NO_IDLE_CAPACITY_TO_BORROW
    pytest.param(
        # free 1 but P = 0: the free instance is a RESERVE share's idle one.
        one_unit(
            2,
            [share("S", 1, strategy=LEND_AND_BORROW), share("R", 1, strategy=RESERVE)],
            running("s1", share="S", seq=1),
            queued("s2", share="S", seq=2),
        ),
        [waits("s2", NO_IDLE)],
        id="4-borrow-pool-too-small",
    ),
    # 5. WAITING_FOR_CAPACITY
    pytest.param(
        one_unit(
            2,
            [share("S", 1), share("Z", 1)],
            running("s1", share="S", seq=1),
            queued("s2", share="S", seq=2),
        ),
        [waits("s2", WAITING)],
        id="5-at-its-limit-and-cannot-borrow",
    ),
    pytest.param(
        # Capacity shrank (C 1 < ΣL 2): T holds the instance within its own limit, so S's
        # in-quota job cannot reclaim it.
        one_unit(
            1,
            [share("S", 1), share("T", 1)],
            running("t1", share="T", seq=1),
            queued("s1", share="S", seq=2),
        ),
        [waits("s1", WAITING)],
        id="5-owed-capacity-held-by-jobs-that-may-not-be-preempted",
    ),
    pytest.param(
        one_unit(1, [share("S", 1)], queued("s1", share="S", seq=1, not_before=NOW + 10)),
        [waits("s1", WAITING)],
        id="5-in-quota-but-in-its-grace-period",
    ),
]


@pytest.mark.parametrize(("snap", "expected"), REASONS)
def test_pending_reason(snap: Snapshot, expected: list[Decision]) -> None:
    assert decide(snap) == expected


def test_position_counts_the_jobs_ahead_in_the_shares_order() -> None:
    # S's order: huge (priority 9, never placeable), c (5, seq 2), b (5, seq 3), a (1).
    # c takes the one instance; positions are 1 + the waiting jobs ahead, per share.
    snap = one_unit(
        1,
        [share("S", 1), share("T", 0)],
        queued("a", share="S", seq=1, priority=1),
        queued("c", share="S", seq=2, priority=5),
        queued("b", share="S", seq=3, priority=5),
        queued("huge", share="S", seq=4, priority=9, n=2),
        queued("t1", share="T", seq=5),
    )
    assert decide(snap) == [
        dispatch("c", (0,)),
        waits("huge", MAX_RESOURCE, 1),
        waits("b", WAITING, 2),
        waits("a", WAITING, 3),
        waits("t1", QUOTA_EXCEEDED, 1),
    ]


def test_reason_is_written_only_when_it_changed_or_the_job_was_submitted() -> None:
    # S is at its limit: every queued job waits for capacity.
    snap = one_unit(
        1,
        [share("S", 1)],
        running("r", share="S", seq=0),
        queued("unchanged", share="S", seq=1, pending=WAITING),
        queued("changed", share="S", seq=2, pending=NO_IDLE),
        queued("new", share="S", seq=3, status=JobStatus.SUBMITTED),
    )
    assert decide(snap) == [waits("changed", WAITING, 2), waits("new", WAITING, 3)]


def test_shifted_position_alone_is_not_written() -> None:
    # The engine treats position as informational (readers derive it from the order):
    # late (stored reason WAITING) moves from 1 to 2 behind a higher-priority arrival,
    # and only the arrival is written.
    snap = one_unit(
        1,
        [share("S", 1)],
        running("r", share="S", seq=0),
        queued("late", share="S", seq=1, pending=WAITING),
        queued("urgent", share="S", seq=2, priority=5, status=JobStatus.SUBMITTED),
    )
    assert decide(snap) == [waits("urgent", WAITING, 1)]
