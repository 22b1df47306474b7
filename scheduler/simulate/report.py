"""What a simulation prints: jobs, events, usage rows and metrics (docs/scenario-format.md)."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from .. import quota
from ..model import JobStatus
from ..ordering import queue_key
from ..state import CycleState
from .records import SimJob
from .world import World

USAGE_FIGURES = ("in_use", "own", "borrowed", "lent", "warm", "queued")


def held_figures(world: World) -> dict[tuple[str, str], dict[str, int]]:
    """The accounting figures, as things stand, for every share on each unit in its limits
    and on each unit it holds instances of.  A unit no longer listed has L = 0: what is
    held there is borrowed and counts in the metrics, though it gets no usage row."""
    used = Counter(world.held_by_jobs)  # kept by the world as jobs move: no pass over jobs
    warm: Counter[tuple[str, str]] = Counter()
    queued = world.queued
    for pool in world.pools.values():
        key = (pool.quota_share, pool.instance_type)
        used[key] += pool.instance_count
        warm[key] += pool.instance_count
    listed = {name: share.units() for name, share in world.shares.items()}
    units = set(world.capacity).union(*listed.values())
    figures: dict[tuple[str, str], dict[str, int]] = {}
    for unit in sorted(units):
        capacity = world.capacity[unit].max_capacity if unit in world.capacity else 0
        standing = {
            name: (used[name, unit], share.limit(unit), share.strategy)
            for name, share in world.shares.items()
        }
        unowned = quota.unowned(capacity, (limit for _, limit, _ in standing.values()))
        lent = quota.lent(unowned, standing)
        for name in world.shares:
            if unit not in listed[name] and not used[name, unit]:
                continue
            u, limit, _ = standing[name]
            figures[name, unit] = {
                "in_use": u,
                "own": quota.own(u, limit),
                "borrowed": quota.borrowed(u, limit),
                "lent": lent[name],
                "warm": warm[name, unit],
                "queued": queued[name, unit],
            }
    return figures


def listed_figures(
    world: World, held: dict[tuple[str, str], dict[str, int]]
) -> dict[tuple[str, str], dict[str, int]]:
    """The usage rows' figures: only units in the share's limits."""
    return {key: fig for key, fig in held.items() if key[1] in world.shares[key[0]].units()}


def largest_idle_fit(state: CycleState) -> int:
    """The largest n of a waiting job that would fit as things stand after the cycle,
    without preempting or evicting (0 if none): the measure behind
    idle_while_eligible_instance_seconds.  Jobs preempted or withdrawn in the cycle, still
    in their grace period or misconfigured are not counted (`state.blocked`, `state.done`)."""
    largest = 0
    tried: set[tuple[str, str, int, str | None]] = set()
    # Without a pool to reuse, a job fits only if its unit has that many free instances
    # (UnitLedger.fits): a share without pools is passed over once `largest` reaches the
    # most free on any unit, which in a busy world, where nothing is free, is at once.
    free = {unit: ledger.free for unit, ledger in state.ledgers().items()}
    most_free = max(free.values(), default=0)
    for share, queue in state.queues.items():
        has_pools = bool(state.pools[share])
        if not has_pools and largest >= most_free:
            continue
        for job in queue:
            count = job.instance_count
            if count <= largest or (not has_pools and count > free.get(job.instance_type, 0)):
                continue
            if job.id in state.done or job.id in state.blocked:
                continue
            pool = state.matching_pool(job) if has_pools else None
            key = (share, job.instance_type, count, pool.id if pool else None)
            if key in tried:
                continue
            tried.add(key)
            if state.ledger(job.instance_type).fits(share, 0 if pool else count):
                largest = count
    return largest


@dataclass
class Meter:
    """Integrals over virtual time, and the usage rows that changed."""

    last_t: int = 0
    figures: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)
    held: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)
    capacity_total: int = 0
    idle_fit: int = 0
    used_integral: float = 0.0
    capacity_integral: float = 0.0
    idle_integral: float = 0.0
    per_share: dict[str, dict[str, float]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(float))
    )
    rows: list[dict[str, Any]] = field(default_factory=list)

    def integrate(self, until: int) -> None:
        span = until - self.last_t
        if span <= 0:
            return
        for (share, _), fig in self.held.items():
            self.used_integral += fig["in_use"] * span
            acc = self.per_share[share]
            acc["instance_seconds"] += fig["in_use"] * span
            acc["borrowed_instance_seconds"] += fig["borrowed"] * span
            acc["lent_instance_seconds"] += fig["lent"] * span
        self.capacity_integral += self.capacity_total * span
        self.idle_integral += self.idle_fit * span
        self.last_t = until

    def record(self, world: World, t: int, idle_fit: int) -> None:
        self.integrate(t)
        held = held_figures(world)
        figures = listed_figures(world, held)
        for key, fig in figures.items():
            if self.figures.get(key) != fig:
                share, unit = key
                self.rows.append({"t": t, "quota_share": share, "capacity_unit": unit, **fig})
        self.figures, self.held = figures, held
        self.capacity_total = sum(u.max_capacity for u in world.capacity.values())
        self.idle_fit = idle_fit


def job_json(job: SimJob, positions: dict[str, int], until: int) -> dict[str, Any]:
    runnable = job.status is JobStatus.RUNNABLE
    return {
        "name": job.name,
        "quota_share": job.spec.quota_share,
        "priority": job.priority,
        "status": job.status.value,
        "status_reason": job.status_reason,
        "pending_reason": job.pending.value if runnable and job.pending else None,
        "position": positions.get(job.name) if runnable else None,
        "attempts": [attempt.to_json() for attempt in job.attempts],
        "preempted_count": job.preempted_count,
        "warm_pool": job.segment.to_json(until) if job.segment else None,
    }


def queue_positions(world: World) -> dict[str, int]:
    """1 + the RUNNABLE jobs ahead in the share's order (docs/semantics.md 4)."""
    by_share: dict[str, list[SimJob]] = defaultdict(list)
    for job in world.live.values():
        if job.status is JobStatus.RUNNABLE:
            by_share[job.spec.quota_share].append(job)
    positions: dict[str, int] = {}
    for jobs in by_share.values():
        ordered = sorted(jobs, key=lambda j: queue_key(j.as_engine_job()))
        positions.update({job.name: index for index, job in enumerate(ordered, start=1)})
    return positions


