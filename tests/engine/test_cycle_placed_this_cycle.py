"""A job placed earlier in the same cycle is a victim candidate (docs/semantics.md, "Placed
this cycle"): the most recent of all, in reclaim and in in-share preemption.  Taking it
withdraws its placement: no Dispatch and no Preempt for it, it waits again, skipped for the
rest of the cycle; a pool it had taken is evicted; what its own placement preempted stays
preempted.

Each case gives a snapshot, the whole list of decisions, and the trace (scheduler.cycle.trace)
that shows the withdrawn placement.  Notation in comments, per unit: C capacity, U(s) used,
L(s) limit, free = C − ΣU, P the borrow pool = F + Σ idle of lenders − Σ borrowed.
"""

from __future__ import annotations

from typing import NamedTuple

import pytest

from scheduler import Snapshot
from scheduler.cycle import trace
from scheduler.decisions import Decision, TraceStep, Withdraw
from tests.engine.builders import (
    G5,
    IN_SHARE,
    LEND_AND_BORROW,
    NO_IDLE,
    NOW,
    RESERVE,
    WAITING,
    decide,
    dispatch,
    evict,
    pool,
    preempt,
    queued,
    running,
    share,
    snapshot,
    unit,
    waits,
)


class Case(NamedTuple):
    snap: Snapshot
    decisions: list[Decision]
    steps: list[TraceStep]


def reclaim_from_a_borrower_placed_now() -> Case:
    # C 2 < ΣL 3 (F −1). Round 1: q_pair (n 2) is in quota but free is 1 and A does not
    # borrow yet; a2 borrows the free instance (P 1 → 0); q_pair is skipped. Round 2: q_one
    # must reclaim from A: a2, placed now, is the most recent candidate, and enough.
    snap = snapshot(
        NOW,
        [unit(G5, 2)],
        [share("Q", 2), share("A", 1, strategy=LEND_AND_BORROW)],
        [
            running("a1", share="A", seq=1, instances=(0,)),
            queued("a2", share="A", seq=2),
            queued("q_pair", share="Q", seq=3, n=2, priority=1),
            queued("q_one", share="Q", seq=4),
        ],
    )
    return Case(
        snap,
        [dispatch("q_one", (1,)), waits("a2", NO_IDLE), waits("q_pair", WAITING)],
        [dispatch("a2", (1,), borrowed=1), Withdraw("a2", "q_one"), dispatch("q_one", (1,))],
    )


def in_share_after_a_reclaim() -> Case:
    # C 4: A (L 3, LEND, in-share preemption) runs a1 (n 2); B (L 0) borrows b1 (n 2).
    # Round 1: hi (n 3) cannot take enough from a1 alone and is skipped. Round 2: lo (n 1)
    # is in quota and reclaims b1; hi, considered again, preempts a1 and takes lo: lo's
    # placement is withdrawn, b1's preemption stands.
    snap = snapshot(
        NOW,
        [unit(G5, 4)],
        [share("A", 3, in_share_preemption=True), share("B", 0, strategy=LEND_AND_BORROW)],
        [
            running("a1", share="A", seq=1, instances=(0, 1)),
            running("b1", share="B", seq=2, instances=(2, 3)),
            queued("hi", share="A", seq=3, n=3, priority=5),
            queued("lo", share="A", seq=4, priority=1),
        ],
    )
    return Case(
        snap,
        [
            preempt("b1", by="lo"),
            preempt("a1", by="hi", kind=IN_SHARE),
            dispatch("hi", (0, 1, 2)),
            waits("lo", WAITING, 1),
            waits("a1", WAITING, 2),
            waits("b1", NO_IDLE, 1),
        ],
        [
            preempt("b1", by="lo"),
            dispatch("lo", (2,)),
            preempt("a1", by="hi", kind=IN_SHARE),
            Withdraw("lo", "hi"),
            dispatch("hi", (0, 1, 2)),
        ],
    )


def withdrawn_reuse_evicts_the_pool() -> Case:
    # C 5: S0 reserves 3, S1 (L 2) queues j4 (n 3) and j1 (n 2), S2 (L 0) keeps pool w on
    # instance 0 (borrowed 1), matching j5: P = S1's idle 2 − 1 = 1. Round 1: j4 cannot
    # borrow 1 (P −2); j5 reuses w. Round 2: j1 is in quota but would leave P at −1; it
    # takes j5, whose pool is Available again and is evicted for j1.
    snap = snapshot(
        NOW,
        [unit(G5, 5)],
        [
            share("S0", 3, strategy=RESERVE),
            share("S1", 2, strategy=LEND_AND_BORROW),
            share("S2", 0, strategy=LEND_AND_BORROW),
        ],
        [
            queued("j1", share="S1", seq=1, n=2),
            queued("j4", share="S1", seq=2, n=3, priority=1),
            queued("j5", share="S2", seq=3),
        ],
        [pool("w", share="S2", instances=(0,))],
    )
    return Case(
        snap,
        [
            evict("w", by="j1"),
            dispatch("j1", (0, 1)),
            waits("j4", NO_IDLE, 1),
            waits("j5", NO_IDLE, 1),
        ],
        [
            dispatch("j5", (0,), borrowed=1, warm_pool="w"),
            Withdraw("j5", "j1"),
            evict("w", by="j1"),
            dispatch("j1", (0, 1)),
        ],
    )


CASES = [
    pytest.param(reclaim_from_a_borrower_placed_now(), id="reclaim-withdraws-a-borrower"),
    pytest.param(in_share_after_a_reclaim(), id="in-share-withdraws-a-lower-priority-job"),
    pytest.param(withdrawn_reuse_evicts_the_pool(), id="withdrawn-reuse-evicts-its-pool"),
]


@pytest.mark.parametrize("case", CASES)
def test_a_job_placed_this_cycle_is_withdrawn_when_taken(case: Case) -> None:
    assert decide(case.snap) == case.decisions


@pytest.mark.parametrize("case", CASES)
def test_the_trace_shows_the_withdrawn_placement(case: Case) -> None:
    assert list(trace(case.snap)) == case.steps
