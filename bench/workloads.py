"""Workloads shaped like Kueue's scheduler performance baseline, shared by bench/engine.py
and by any test that wants the same shape at a smaller size.

One capacity unit; every share LEND_AND_BORROW with an unlimited borrow limit; jobs in three
classes (small, medium, large) shuffled with a fixed seed and spread round-robin over the
shares, so the same arguments always give the same workload.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any

from scheduler import (
    CapacityUnit,
    CycleResult,
    Dispatch,
    Job,
    JobStatus,
    Policy,
    Preempt,
    QuotaShare,
    SetPendingReason,
    Snapshot,
    Strategy,
)

UNIT = "ml.g5.xlarge"
SEED = 20_240_601


@dataclass(frozen=True, slots=True)
class JobClass:
    """One kind of job in the mix: its share of the jobs, size, priority and run time."""

    name: str
    fraction: float
    instance_count: int
    priority: int
    duration_seconds: int


JOB_CLASSES = (
    JobClass("small", 0.70, 1, 50, 20),
    JobClass("medium", 0.20, 5, 100, 50),
    JobClass("large", 0.10, 20, 200, 100),
)


@dataclass(frozen=True, slots=True)
class Shape:
    """The size of a workload: capacity, how many shares split it, and how many jobs."""

    name: str
    capacity: int
    shares: int
    share_limit: int
    jobs: int


BASELINE = Shape("30 shares", capacity=600, shares=30, share_limit=20, jobs=15_000)
LARGE = Shape("100 shares", capacity=600, shares=100, share_limit=6, jobs=50_000)


@dataclass(frozen=True, slots=True)
class Submission:
    """One job of the workload, in submission order."""

    name: str
    quota_share: str
    job_class: JobClass


def share_names(shape: Shape) -> list[str]:
    width = len(str(shape.shares))
    return [f"qs{index:0{width}d}" for index in range(1, shape.shares + 1)]


def submissions(shape: Shape, seed: int = SEED) -> list[Submission]:
    """The workload's jobs: exact class counts (the large class takes the rounding),
    shuffled with `seed`, shares assigned round-robin in submission order."""
    counts = [round(shape.jobs * job_class.fraction) for job_class in JOB_CLASSES[:-1]]
    counts.append(shape.jobs - sum(counts))
    classes = [
        job_class for job_class, count in zip(JOB_CLASSES, counts, strict=True)
        for _ in range(count)
    ]
    random.Random(seed).shuffle(classes)
    shares = share_names(shape)
    width = len(str(shape.jobs))
    return [
        Submission(f"job{index:0{width}d}", shares[index % len(shares)], job_class)
        for index, job_class in enumerate(classes)
    ]


# Snapshot for one scheduling cycle ------------------------------------------------------


def quota_shares(shape: Shape) -> tuple[QuotaShare, ...]:
    return tuple(
        QuotaShare(
            name=name,
            limits=((UNIT, shape.share_limit),),
            strategy=Strategy.LEND_AND_BORROW,
            borrow_limit=-1,
        )
        for name in share_names(shape)
    )


def queued_snapshot(shape: Shape, seed: int = SEED, now: float = 0) -> Snapshot:
    """Every job RUNNABLE and nothing running: the first cycle of the baseline."""
    jobs = tuple(
        Job(
            id=item.name,
            quota_share=item.quota_share,
            priority=item.job_class.priority,
            sequence=sequence,
            instance_type=UNIT,
            instance_count=item.job_class.instance_count,
            status=JobStatus.RUNNABLE,
        )
        for sequence, item in enumerate(submissions(shape, seed))
    )
    return Snapshot(
        now=now,
        capacity=(CapacityUnit(UNIT, shape.capacity, cold_start_seconds=0, warm_start_seconds=0),),
        shares=quota_shares(shape),
        jobs=jobs,
        policy=Policy(preemption_grace_seconds=0),
    )


# Scenario for the simulator (docs/scenario-format.md) -----------------------------------

ARRIVAL_SECONDS = 350
SIMULATED_SECONDS = 3_000


def scenario(shape: Shape, seed: int = SEED) -> dict[str, Any]:
    """The same workload as a scenario document: submissions spread evenly over
    0..ARRIVAL_SECONDS, each class running its duration, simulated until SIMULATED_SECONDS."""
    items = submissions(shape, seed)
    last = max(len(items) - 1, 1)
    return {
        "name": f"kueue-baseline-{shape.shares}-shares-{shape.jobs}-jobs",
        "tick_seconds": 1,
        "until": SIMULATED_SECONDS,
        "settings": {"preemption_grace_seconds": 0},
        "capacity": [
            {
                "capacity_unit": UNIT,
                "max_capacity": shape.capacity,
                "warm_pool_limit": 0,
                "cold_start_seconds": 0,
                "warm_start_seconds": 0,
            }
        ],
        "quota_shares": [
            {
                "name": name,
                "capacity_limits": [{"capacity_unit": UNIT, "max_capacity": shape.share_limit}],
                "sharing_strategy": "LEND_AND_BORROW",
                "borrow_limit": -1,
            }
            for name in share_names(shape)
        ],
        "actions": [
            {"at": index * ARRIVAL_SECONDS // last, "submit": _submit(item)}
            for index, item in enumerate(items)
        ],
    }


def _submit(item: Submission) -> dict[str, Any]:
    return {
        "name": item.name,
        "quota_share": item.quota_share,
        "priority": item.job_class.priority,
        "instance_type": UNIT,
        "instance_count": item.job_class.instance_count,
        "duration_seconds": item.job_class.duration_seconds,
    }


# The state after a cycle ----------------------------------------------------------------


def after_cycle(snapshot: Snapshot, result: CycleResult) -> Snapshot:
    """The snapshot the shell would build next, at the same time, once it has applied
    `result`: dispatched jobs RUNNING on their instances, preempted jobs queued again after
    their grace, and every waiting job carrying the pending reason it was given."""
    dispatched = {d.job_id: d for d in result.decisions if isinstance(d, Dispatch)}
    preempted = {d.job_id: d for d in result.decisions if isinstance(d, Preempt)}
    reasons = {d.job_id: d.reason.value for d in result.decisions
               if isinstance(d, SetPendingReason)}
    jobs = []
    for job in snapshot.jobs:
        if job.id in dispatched:
            job = _running(job, dispatched[job.id], snapshot.now)
        elif job.id in preempted:
            job = replace(job, status=JobStatus.RUNNABLE, instances=(), dispatched_at=None,
                          started_at=None, not_before=preempted[job.id].grace_until)
        if job.id in reasons:
            job = replace(job, status=JobStatus.RUNNABLE, pending_code=reasons[job.id])
        jobs.append(job)
    return replace(snapshot, jobs=tuple(jobs))


def _running(job: Job, dispatch: Dispatch, now: float) -> Job:
    return replace(job, status=JobStatus.RUNNING, instances=dispatch.instances,
                   dispatched_at=now, started_at=dispatch.starting_at)


# A week of a trace: 1,000 jobs a day ------------------------------------------------------

DAY_SECONDS = 86_400
TRACE_UNIT_CAPACITY = 800
TRACE_SHARES = 10


@dataclass(frozen=True, slots=True)
class TraceClass:
    """One kind of job of the trace: its share of the jobs, size, priority, run time range
    (seconds) and keep-alive."""

    name: str
    fraction: float
    instance_count: int
    priority: int
    shortest: int
    longest: int
    keep_alive_seconds: int


TRACE_CLASSES = (
    TraceClass("notebook-sized", 0.70, 1, 50, 600, 3_600, 300),
    TraceClass("training", 0.20, 4, 100, 3_600, 14_400, 0),
    TraceClass("large training", 0.10, 16, 200, 14_400, 43_200, 0),
)


def week_trace(jobs_per_day: int = 1_000, days: int = 7, seed: int = SEED) -> dict[str, Any]:
    """A scenario of `days` days with `jobs_per_day` submissions a day at seeded random
    seconds, from the classes above (minutes to half a day of work, small jobs keeping their
    instances warm for 5 minutes), over ten LEND_AND_BORROW shares of one 800-instance
    unit with cold and warm start delays: about 80 % busy, so queues form and drain, pools
    are reused and expire, and most seconds of the week have nothing due."""
    rng = random.Random(seed)
    names = [f"team{index:02d}" for index in range(1, TRACE_SHARES + 1)]
    total = jobs_per_day * days
    arrivals = sorted(rng.randrange(days * DAY_SECONDS) for _ in range(total))
    weights = [job_class.fraction for job_class in TRACE_CLASSES]
    actions = []
    for index, at in enumerate(arrivals):
        job_class = rng.choices(TRACE_CLASSES, weights)[0]
        actions.append({"at": at, "submit": {
            "name": f"trace{index:05d}",
            "quota_share": names[rng.randrange(len(names))],
            "priority": job_class.priority,
            "instance_type": UNIT,
            "instance_count": job_class.instance_count,
            "duration_seconds": rng.randint(job_class.shortest, job_class.longest),
            "keep_alive_seconds": job_class.keep_alive_seconds,
        }})
    return {
        "name": f"trace-{jobs_per_day}-a-day-{days}-days",
        "tick_seconds": 1,
        "until": days * DAY_SECONDS,
        "capacity": [{"capacity_unit": UNIT, "max_capacity": TRACE_UNIT_CAPACITY,
                      "warm_pool_limit": 40, "cold_start_seconds": 120,
                      "warm_start_seconds": 15}],
        "quota_shares": [
            {"name": name,
             "capacity_limits": [{"capacity_unit": UNIT,
                                  "max_capacity": TRACE_UNIT_CAPACITY // TRACE_SHARES}],
             "sharing_strategy": "LEND_AND_BORROW", "borrow_limit": -1}
            for name in names
        ],
        "actions": actions,
    }
