"""Pending reasons and positions of the jobs left waiting after a cycle (docs/semantics.md 4)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .decisions import PendingReason, SetPendingReason
from .model import Job, JobStatus
from .ordering import queue_key
from .quota import max_holdable

if TYPE_CHECKING:
    from .state import CycleState


def pending_reason(state: CycleState, job: Job) -> PendingReason:
    """The first reason that applies, as things stand after the cycle."""
    unit = state.capacity.get(job.instance_type)
    if unit is None or job.instance_count > unit.max_capacity:
        return PendingReason.SERVICE_ENVIRONMENT_MAX_RESOURCE
    share = state.share(job.quota_share)
    limit = share.limit(job.instance_type)
    most = max_holdable(limit, share.strategy, share.borrow_limit)
    if most is not None and job.instance_count > most:
        return PendingReason.QUOTA_MANAGEMENT_LIMIT_EXCEEDED
    if state.in_quota_eligible(job) or not share.strategy.borrows:
        return PendingReason.WAITING_FOR_CAPACITY
    ledger = state.ledger(job.instance_type)
    account = ledger.account(job.quota_share)
    count = 0 if state.matching_pool(job) is not None else job.instance_count
    if account.borrow_cap is not None and account.used + count - limit > account.borrow_cap:
        return PendingReason.BORROW_LIMIT_REACHED
    if not ledger.fits(job.quota_share, count):
        return PendingReason.NO_IDLE_CAPACITY_TO_BORROW
    # It would fit now; it waits only because it is in its grace period or was preempted
    # in this very cycle.
    return PendingReason.WAITING_FOR_CAPACITY


def waiting_jobs(state: CycleState) -> dict[str, list[Job]]:
    """Each share's jobs still waiting after the cycle, in the share's order.

    A job preempted in this cycle waits again at its old place, unless that preemption
    used up its preemption retries (it then fails and no longer waits).
    """
    waiting: dict[str, list[Job]] = {}
    returning: dict[str, list[Job]] = {}
    for job in state.preempted:
        if job.preemptions_left is None or job.preemptions_left > 0:
            returning.setdefault(job.quota_share, []).append(job)
    placed = state.placed
    for name, queue in state.queues.items():
        jobs = [job for job in queue if job.id not in placed] if placed else queue
        if name in returning:
            jobs = sorted(jobs + returning[name], key=queue_key)
        waiting[name] = jobs
    return waiting


def pending_decisions(state: CycleState) -> list[SetPendingReason]:
    """A SetPendingReason (with its current position) for every waiting job whose reason
    changed, and for every job that is not RUNNABLE yet (SUBMITTED, or just preempted)."""
    decisions: list[SetPendingReason] = []
    # The reason depends only on the share, unit, size and reusable pool: compute it once.
    reasons: dict[tuple[str, str, int, str | None], tuple[PendingReason, str]] = {}
    runnable = JobStatus.RUNNABLE
    for share, jobs in waiting_jobs(state).items():
        has_pools = bool(state.pools[share])
        for position, job in enumerate(jobs, start=1):
            pool = state.matching_pool(job) if has_pools else None
            key = (share, job.instance_type, job.instance_count,
                   pool.id if pool is not None else None)
            known = reasons.get(key)
            if known is None:
                reason = pending_reason(state, job)
                known = reasons[key] = (reason, reason.value)
            # Positions shift with every dispatch; readers derive them from the order, so
            # only a new reason (or a job not yet RUNNABLE) is worth a write.
            if job.pending_code != known[1] or job.status is not runnable:
                decisions.append(SetPendingReason(job.id, known[0], position))
    return decisions