def metrics(world: World, meter: Meter, until: int) -> dict[str, Any]:
    jobs = list(world.jobs.values())
    waits = [j.first_dispatched_at - j.submitted_at for j in jobs
             if j.first_dispatched_at is not None]
    preemptions = {"CROSS_SHARE": 0, "IN_SHARE": 0}
    warm_hits = 0
    retained = 0.0
    for job in jobs:
        for attempt in job.attempts:
            if attempt.kind is not None:
                preemptions[attempt.kind.value] += 1
            warm_hits += attempt.warm_start
        if job.segment is not None:
            seconds = job.segment.to_json(until)["retained_billable_seconds"]
            retained += seconds * job.spec.instance_count
    per_share: dict[str, Any] = {}
    for name in sorted({j.spec.quota_share for j in jobs} | set(meter.per_share)):
        acc = meter.per_share.get(name, {})
        share_waits = [j.first_dispatched_at - j.submitted_at for j in jobs
                       if j.spec.quota_share == name and j.first_dispatched_at is not None]
        per_share[name] = {
            "instance_seconds": _round(acc.get("instance_seconds", 0.0)),
            "borrowed_instance_seconds": _round(acc.get("borrowed_instance_seconds", 0.0)),
            "lent_instance_seconds": _round(acc.get("lent_instance_seconds", 0.0)),
            "mean_wait_seconds": _mean(share_waits),
        }
    return {
        "utilization": _round(meter.used_integral / meter.capacity_integral)
        if meter.capacity_integral else 0.0,
        "mean_wait_seconds": _mean(waits),
        "p95_wait_seconds": _nearest_rank(waits, 0.95),
        "preemptions": preemptions,
        "lost_work_instance_seconds": _round(world.lost_work),
        "warm_pool_hits": warm_hits,
        "retained_billable_instance_seconds": _round(retained),
        "idle_while_eligible_instance_seconds": _round(meter.idle_integral),
        "per_share": per_share,
    }


def _round(value: float) -> float | int:
    rounded = round(value, 4)
    return int(rounded) if rounded == int(rounded) else rounded


def _mean(values: list[int]) -> float | int | None:
    return _round(sum(values) / len(values)) if values else None


def _nearest_rank(values: list[int], fraction: float) -> int | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]
