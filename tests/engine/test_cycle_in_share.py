"""In-share preemption (docs/semantics.md 5.5): a head that does not fit may preempt its own share's
warm pools and strictly lower-priority jobs, when the share has it switched on.

Notation in comments, per unit: C capacity, U(s) used, L(s) limit, free = C − ΣU, P the
borrow pool = F + Σ idle of lenders − Σ borrowed.
"""

from __future__ import annotations

import pytest

from scheduler import Job, Snapshot
from scheduler.decisions import Decision
from tests.engine.builders import (
    G5,
    IN_SHARE,
    LEND_AND_BORROW,
    NOW,
    OTHER_MATCH,
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


def own_share(*jobs: Job, preemption: bool = True) -> Snapshot:
    """S (LEND, L 1, C 1) with in-share preemption on or off."""
    return snapshot(NOW, [unit(G5, 1)], [share("S", 1, in_share_preemption=preemption)], jobs)


IN_SHARE_CASES = [
    pytest.param(
        own_share(
            running("s_lo", share="S", seq=1, priority=1),
            queued("s_hi", share="S", seq=2, priority=2),
        ),
        [preempt("s_lo", by="s_hi", kind=IN_SHARE), dispatch("s_hi", (0,)), waits("s_lo", WAITING)],
        id="strictly-lower-priority-is-preempted",
    ),
    pytest.param(
        own_share(
            running("s_run", share="S", seq=1, priority=2),
            queued("s_q", share="S", seq=2, priority=2),
        ),
        [waits("s_q", WAITING)],
        id="equal-priority-is-not-preempted",
    ),
    pytest.param(
        own_share(
            running("s_lo", share="S", seq=1, priority=1),
            queued("s_hi", share="S", seq=2, priority=2),
            preemption=False,
        ),
        [waits("s_hi", WAITING)],
        id="with-in-share-preemption-off-the-head-waits",
    ),
    pytest.param(
        # r was submitted first at priority 5 and lowered to 0 since; q (priority 3) now
        # outranks it.
        own_share(
            running("r", share="S", seq=1, priority=0), queued("q", share="S", seq=2, priority=3)
        ),
        [preempt("r", by="q", kind=IN_SHARE), dispatch("q", (0,)), waits("r", WAITING)],
        id="running-job-whose-priority-was-lowered-becomes-a-victim",
    ),
]


@pytest.mark.parametrize(("snap", "expected"), IN_SHARE_CASES)
def test_in_share_preemption(snap: Snapshot, expected: list[Decision]) -> None:
    assert decide(snap) == expected


def test_in_share_preemption_evicts_own_pools_before_own_jobs() -> None:
    # C 3: S (L 1) holds s_lo and a non-matching pool (U 2, borrowed 1); Z (L 2) holds one,
    # so P = 1 − 1 = 0 and free 0: s_hi cannot borrow. In-share, the pool goes first (even
    # though its job had priority 9): free 1, P 1 → 0 with s_hi borrowing, so s_lo stays.
    # docs/semantics.md 5.5 lets in-share preemption take the share's pools (any).
    snap = snapshot(
        NOW,
        [unit(G5, 3)],
        [share("S", 1, strategy=LEND_AND_BORROW, in_share_preemption=True), share("Z", 2)],
        [
            running("s_lo", share="S", seq=1, priority=0, instances=(0,)),
            running("z1", share="Z", seq=2, instances=(2,)),
            queued("s_hi", share="S", seq=3, priority=5),
        ],
        [pool("s_pool", share="S", instances=(1,), priority=9, match=OTHER_MATCH)],
    )
    assert decide(snap) == [evict("s_pool", by="s_hi"), dispatch("s_hi", (1,), borrowed=1)]
