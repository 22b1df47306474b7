"""Warm pools in the scheduling cycle (docs/semantics.md 5.1, 5.3 and 6): housekeeping, reuse by a
matching job, which pool is reused, and when a share's own pools are evicted.

(Reclaim evicting other shares' pools before jobs is in test_cycle_reclaim.py.)
Notation in comments, per unit: C capacity, U(s) used, L(s) limit, free = C − ΣU, P the
borrow pool = F + Σ idle of lenders − Σ borrowed.
"""

from __future__ import annotations

import dataclasses

import pytest

from scheduler import PoolTermination, Snapshot, WarmPool, WarmPoolMatch
from scheduler.decisions import Decision
from tests.engine.builders import (
    BASE_MATCH,
    G5,
    LEND_AND_BORROW,
    NO_IDLE,
    NOW,
    OTHER_MATCH,
    P4,
    WAITING,
    decide,
    dispatch,
    evict,
    expire,
    pool,
    queued,
    running,
    share,
    snapshot,
    unit,
    waits,
)

MAX_LIFETIME = PoolTermination.MAX_LIFETIME
LIFETIME = 1000.0  # warm_pool_max_lifetime_seconds in these cases


# 1. Housekeeping --------------------------------------------------------------------------


def pool_ending(expires_at: float, lifetime_ends_at: float) -> Snapshot:
    """One idle pool whose keep-alive and chain lifetime end at the given times."""
    lone = pool("p", share="S", expires_at=expires_at, chain_started_at=lifetime_ends_at - LIFETIME)
    return snapshot(NOW, [unit(G5, 1)], [share("S", 1)], [], [lone], max_lifetime=LIFETIME)


HOUSEKEEPING = [
    pytest.param(pool_ending(NOW + 1, NOW + 500), [], id="within-keep-alive-and-lifetime"),
    pytest.param(pool_ending(NOW - 1, NOW + 500), [expire("p")], id="past-keep-alive-expired"),
    pytest.param(
        pool_ending(NOW + 300, NOW - 1),
        [expire("p", MAX_LIFETIME)],
        id="past-lifetime-before-keep-alive-ends",
    ),
    pytest.param(
        pool_ending(NOW - 1, NOW - 5),
        [expire("p", MAX_LIFETIME)],
        id="lifetime-ended-strictly-earlier-than-keep-alive",
    ),
    pytest.param(
        pool_ending(NOW - 5, NOW - 5), [expire("p")], id="lifetime-and-keep-alive-end-together"
    ),
    pytest.param(
        pool_ending(NOW - 5, NOW - 1), [expire("p")], id="keep-alive-ended-before-lifetime"
    ),
]


@pytest.mark.parametrize(("snap", "expected"), HOUSEKEEPING)
def test_housekeeping(snap: Snapshot, expected: list[Decision]) -> None:
    assert decide(snap) == expected


def test_expired_pool_is_not_reused_and_its_instances_serve_the_same_cycle() -> None:
    snap = snapshot(
        NOW,
        [unit(G5, 1)],
        [share("S", 1)],
        [queued("j", share="S", seq=1)],
        [pool("p", share="S", expires_at=NOW - 1)],
    )
    assert decide(snap) == [expire("p"), dispatch("j", (0,))]


@pytest.mark.parametrize("older, newer", [("99", "100"), ("wp-9", "wp-10"), ("7", "12")])
def test_pools_that_expire_together_end_oldest_first(older: str, newer: str) -> None:
    """Ties on expiry end in the order the pools were made (ids grow: the database's, the
    simulator's wp-N), however many digits the ids have, and whatever the snapshot's
    order: as plain strings "100" came before "99"."""
    for pools in ([older, newer], [newer, older]):
        snap = snapshot(
            NOW,
            [unit(G5, 2)],
            [share("S", 2)],
            [],
            [pool(pool_id, share="S", instances=(number,), expires_at=NOW - 1)
             for number, pool_id in enumerate(pools)],
        )
        assert decide(snap) == [expire(older), expire(newer)]


# Reuse by a matching job (semantics.md 6, Matching) ---------------------------------------------


def test_matching_job_reuses_the_pool_without_raising_usage() -> None:
    # S (L 2, C 3) holds only the pool (U 1). j reuses it: its instance 2, not the lowest
    # free, and U stays 1, so k (non-matching) is still in quota (1 + 1 ≤ 2).
    snap = snapshot(
        NOW,
        [unit(G5, 3)],
        [share("S", 2)],
        [
            queued("j", share="S", seq=1, priority=1),
            queued("k", share="S", seq=2, match=OTHER_MATCH),
        ],
        [pool("p", share="S", instances=(2,))],
    )
    assert decide(snap) == [dispatch("j", (2,), warm_pool="p"), dispatch("k", (0,))]


