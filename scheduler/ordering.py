"""The orderings of docs/semantics.md 5 and 6, as explicit sort keys.

Each key's docstring numbers its criteria; every key ends in a total tie-break (an id or a
name), so that the same snapshot always gives the same decisions.
"""

from __future__ import annotations

from fractions import Fraction

from .model import Job, JobStatus, WarmPool

Key = tuple[object, ...]


def queue_key(job: Job) -> tuple[int, int, str]:
    """A share's queue: 1. priority, high first; 2. submission sequence, oldest first;
    3. job id."""
    return (-job.priority, job.sequence, job.id)


def in_quota_pick_key(used: int, limit: int, head: Job, share: str) -> Key:
    """Which in-quota head goes next (semantics.md 5.3): 1. lowest U(s)/L(s) on the head's unit;
    2. higher head priority; 3. older submission; 4. share name.

    The ratio is compared exactly, as a fraction, so no rounding decides a tie; L(s) > 0
    for every in-quota head.
    """
    return (Fraction(used, limit), -head.priority, head.sequence, share)


def borrow_fifo_key(head: Job) -> Key:
    """The borrowing pass (semantics.md 5.4): 1. submission sequence, oldest first; 2. job id."""
    return (head.sequence, head.id)


def in_share_head_key(head: Job) -> Key:
    """Heads trying in-share preemption (docs/semantics.md 5.5): 1. priority, high first;
    2. submission sequence; 3. job id."""
    return (-head.priority, head.sequence, head.id)


def victim_pool_key(pool: WarmPool) -> Key:
    """Warm pools as victims, which always go before jobs: 1. lower priority (of the job that
    left the pool) first; 2. most recently Available first; 3. later submission first;
    4. pool id."""
    return (0, pool.priority, -pool.available_since, -pool.sequence, pool.id)


def victim_job_key(job: Job) -> Key:
    """Jobs as victims: 1. lower priority first; 2. most recently started first, where a
    SCHEDULED or STARTING job counts as more recent than any RUNNING one (among them, the
    latest dispatch first); 3. later submission first; 4. job id."""
    if job.status is JobStatus.RUNNING:
        recency: Key = (1, -(job.started_at or 0.0))
    else:
        recency = (0, -(job.dispatched_at or 0.0))
    return (1, job.priority, recency, -job.sequence, job.id)


def pool_reuse_key(pool: WarmPool) -> Key:
    """Which matching pool a job takes (docs/semantics.md 6): 1. soonest expiry; 2. Available first;
    3. left by the earlier submission; 4. pool id."""
    return (pool.expires_at, pool.available_since, pool.sequence, pool.id)


def eviction_key(pool: WarmPool) -> Key:
    """Own pools an in-quota head evicts (docs/semantics.md 5.3): 1. soonest-expiring first;
    2. Available first; 3. pool id."""
    return (pool.expires_at, pool.available_since, pool.id)

