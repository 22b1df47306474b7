"""Consistency checks on what a cycle decides from.

`validate_snapshot` checks a whole Snapshot.  A caller that keeps a Backlog and Holdings
between cycles has each job checked as it joins them (check_job, check_holding), the
configuration when it changes (validate_configuration), and the pools at each cycle
(validate_pools): the same checks, each made once.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Container, Mapping, Sequence
from operator import attrgetter

from .errors import InconsistentSnapshot
from .model import CapacityUnit, Job, JobStatus, QuotaShare, Snapshot, WarmPool

Held = Mapping[str, Mapping[int, str]]  # unit: instance number -> who holds it
_TERMINAL = frozenset(status for status in JobStatus if status.terminal)
_QUEUED = frozenset(status for status in JobStatus if status.queued)
_share = attrgetter("quota_share")
_count = attrgetter("instance_count")
_status = attrgetter("status")


def validate_snapshot(snapshot: Snapshot) -> None:
    """Raise InconsistentSnapshot naming the first contradiction found."""
    _unique("capacity unit", [unit.name for unit in snapshot.capacity])
    _unique("quota share", [share.name for share in snapshot.shares])
    _unique("job", [job.id for job in snapshot.jobs])
    _unique("warm pool", [pool.id for pool in snapshot.warm_pools])
    _check_figures(snapshot.capacity, snapshot.shares)
    shares = {share.name for share in snapshot.shares}
    jobs = snapshot.jobs
    # What every job must be, checked in bulk first: a live system's snapshot holds every
    # waiting job, every second.  Only if something is wrong are the jobs checked one by
    # one, in order, to name the first contradiction.
    bulk_checked = not jobs or (
        set(map(_share, jobs)) <= shares
        and min(map(_count, jobs)) >= 1
        and not set(map(_status, jobs)) & _TERMINAL
    )
    held: dict[str, dict[int, str]] = defaultdict(dict)
    for job in jobs:
        if not bulk_checked:
            check_job(job, shares)
        if job.status not in _QUEUED:
            unit = held[job.instance_type]
            check_holding(job, unit)
            unit.update(dict.fromkeys(job.instances, f"job {job.id}"))
    validate_pools(snapshot.warm_pools, shares, held)
    for name, on, mean in snapshot.past_borrowed:
        if name not in shares or not math.isfinite(mean) or mean < 0:
            raise InconsistentSnapshot(
                f"past borrowing of share {name} on unit {on} is {mean!r}: it must be a "
                "finite number of 0 or more, for a share of the snapshot"
            )


def validate_configuration(capacity: Sequence[CapacityUnit], shares: Sequence[QuotaShare]) -> None:
    _unique("capacity unit", [unit.name for unit in capacity])
    _unique("quota share", [share.name for share in shares])
    _check_figures(capacity, shares)


def check_job(job: Job, shares: Container[str]) -> None:
    """What every live job must be: of a known share, needing at least one instance."""
    if job.quota_share not in shares:
        raise InconsistentSnapshot(
            f"job {job.id} belongs to unknown quota share {job.quota_share}"
        )
    if job.instance_count < 1:
        raise InconsistentSnapshot(f"job {job.id} needs {job.instance_count} instances")
    if job.status.terminal:
        raise InconsistentSnapshot(f"job {job.id} is {job.status.value}; only live jobs belong")


def check_holding(job: Job, held: Mapping[int, str]) -> None:
    """What an active job must be: dispatched, on as many instances as it needs, none of
    them held by another (`held`: its unit's holders so far)."""
    status = job.status
    if len(job.instances) != job.instance_count:
        raise InconsistentSnapshot(
            f"job {job.id} is {status.value} on {len(job.instances)} instances "
            f"but needs {job.instance_count}"
        )
    if job.dispatched_at is None:
        raise InconsistentSnapshot(f"job {job.id} is {status.value} with no dispatch time")
    _check_numbers(job.instances, (held,), f"job {job.id}")


def validate_pools(warm_pools: Sequence[WarmPool], shares: Container[str], held: Held) -> None:
    """The Available pools, against each other and the jobs' instances (`held`)."""
    _unique("warm pool", [pool.id for pool in warm_pools])
    pooled: dict[str, dict[int, str]] = defaultdict(dict)
    for pool in warm_pools:
        where = f"warm pool {pool.id}"
        if pool.quota_share not in shares:
            raise InconsistentSnapshot(f"{where} belongs to unknown quota share {pool.quota_share}")
        if len(pool.instances) != pool.instance_count:
            raise InconsistentSnapshot(
                f"{where} holds {len(pool.instances)} instances but counts {pool.instance_count}"
            )
        mine = pooled[pool.instance_type]
        _check_numbers(pool.instances, (held.get(pool.instance_type, {}), mine), where)
        mine.update(dict.fromkeys(pool.instances, where))


def _check_figures(capacity: Sequence[CapacityUnit], shares: Sequence[QuotaShare]) -> None:
    for unit in capacity:
        if unit.max_capacity < 0 or unit.warm_pool_limit < 0:
            raise InconsistentSnapshot(f"capacity unit {unit.name} has a negative figure")
    for share in shares:
        if share.borrow_limit is not None and not share.strategy.borrows:
            raise InconsistentSnapshot(
                f"quota share {share.name} has a borrow_limit but is {share.strategy.value}"
            )
        if any(limit < 0 for _, limit in share.limits):
            raise InconsistentSnapshot(f"quota share {share.name} has a negative limit")


def _unique(what: str, names: list[str]) -> None:
    if len(set(names)) == len(names):
        return
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise InconsistentSnapshot(f"{what} {name} appears twice")
        seen.add(name)


def _check_numbers(
    instances: tuple[int, ...], holders: Sequence[Mapping[int, str]], where: str
) -> None:
    own: dict[int, str] = {}
    for number in instances:
        if number < 0:
            raise InconsistentSnapshot(f"{where} holds negative instance number {number}")
        for holding in (*holders, own):
            holder = holding.get(number)
            if holder is not None:
                raise InconsistentSnapshot(f"{where} and {holder} both hold instance {number}")
        own[number] = where