def job_beside_pool(job_match: WarmPoolMatch) -> Snapshot:
    """S (L 2, C 2) holds a BASE_MATCH pool on instance 0 and queues j (n 1)."""
    return snapshot(
        NOW,
        [unit(G5, 2)],
        [share("S", 2)],
        [queued("j", share="S", seq=1, match=job_match)],
        [pool("p", share="S", instances=(0,))],
    )


REUSED = [dispatch("j", (0,), warm_pool="p")]
NOT_REUSED = [dispatch("j", (1,))]  # U 1 + 1 ≤ L 2: placed beside the pool, which stays


def differing(**change: object) -> WarmPoolMatch:
    return dataclasses.replace(BASE_MATCH, **change)  # type: ignore[arg-type]


MATCHING = [
    pytest.param(BASE_MATCH, REUSED, id="all-equal-reuses"),
    pytest.param(differing(role="other"), NOT_REUSED, id="role-differs"),
    pytest.param(differing(volume_size_gb=31), NOT_REUSED, id="volume-size-differs"),
    pytest.param(differing(volume_kms_key_id="kms-2"), NOT_REUSED, id="kms-key-differs"),
    pytest.param(
        differing(security_group_ids=frozenset({"sg-2"})), NOT_REUSED, id="security-groups-differ"
    ),
    pytest.param(differing(subnets=frozenset({"subnet-2"})), NOT_REUSED, id="subnets-differ"),
    pytest.param(
        differing(enable_network_isolation=True), NOT_REUSED, id="network-isolation-differs"
    ),
    pytest.param(
        differing(enable_inter_container_traffic_encryption=True),
        NOT_REUSED,
        id="inter-container-encryption-differs",
    ),
]


@pytest.mark.parametrize(("job_match", "expected"), MATCHING)
def test_matching_requires_every_attribute_equal(
    job_match: WarmPoolMatch, expected: list[Decision]
) -> None:
    assert decide(job_beside_pool(job_match)) == expected


def test_security_groups_and_subnets_match_as_sets() -> None:
    listed = WarmPoolMatch(
        role="trainer",
        security_group_ids=frozenset(["sg-1", "sg-2"]),
        subnets=frozenset(["subnet-a", "subnet-b"]),
    )
    reordered = WarmPoolMatch(
        role="trainer",
        security_group_ids=frozenset(["sg-2", "sg-1", "sg-2"]),
        subnets=frozenset(["subnet-b", "subnet-a"]),
    )
    snap = snapshot(
        NOW,
        [unit(G5, 2)],
        [share("S", 2)],
        [queued("j", share="S", seq=1, match=reordered)],
        [pool("p", share="S", instances=(0,), match=listed)],
    )
    assert decide(snap) == REUSED


def test_pool_of_another_instance_count_does_not_match() -> None:
    snap = snapshot(
        NOW,
        [unit(G5, 3)],
        [share("S", 3)],
        [queued("j", share="S", seq=1, n=1)],
        [pool("p", share="S", instances=(0, 1))],
    )
    assert decide(snap) == [dispatch("j", (2,))]


def test_pool_of_another_instance_type_does_not_match() -> None:
    snap = snapshot(
        NOW,
        [unit(G5, 2), unit(P4, 1)],
        [share("S", limits={G5: 2, P4: 1})],
        [queued("j", share="S", seq=1, unit=G5)],
        [pool("p", share="S", instances=(0,), unit=P4)],
    )
    assert decide(snap) == [dispatch("j", (0,))]


# Which matching pool is taken -------------------------------------------------------------


def two_matching(first: WarmPool, second: WarmPool) -> Snapshot:
    return snapshot(
        NOW, [unit(G5, 2)], [share("S", 2)], [queued("j", share="S", seq=9)], [first, second]
    )


WHICH_POOL = [
    pytest.param(
        two_matching(
            pool("p_late", share="S", instances=(0,), expires_at=NOW + 900),
            pool("p_soon", share="S", instances=(1,), expires_at=NOW + 300),
        ),
        [dispatch("j", (1,), warm_pool="p_soon")],
        id="soonest-expiring",
    ),
    pytest.param(
        two_matching(
            pool("p_new", share="S", instances=(0,), available_since=NOW - 10),
            pool("p_old", share="S", instances=(1,), available_since=NOW - 90),
        ),
        [dispatch("j", (1,), warm_pool="p_old")],
        id="same-expiry-available-first",
    ),
    pytest.param(
        two_matching(
            pool("p_later", share="S", instances=(0,), seq=2),
            pool("p_earlier", share="S", instances=(1,), seq=1),
        ),
        [dispatch("j", (1,), warm_pool="p_earlier")],
        id="then-left-by-the-earlier-submission",
    ),
]


