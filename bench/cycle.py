"""How long one scheduling cycle takes through the real shell on PostgreSQL, split into
load / plan / apply, beside a bare query of the same job rows.

Run by hand, never by tests:

    python bench/cycle.py                 # 1,000 and 15,000 live jobs, 10 cycles each
    python bench/cycle.py --jobs 15000 --repetitions 5
    python bench/cycle.py --profile       # cProfile (top 20, cumulative) of a 15,000-job cycle

DATABASE_URL defaults to postgres://postgres@127.0.0.1:5432/quotaweb_bench; the database is
created and migrated if needed, and EVERY ROW IN IT IS DELETED before each shape (the
script refuses a database whose name does not contain "bench").

The workload is bench/workloads.py's Kueue-like shape (30 LEND_AND_BORROW shares with
limit 20 on 600 instances, jobs 70% 1 / 20% 5 / 10% 20 instances) at the given number of
jobs, in its steady state: the engine's first cycle over the queued jobs decides which jobs
fill the capacity; those are written RUNNING with open attempts and the others RUNNABLE
with the pending reasons that cycle gave them.  Then `run_cycle(now=…)` runs once to warm
up and `--repetitions` times measured, one simulated second apart (no job ends meanwhile).

Columns: load / plan / apply and cycle (their sum) are the medians of run_cycle's
CycleReport; "wall" is the whole run_cycle call (lock, time-driven transitions, the cycle);
"bare query" is `list(Job.objects.filter(status__in=live).values_list(*JOB_FIELDS))`, the
same rows the snapshot reads; ratio = cycle / bare query.  Peak RSS is the process's
maximum resident set so far (it only grows).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import pstats
import resource
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    # Run as a script: make the repository importable (quotaweb/, scheduler/ and bench/).
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.workloads import BASELINE, UNIT, Shape, queued_snapshot, submissions  # noqa: E402
from scheduler import Dispatch, Preempt, SetPendingReason, schedule  # noqa: E402

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/quotaweb_bench"
JOB_COUNTS = (1_000, 15_000)
TARGET_MS = 250.0  # per cycle at 15,000 jobs
TARGET_JOBS = 15_000
# Long enough that no job ends while the cycles run (each class's duration × 100).
DURATION_FACTOR = 100
MIB = 1024 * 1024


# The database -----------------------------------------------------------------------------


def set_up_django() -> str:
    """Point Django at the bench database (creating and migrating it); returns its name."""
    os.environ.setdefault("DATABASE_URL", DEFAULT_DATABASE_URL)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "quotaweb.settings")
    from quotaweb import env

    entry = env.database(os.environ["DATABASE_URL"])
    name = str(entry["NAME"])
    if "bench" not in name:
        raise SystemExit(f"bench/cycle.py deletes every row of its database; refusing "
                         f"{name!r} (use a database whose name contains 'bench').")
    _create_database(entry)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    return name


def _create_database(entry: dict[str, object]) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(host=entry["HOST"] or None, port=entry["PORT"] or None,
                         user=entry["USER"] or None, password=entry["PASSWORD"] or None,
                         dbname="postgres", autocommit=True) as server:
        exists = server.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                                [entry["NAME"]]).fetchone()
        if not exists:
            server.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(entry["NAME"])))


def wipe() -> None:
    """Every row of every table, so shapes never see each other's jobs."""
    from django.core.management import call_command

    call_command("flush", interactive=False, verbosity=0)


# The workload -----------------------------------------------------------------------------


def populate(shape: Shape, t0: datetime) -> None:
    """The shape's steady state: the first cycle's dispatches RUNNING, the rest RUNNABLE."""
    from quotaweb.models import Attempt, CapacityLimit, CapacityUnit, Job, QuotaShare

    CapacityUnit.objects.create(name=UNIT, max_capacity=shape.capacity, warm_pool_limit=0,
                                cold_start_seconds=0, warm_start_seconds=0)
    snapshot = queued_snapshot(shape, now=t0.timestamp())
    shares = {
        share.name: QuotaShare.objects.create(name=share.name,
                                              sharing_strategy="LEND_AND_BORROW",
                                              borrow_limit=-1)
        for share in snapshot.shares
    }
    CapacityLimit.objects.bulk_create(
        CapacityLimit(quota_share=share, capacity_unit=UNIT, max_capacity=shape.share_limit)
        for share in shares.values()
    )
    first = schedule(snapshot)
    dispatched = {d.job_id: d for d in first.decisions if isinstance(d, Dispatch)}
    reasons = {d.job_id: d.reason.value for d in first.decisions
               if isinstance(d, SetPendingReason)}
    started = t0 - timedelta(seconds=1)
    jobs = []
    for item in submissions(shape):  # in submission order, so ids follow the sequence
        dispatch = dispatched.get(item.name)
        jobs.append(Job(
            name=item.name, quota_share=shares[item.quota_share],
            priority=item.job_class.priority, instance_type=UNIT,
            instance_count=item.job_class.instance_count, executor="simulated",
            duration_seconds=item.job_class.duration_seconds * DURATION_FACTOR,
            status="RUNNING" if dispatch else "RUNNABLE",
            instances=list(dispatch.instances) if dispatch else [],
            scheduled_at=started if dispatch else None, started_at=started if dispatch else None,
            pending_code=reasons.get(item.name),
        ))
    Job.objects.bulk_create(jobs, batch_size=5_000)
    Attempt.objects.bulk_create(
        (Attempt(job=job, number=1, instances=job.instances,
                 borrowed_instances=dispatched[job.name].borrowed_instances,
                 scheduled_at=started, starting_at=started, running_at=started,
                 started_at=started, heartbeat_at=started)
         for job in jobs if job.instances),
        batch_size=5_000,
    )


