"""Pending reasons and positions of the jobs left waiting after a cycle (docs/semantics.md 4)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from .decisions import PendingReason, SetPendingReason
from .model import Job, JobStatus
from .ordering import queue_key
from .quota import max_holdable
from .victims import release, take_then_spare

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
    if waits_for_min_runtime(state, job):
        # Before the borrowing reasons: preempting in its share would place it, borrowing
        # or not, but for the young attempts (docs/semantics.md 5.8).
        return PendingReason.WAITING_FOR_MIN_RUNTIME
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


def waits_for_min_runtime(state: CycleState, job: Job) -> bool:
    """Whether in-share preemption would make room for the job if its share's young
    attempts were victims like the others (leaves the ledger as it was)."""
    if job.quota_share not in state.min_runtime_shares:
        return False  # the common case: no minimum runtime, nothing to look at
    share = state.share(job.quota_share)
    if not share.in_share_preemption:
        return False
    shielded = state.shielded_in_share(job)
    if not shielded:
        return False
    reuse = state.matching_pool(job)
    count = 0 if reuse is not None else job.instance_count
    ledger = state.ledger(job.instance_type)
    if ledger.fits(job.quota_share, count):
        return False  # it waits for something else (its grace, say), not for them
    candidates = sorted(state.in_share_candidates(job, reuse) + shielded,
                        key=lambda holding: holding.key)
    victims = take_then_spare(candidates, ledger, job.quota_share, count,
                              only_from_borrowers=False)
    if victims is None:
        return False
    release(ledger, victims)
    return True


def _priority_matters(state: CycleState, share: str) -> bool:
    """Whether a waiting job's reason may depend on its priority: only where a minimum
    runtime may hold back in-share preemption."""
    return share in state.min_runtime_shares and state.share(share).in_share_preemption


def pending_decisions(state: CycleState) -> list[SetPendingReason]:
    """A SetPendingReason, with its position, for every waiting job whose reason changed,
    and for every job that is not RUNNABLE yet (SUBMITTED, or just preempted).

    A job preempted in this cycle waits again at its old place, unless that preemption
    used up its preemption retries (it then fails and no longer waits).  The reason
    depends only on the share, unit, size and reusable pool (and the priority, in a share
    whose minimum runtime may hold back its in-share preemption), so it is found once per
    group of alike jobs.  Over a backlog kept between cycles only the jobs that stand on another
    reason are visited (Backlog.standing): a cycle costs nothing per waiting job whose
    reason holds.  Over a backlog of one cycle each waiting job is visited once."""
    returning: dict[str, list[Job]] = {}
    for job in state.preempted:
        if job.preemptions_left is None or job.preemptions_left > 0:
            returning.setdefault(job.quota_share, []).append(job)
    reasons: dict[tuple[str, str, int, str | None, int | None], tuple[PendingReason, str]] = {}

    def reason_of(job: Job) -> tuple[PendingReason, str]:
        pool = state.matching_pool(job) if state.pools[job.quota_share] else None
        key = (job.quota_share, job.instance_type, job.instance_count,
               pool.id if pool is not None else None,
               job.priority if _priority_matters(state, job.quota_share) else None)
        known = reasons.get(key)
        if known is None:
            reason = pending_reason(state, job)
            known = reasons[key] = (reason, reason.value)
        return known

    decisions: list[SetPendingReason] = []
    placed = state.placed
    kept = state.backlog.standing
    if kept is None:  # a backlog of one cycle: its waiting jobs are read once each
        for share in state.share_names:
            decisions += _each_waiting(state, share, returning.get(share, []), reason_of)
        return decisions
    for share in state.share_names:
        changed: list[tuple[Job, PendingReason]] = []
        if _priority_matters(state, share):
            changed = _each_changed(kept[share].values(), placed, reason_of)
        else:
            for standings in kept[share].values():
                first = next(iter(next(iter(standings.values())).values()))
                reason, code = reason_of(first)
                for standing, members in standings.items():
                    if standing != code:
                        changed += [(job, reason) for job in members.values()
                                    if job.id not in placed]
        back = sorted(returning.get(share, ()), key=queue_key)
        changed += [(job, reason_of(job)[0]) for job in back]
        if changed:
            positions = _positions(state, share, [job for job, _ in changed], back)
            changed.sort(key=lambda item: positions[item[0].id])
            decisions += [SetPendingReason(job.id, reason, positions[job.id])
                          for job, reason in changed]
    return decisions


def _each_waiting(
    state: CycleState,
    share: str,
    back: list[Job],
    reason_of: Callable[[Job], tuple[PendingReason, str]],
) -> list[SetPendingReason]:
    """pending_decisions for one share, visiting each waiting job in order."""
    placed = state.placed
    queue = state.queues[share]
    jobs = [job for job in queue if job.id not in placed] if placed else queue
    if back:
        jobs = sorted(jobs + back, key=queue_key)
    runnable = JobStatus.RUNNABLE
    has_pools = bool(state.pools[share])
    by_priority = _priority_matters(state, share)
    # reason_of, written out for the share: this runs for every waiting job.
    known: dict[tuple[object, ...], tuple[PendingReason, str]] = {}
    decisions = []
    for position, job in enumerate(jobs, start=1):
        pool = state.matching_pool(job) if has_pools else None
        key: tuple[object, ...] = (job.instance_type, job.instance_count,
                                   pool.id if pool is not None else None)
        if by_priority:
            key += (job.priority,)
        found = known.get(key)
        if found is None:
            found = known[key] = reason_of(job)
        if job.pending_code != found[1] or job.status is not runnable:
            decisions.append(SetPendingReason(job.id, found[0], position))
    return decisions


def _each_changed(
    groups: Iterable[dict[str | None, dict[str, Job]]],
    placed: Mapping[str, object],
    reason_of: Callable[[Job], tuple[PendingReason, str]],
) -> list[tuple[Job, PendingReason]]:
    """The kept backlog's jobs whose reason changed, each found on its own (alike jobs of
    other priorities may wait for different reasons in such a share)."""
    changed = []
    for standings in groups:
        for standing, members in standings.items():
            for job in members.values():
                if job.id in placed:
                    continue
                reason, code = reason_of(job)
                if standing != code:
                    changed.append((job, reason))
    return changed


def _positions(state: CycleState, share: str, jobs: list[Job], back: list[Job]) -> dict[str, int]:
    """Each job's position among the share's waiting jobs (from 1): its queue less the jobs
    placed in this cycle, with the returning preempted jobs `back` at their places."""
    backlog = state.backlog
    queue = backlog.queues[share]
    placed_at = sorted(backlog.position_before(backlog.jobs[job_id])
                       for job_id in state.placed if backlog.jobs[job_id].quota_share == share)
    back_keys = [queue_key(job) for job in back]
    # Many jobs: one pass over the queue beats a search for each.
    ahead = {job.id: index for index, job in enumerate(queue)} if len(jobs) > 64 else {}
    positions = {}
    for job in jobs:
        key = queue_key(job)
        before = ahead.get(job.id)
        if before is None:
            before = bisect_left(queue, key, key=queue_key)
        positions[job.id] = (1 + before - bisect_left(placed_at, before)
                             + bisect_left(back_keys, key))
    return positions