@pytest.mark.parametrize(("snap", "expected"), WHICH_POOL)
def test_which_matching_pool_is_reused(snap: Snapshot, expected: list[Decision]) -> None:
    assert decide(snap) == expected


def test_borrowing_head_reuses_its_pool_with_no_free_instance() -> None:
    # C 4, F 1: S (L 1) holds s1 and the pool (U 2, borrowing F's instance); Z holds its
    # two. free 0, but a reuse takes no instance and does not lower P: s2 borrows in place.
    snap = snapshot(
        NOW,
        [unit(G5, 4)],
        [share("S", 1, strategy=LEND_AND_BORROW), share("Z", 2)],
        [
            running("s1", share="S", seq=1, instances=(0,)),
            running("z1", share="Z", seq=2, instances=(2, 3)),
            queued("s2", share="S", seq=3),
        ],
        [pool("p", share="S", instances=(1,))],
    )
    assert decide(snap) == [dispatch("s2", (1,), borrowed=1, warm_pool="p")]


# Eviction of a share's own pools (semantics.md 5.3, 6 Eviction) ---------------------------------


def test_in_quota_head_evicts_its_own_soonest_expiring_non_matching_pool() -> None:
    # S (L 2, C 2) holds two non-matching pools; j (n 1): U 2 − 2 + 1 ≤ 2 in quota.
    # One instance is enough: the soonest-expiring pool goes.
    snap = snapshot(
        NOW,
        [unit(G5, 2)],
        [share("S", 2)],
        [queued("j", share="S", seq=1)],
        [
            pool("p_late", share="S", instances=(0,), expires_at=NOW + 900, match=OTHER_MATCH),
            pool("p_soon", share="S", instances=(1,), expires_at=NOW + 300, match=OTHER_MATCH),
        ],
    )
    assert decide(snap) == [evict("p_soon", by="j"), dispatch("j", (1,))]


def test_in_quota_head_evicts_the_fewest_own_pools() -> None:
    # S (L 3, C 3); j needs 2. Soonest first takes p_small (1) then p_big (2); p_big alone
    # is enough (3 − 2 + 2 ≤ 3), so p_small is spared.
    snap = snapshot(
        NOW,
        [unit(G5, 3)],
        [share("S", 3)],
        [queued("j", share="S", seq=1, n=2)],
        [
            pool("p_small", share="S", instances=(0,), expires_at=NOW + 100, match=OTHER_MATCH),
            pool("p_big", share="S", instances=(1, 2), expires_at=NOW + 500, match=OTHER_MATCH),
        ],
    )
    assert decide(snap) == [evict("p_big", by="j"), dispatch("j", (1, 2))]


def test_own_pool_eviction_stands_only_if_the_head_is_placed() -> None:
    # Capacity shrank: C 2 < ΣL 3. j (n 2) is in quota once S's pool counts as gone
    # (1 − 1 + 2 ≤ 2), but T holds the other instance within its limit: j cannot be
    # placed, so the pool stays.
    snap = snapshot(
        NOW,
        [unit(G5, 2)],
        [share("S", 2), share("T", 1)],
        [running("t1", share="T", seq=1, instances=(0,)), queued("j", share="S", seq=2, n=2)],
        [pool("p", share="S", instances=(1,), match=OTHER_MATCH)],
    )
    assert decide(snap) == [waits("j", WAITING)]


def test_borrowing_head_does_not_evict_its_own_pools() -> None:
    # C 3: S (L 1) holds s1 and a non-matching pool (U 2 − 1 + 1 > 1: s2 would borrow);
    # Z holds 1 of its 2, so free 0 and P = 1 − 1 = 0. Evicting the pool would make room,
    # but a borrowing head does not evict its own pools.
    snap = snapshot(
        NOW,
        [unit(G5, 3)],
        [share("S", 1, strategy=LEND_AND_BORROW), share("Z", 2)],
        [
            running("s1", share="S", seq=1, instances=(0,)),
            running("z1", share="Z", seq=2, instances=(2,)),
            queued("s2", share="S", seq=3),
        ],
        [pool("p", share="S", instances=(1,), match=OTHER_MATCH)],
    )
    assert decide(snap) == [waits("s2", NO_IDLE)]
