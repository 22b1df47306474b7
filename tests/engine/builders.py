"""Small builders for table-driven engine cases: capacity units, quota shares, jobs, warm
pools and snapshots, and the decisions a cycle is expected to take.

Defaults follow docs/semantics.md, with two exceptions chosen so that a case states only what it
shows: the preemption grace is 0 unless a case passes `grace=`, and every time defaults to
around `NOW`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import cast

from scheduler import (
    CapacityUnit,
    Dispatch,
    Job,
    JobStatus,
    PendingReason,
    Policy,
    PoolTermination,
    Preempt,
    PreemptionKind,
    QuotaShare,
    SetPendingReason,
    ShareState,
    Snapshot,
    Strategy,
    TerminateWarmPool,
    WarmPool,
    WarmPoolMatch,
    schedule,
)
from scheduler.decisions import Decision
from scheduler.model import UNLIMITED_BORROW

NOW = 1000.0
G5 = "g5"
P4 = "p4"
BASE_MATCH = WarmPoolMatch(role="trainer", volume_size_gb=30)
OTHER_MATCH = WarmPoolMatch(role="evaluator", volume_size_gb=30)
LIFETIME = 2_419_200.0

RESERVE = Strategy.RESERVE
LEND = Strategy.LEND
LEND_AND_BORROW = Strategy.LEND_AND_BORROW

_SPEC_DEFAULT = object()


# Inputs -------------------------------------------------------------------------------


def unit(name: str = G5, capacity: int = 3, warm_pool_limit: int = 0) -> CapacityUnit:
    """A capacity unit with C = `capacity` instances."""
    return CapacityUnit(name, capacity, warm_pool_limit)


def share(
    name: str,
    limit: int = 1,
    *,
    strategy: Strategy = LEND,
    borrow_limit: object = _SPEC_DEFAULT,
    in_share_preemption: bool = False,
    limits: Mapping[str, int] | None = None,
    state: ShareState = ShareState.ENABLED,
    unit: str = G5,
) -> QuotaShare:
    """A quota share with L = `limit` on `unit`, or `limits` for several units.

    borrow_limit defaults as docs/semantics.md 2 does: −1 (unlimited) for LEND_AND_BORROW, null for
    the other strategies; pass it explicitly to build an invalid share.
    """
    if borrow_limit is _SPEC_DEFAULT:
        borrow_limit = UNLIMITED_BORROW if strategy is LEND_AND_BORROW else None
    pairs = tuple((limits or {unit: limit}).items())
    return QuotaShare(
        name,
        pairs,
        strategy,
        borrow_limit=cast(int | None, borrow_limit),
        in_share_preemption=in_share_preemption,
        state=state,
    )


def queued(
    job_id: str,
    *,
    share: str,
    seq: int,
    priority: int = 0,
    n: int = 1,
    unit: str = G5,
    status: JobStatus = JobStatus.RUNNABLE,
    pending: PendingReason | None = None,
    not_before: float | None = None,
    match: WarmPoolMatch = BASE_MATCH,
    preemptions_left: int | None = None,
) -> Job:
    """A queued job (RUNNABLE unless `status=SUBMITTED`) whose stored reason is `pending`."""
    return Job(
        job_id,
        share,
        priority,
        seq,
        unit,
        n,
        status,
        match=match,
        not_before=not_before,
        preemptions_left=preemptions_left,
        pending_code=pending.value if pending is not None else None,
    )


def running(
    job_id: str,
    *,
    share: str,
    seq: int,
    instances: tuple[int, ...] = (0,),
    priority: int = 0,
    unit: str = G5,
    started_at: float = NOW - 100,
    dispatched_at: float | None = None,
    match: WarmPoolMatch = BASE_MATCH,
    preemptions_left: int | None = None,
) -> Job:
    """A RUNNING job on `instances`, dispatched a cold start before `started_at`."""
    return Job(
        job_id,
        share,
        priority,
        seq,
        unit,
        len(instances),
        JobStatus.RUNNING,
        match=match,
        instances=instances,
        dispatched_at=started_at - 60 if dispatched_at is None else dispatched_at,
        started_at=started_at,
        preemptions_left=preemptions_left,
    )


def scheduled(
    job_id: str,
    *,
    share: str,
    seq: int,
    instances: tuple[int, ...] = (0,),
    priority: int = 0,
    unit: str = G5,
    dispatched_at: float = NOW - 10,
    status: JobStatus = JobStatus.SCHEDULED,
) -> Job:
    """A job placed but not RUNNING yet: SCHEDULED, or STARTING with `status=`."""
    return Job(
        job_id,
        share,
        priority,
        seq,
        unit,
        len(instances),
        status,
        match=BASE_MATCH,
        instances=instances,
        dispatched_at=dispatched_at,
    )


def pool(
    pool_id: str,
    *,
    share: str,
    owner: str | None = None,
    instances: tuple[int, ...] = (0,),
    unit: str = G5,
    expires_at: float = NOW + 600,
    available_since: float = NOW - 60,
    chain_started_at: float = NOW - 3600,
    priority: int = 0,
    seq: int = 0,
    match: WarmPoolMatch = BASE_MATCH,
) -> WarmPool:
    """An Available warm pool of `share` on `instances`, left by `owner`."""
    return WarmPool(
        pool_id,
        share,
        owner or f"{pool_id}_owner",
        unit,
        len(instances),
        match,
        available_since,
        expires_at,
        chain_started_at,
        priority,
        seq,
        instances,
    )


def snapshot(
    now: float,
    units: Iterable[CapacityUnit],
    shares: Iterable[QuotaShare],
    jobs: Iterable[Job],
    pools: Iterable[WarmPool] = (),
    *,
    grace: float = 0,
    max_lifetime: float = LIFETIME,
) -> Snapshot:
    """What a cycle sees at `now`; `grace` is preemption_grace_seconds."""
    policy = Policy(preemption_grace_seconds=grace, warm_pool_max_lifetime_seconds=max_lifetime)
    return Snapshot(now, tuple(units), tuple(shares), tuple(jobs), tuple(pools), policy)


def decide(snap: Snapshot) -> list[Decision]:
    """The decisions of one cycle, in the order taken."""
    return list(schedule(snap).decisions)


# Expected decisions --------------------------------------------------------------------


def dispatch(
    job_id: str,
    instances: tuple[int, ...],
    *,
    borrowed: int = 0,
    warm_pool: str | None = None,
    starting_at: float = NOW,
) -> Dispatch:
    return Dispatch(job_id, instances, borrowed, warm_pool, starting_at)


def preempt(
    job_id: str,
    *,
    by: str,
    kind: PreemptionKind = PreemptionKind.CROSS_SHARE,
    was_running: bool = True,
    grace_until: float = NOW,
) -> Preempt:
    return Preempt(job_id, kind, by, was_running, grace_until)


def evict(pool_id: str, *, by: str) -> TerminateWarmPool:
    return TerminateWarmPool(pool_id, PoolTermination.EVICTED, by)


def expire(pool_id: str, reason: PoolTermination = PoolTermination.EXPIRED) -> TerminateWarmPool:
    return TerminateWarmPool(pool_id, reason)


def waits(job_id: str, reason: PendingReason, position: int = 1) -> SetPendingReason:
    return SetPendingReason(job_id, reason, position)


WAITING = PendingReason.WAITING_FOR_CAPACITY
NO_IDLE = PendingReason.NO_IDLE_CAPACITY_TO_BORROW
BORROW_LIMIT = PendingReason.BORROW_LIMIT_REACHED
MAX_RESOURCE = PendingReason.SERVICE_ENVIRONMENT_MAX_RESOURCE
QUOTA_EXCEEDED = PendingReason.QUOTA_MANAGEMENT_LIMIT_EXCEEDED
IN_SHARE = PreemptionKind.IN_SHARE
