"""Consistency checks on a Snapshot before a cycle decides from it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Container, Sequence

from .errors import InconsistentSnapshot
from .model import CapacityUnit, Job, QuotaShare, Snapshot, WarmPool


def validate_snapshot(snapshot: Snapshot) -> None:
    """Raise InconsistentSnapshot naming the first contradiction found."""
    _unique("capacity unit", [unit.name for unit in snapshot.capacity])
    _unique("quota share", [share.name for share in snapshot.shares])
    _unique("job", [job.id for job in snapshot.jobs])
    _unique("warm pool", [pool.id for pool in snapshot.warm_pools])
    _check_figures(snapshot.capacity, snapshot.shares)
    shares = {share.name for share in snapshot.shares}
    held: dict[str, dict[int, str]] = defaultdict(dict)
    for job in snapshot.jobs:
        check_job(job, shares)
        if not job.status.queued:
            _check_holding(job, held)
    _check_pools(snapshot.warm_pools, shares, held)


def validate_holdings(
    shares: Collection[str], holding: Sequence[Job], warm_pools: Sequence[WarmPool],
    waiting: Container[str],
) -> None:
    """validate_snapshot's checks of what is held, for a cycle whose waiting jobs were
    checked as they joined its backlog (`waiting`: their ids)."""
    _unique("job", [job.id for job in holding])
    _unique("warm pool", [pool.id for pool in warm_pools])
    held: dict[str, dict[int, str]] = defaultdict(dict)
    for job in holding:
        if job.id in waiting:
            raise InconsistentSnapshot(f"job {job.id} appears twice")
        check_job(job, shares)
        if job.status.queued:
            raise InconsistentSnapshot(f"job {job.id} is {job.status.value}, not holding")
        _check_holding(job, held)
    _check_pools(warm_pools, shares, held)


def validate_configuration(capacity: Sequence[CapacityUnit], shares: Sequence[QuotaShare]) -> None:
    _unique("capacity unit", [unit.name for unit in capacity])
    _unique("quota share", [share.name for share in shares])
    _check_figures(capacity, shares)


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


def _check_holding(job: Job, held: dict[str, dict[int, str]]) -> None:
    status = job.status
    if len(job.instances) != job.instance_count:
        raise InconsistentSnapshot(
            f"job {job.id} is {status.value} on {len(job.instances)} instances "
            f"but needs {job.instance_count}"
        )
    if job.dispatched_at is None:
        raise InconsistentSnapshot(f"job {job.id} is {status.value} with no dispatch time")
    _hold(held[job.instance_type], job.instances, f"job {job.id}")


def _check_pools(
    warm_pools: Sequence[WarmPool], shares: Container[str], held: dict[str, dict[int, str]]
) -> None:
    for pool in warm_pools:
        where = f"warm pool {pool.id}"
        if pool.quota_share not in shares:
            raise InconsistentSnapshot(f"{where} belongs to unknown quota share {pool.quota_share}")
        if len(pool.instances) != pool.instance_count:
            raise InconsistentSnapshot(
                f"{where} holds {len(pool.instances)} instances but counts {pool.instance_count}"
            )
        _hold(held[pool.instance_type], pool.instances, where)


def _unique(what: str, names: list[str]) -> None:
    if len(set(names)) == len(names):
        return
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise InconsistentSnapshot(f"{what} {name} appears twice")
        seen.add(name)


def _hold(holders: dict[int, str], instances: tuple[int, ...], where: str) -> None:
    for number in instances:
        if number < 0:
            raise InconsistentSnapshot(f"{where} holds negative instance number {number}")
        if number in holders:
            raise InconsistentSnapshot(
                f"{where} and {holders[number]} both hold instance {number}"
            )
        holders[number] = where