# Measuring --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    jobs: int
    running: int
    load_ms: float
    plan_ms: float
    apply_ms: float
    cycle_ms: float
    wall_ms: float
    query_ms: float
    decisions: int
    dispatches: int
    preemptions: int
    peak_rss_mib: float

    @property
    def ratio(self) -> float:
        return self.cycle_ms / self.query_ms

    def target(self) -> str:
        if self.jobs != TARGET_JOBS:
            return "-"
        return f"< {TARGET_MS:g} ms: {'met' if self.cycle_ms < TARGET_MS else 'MISSED'}"


def bare_query() -> list[tuple[Any, ...]]:
    from quotaweb.models import Job
    from quotaweb.models.jobs import ACTIVE_STATUSES, QUEUED_STATUSES
    from quotaweb.scheduling.snapshot import JOB_FIELDS

    return list(Job.objects.filter(status__in=[*QUEUED_STATUSES, *ACTIVE_STATUSES])
                .values_list(*JOB_FIELDS))


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    gc.collect()
    start = time.perf_counter()
    value = action()
    return 1000 * (time.perf_counter() - start), value


def measure(jobs: int, repetitions: int) -> Row:
    from quotaweb.models import Job
    from quotaweb.scheduling.tick import run_cycle

    shape = replace(BASELINE, jobs=jobs)
    t0 = datetime.now(UTC).replace(microsecond=0)
    wipe()
    populate(shape, t0)
    run_cycle(now=t0)  # warm-up: the first usage samples, connection and caches
    walls, reports = [], []
    for second in range(1, repetitions + 1):
        wall, report = timed(lambda s=second: run_cycle(now=t0 + timedelta(seconds=s)))
        if report is None:
            raise SystemExit("a cycle did not run: another holds the lock or it was stale")
        walls.append(wall)
        reports.append(report)
    queries = [timed(bare_query)[0] for _ in range(repetitions)]
    last = reports[-1].result.decisions
    return Row(
        jobs=jobs,
        running=Job.objects.filter(status="RUNNING").count(),
        load_ms=statistics.median(r.load_ms for r in reports),
        plan_ms=statistics.median(r.plan_ms for r in reports),
        apply_ms=statistics.median(r.apply_ms for r in reports),
        cycle_ms=statistics.median(r.total_ms for r in reports),
        wall_ms=statistics.median(walls),
        query_ms=statistics.median(queries),
        decisions=len(last),
        dispatches=sum(isinstance(d, Dispatch) for d in last),
        preemptions=sum(isinstance(d, Preempt) for d in last),
        peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MIB,
    )


def profile(jobs: int, top: int = 20) -> None:
    """cProfile of one steady cycle (after a warm-up cycle), top functions by cumulative
    time."""
    from quotaweb.scheduling.tick import run_cycle

    t0 = datetime.now(UTC).replace(microsecond=0)
    wipe()
    populate(replace(BASELINE, jobs=jobs), t0)
    run_cycle(now=t0)
    profiler = cProfile.Profile()
    profiler.runcall(run_cycle, now=t0 + timedelta(seconds=1))
    print(f"## run_cycle with {jobs:,} live jobs: top {top} by cumulative time\n")
    pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(top)


# Printing ---------------------------------------------------------------------------------


def print_table(rows: list[Row]) -> None:
    print("| jobs | running | load ms | plan ms | apply ms | cycle ms | wall ms "
          "| bare query ms | ratio | target | peak RSS MiB |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |")
    for row in rows:
        print(f"| {row.jobs:,} | {row.running:,} | {row.load_ms:.1f} | {row.plan_ms:.1f} "
              f"| {row.apply_ms:.1f} | {row.cycle_ms:.1f} | {row.wall_ms:.1f} "
              f"| {row.query_ms:.1f} | {row.ratio:.1f} | {row.target()} "
              f"| {row.peak_rss_mib:.0f} |")
    print()
    for row in rows:
        print(f"- {row.jobs:,} jobs: the last cycle made {row.decisions:,} decisions "
              f"({row.dispatches:,} dispatches, {row.preemptions:,} preemptions)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=list(JOB_COUNTS),
                        help="live jobs per shape (default: 1000 15000)")
    parser.add_argument("--repetitions", type=int, default=10,
                        help="measured cycles per shape (default: 10)")
    parser.add_argument("--profile", action="store_true",
                        help="only profile one 15,000-job cycle")
    args = parser.parse_args(argv)
    database = set_up_django()
    if args.profile:
        profile(TARGET_JOBS)
        return 0
    print(f"# Shell cycle benchmark (Python {sys.version.split()[0]}, PostgreSQL database "
          f"{database}, median of {args.repetitions} cycles)\n")
    print_table([measure(jobs, args.repetitions) for jobs in args.jobs])
    return 0


if __name__ == "__main__":
    sys.exit(main())
