"""Three rules the engine already follows, now settled (docs/semantics.md), pinned here:

- a placement that reuses a warm pool emits the new job's DISPATCHED, then the old job's
  WARM_POOL_REUSED;
- deleting a share terminates its open jobs in submission order (a job on a warm pool first
  ends that pool, USER), then ends its Available pools (USER) in the order they became
  Available, and emits SHARE_DELETED last;
- a share's head is its first queued job that may be placed in this cycle: a
  MISCONFIGURATION job and a victim still in its grace period are passed over for the whole
  cycle, as if already skipped (costing no round), and keep their place and position.
"""

from __future__ import annotations

import pytest

from scheduler import Job, Snapshot
from scheduler.decisions import Decision
from scheduler.simulate import run_scenario
from tests.engine.builders import (
    G5,
    IN_SHARE,
    LEND_AND_BORROW,
    MAX_RESOURCE,
    NO_IDLE,
    NOW,
    WAITING,
    decide,
    dispatch,
    preempt,
    queued,
    running,
    snapshot,
    unit,
    waits,
)
from tests.engine.builders import share as engine_share

from .scenario_builders import UNIT, Document, action, capacity, events, scenario, share, submit

# Reuse: DISPATCHED, then WARM_POOL_REUSED -------------------------------------------------


def reuse_in_quota() -> Document:
    """A (L 1) runs `old` with keep-alive until 10; `new` matches it at 20, in quota."""
    return scenario(
        capacity=[capacity(1, warm_pool_limit=1)],
        shares=[share("A", 1)],
        actions=[
            submit(0, "old", "A", duration=10, keep_alive_seconds=100),
            submit(20, "new", "A", duration=10),
        ],
        until=40,
    )


def reuse_borrowing() -> Document:
    """A (L 0) borrows Z's instance for `old`; its pool still borrows, so `new` reuses it
    in the borrowing pass."""
    return scenario(
        capacity=[capacity(1, warm_pool_limit=1)],
        shares=[share("A", 0, "LEND_AND_BORROW"), share("Z", 1)],
        actions=[
            submit(0, "old", "A", duration=10, keep_alive_seconds=100),
            submit(20, "new", "A", duration=10),
        ],
        until=40,
    )


@pytest.mark.parametrize(
    ("document", "borrowed"),
    [
        pytest.param(reuse_in_quota(), 0, id="in-quota"),
        pytest.param(reuse_borrowing(), 1, id="borrowing"),
    ],
)
def test_a_reuse_emits_the_new_jobs_dispatch_then_the_old_jobs_reuse(
    document: Document, borrowed: int
) -> None:
    assert events(run_scenario(document), t=20) == [
        (20, "SUBMITTED", "new", {}),
        (20, "DISPATCHED", "new", {"borrowed_instances": borrowed, "warm_start": True}),
        (20, "WARM_POOL_REUSED", "old", {"reused_by": "new"}),
        (20, "RUNNING", "new", {}),
    ]


# delete_share ---------------------------------------------------------------------------


def test_deleting_a_share_ends_jobs_in_submission_order_then_pools_then_the_share() -> None:
    # At 40, A has: `early` RUNNING; `user` RUNNING on p0's pool; `huge` queued (n 5 > C,
    # never placed); the pools of p2 (Available since 10) and p1 (since 20).
    other = {"role": "other"}
    result = run_scenario(scenario(
        capacity=[capacity(4, warm_pool_limit=3)],
        shares=[share("A", 4)],
        actions=[
            submit(0, "early", "A", duration=1000),
            submit(0, "p0", "A", duration=5, keep_alive_seconds=100, role="r"),
            submit(0, "p1", "A", duration=20, keep_alive_seconds=100, **other),
            submit(0, "p2", "A", duration=10, keep_alive_seconds=100, **other),
            submit(30, "user", "A", duration=100, role="r"),
            submit(30, "huge", "A", instance_count=5),
            action(35, "update_share", name="A", state="DISABLED"),
            action(40, "delete_share", name="A"),
        ],
        until=50,
    ))
    deleted = {"reason": "Quota share deleted"}
    user_ended = {"reason": "USER"}
    assert events(result, t=40) == [
        (40, "TERMINATED", "early", deleted),
        (40, "WARM_POOL_TERMINATED", "user", user_ended),
        (40, "TERMINATED", "user", deleted),
        (40, "TERMINATED", "huge", deleted),
        (40, "WARM_POOL_TERMINATED", "p2", user_ended),
        (40, "WARM_POOL_TERMINATED", "p1", user_ended),
        (40, "SHARE_DELETED", None, {"before": {
            "capacity_limits": [{"capacity_unit": UNIT, "max_capacity": 4}],
            "sharing_strategy": "LEND", "borrow_limit": None, "in_share_preemption": False,
            "state": "DISABLED", "max_keep_alive_seconds": 3600}}),
    ]


# The head: passed over for the whole cycle ----------------------------------------------


def borrowing_race(first: Job) -> Snapshot:
    """C 1; S0 and S1 have no limit and borrow. S0 queues `first` then s0_b (seq 2); S1
    queues s1_a (seq 3). If `first` cost S0 a round, s1_a would borrow the one instance
    before s0_b joined."""
    return snapshot(
        NOW,
        [unit(G5, 1)],
        [
            engine_share("S0", 0, strategy=LEND_AND_BORROW),
            engine_share("S1", 0, strategy=LEND_AND_BORROW),
        ],
        [first, queued("s0_b", share="S0", seq=2), queued("s1_a", share="S1", seq=3)],
    )


def grace_beside_in_share_preemption() -> Snapshot:
    """C 1, S (L 1, in-share preemption) runs lo. g (priority 5) is in its grace period;
    hi (priority 3) preempts lo, which considers skipped heads again: g stays passed over."""
    return snapshot(
        NOW,
        [unit(G5, 1)],
        [engine_share("S", 1, in_share_preemption=True)],
        [
            running("lo", share="S", seq=1),
            queued("g", share="S", seq=2, priority=5, not_before=NOW + 10),
            queued("hi", share="S", seq=3, priority=3),
        ],
    )


HEADS = [
    pytest.param(
        borrowing_race(queued("bad", share="S0", seq=1, n=2)),
        [dispatch("s0_b", (0,), borrowed=1), waits("bad", MAX_RESOURCE, 1),
         waits("s1_a", NO_IDLE, 1)],
        id="misconfigured-job-costs-no-round",
    ),
    pytest.param(
        borrowing_race(queued("g", share="S0", seq=1, priority=9, not_before=NOW + 10)),
        [dispatch("s0_b", (0,), borrowed=1), waits("g", NO_IDLE, 1),
         waits("s1_a", NO_IDLE, 1)],
        id="victim-in-grace-costs-no-round",
    ),
    pytest.param(
        grace_beside_in_share_preemption(),
        [preempt("lo", by="hi", kind=IN_SHARE), dispatch("hi", (0,)),
         waits("g", WAITING, 1), waits("lo", WAITING, 2)],
        id="victim-in-grace-stays-passed-over-after-a-preemption",
    ),
]


@pytest.mark.parametrize(("snap", "expected"), HEADS)
def test_jobs_that_may_not_be_placed_are_passed_over_keeping_their_position(
    snap: Snapshot, expected: list[Decision]
) -> None:
    assert decide(snap) == expected
