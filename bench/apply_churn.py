"""What a scheduling cycle costs per decision when jobs churn: every cycle dispatches
`--dispatches` jobs and as many end, through the real shell on PostgreSQL.

Run by hand, never by tests:

    python bench/apply_churn.py                       # 40 and 4 dispatches per cycle
    python bench/apply_churn.py --dispatches 40 --cycles 20
    python bench/apply_churn.py --repo /tmp/base      # another checkout's code (a baseline)

It creates the PostgreSQL database quotaweb_bench_apply_churn (DATABASE_URL may name another
whose name contains "bench"), migrates it, and DROPS it at the end.  Each shape: one capacity
unit of `--dispatches` instances without start delays, one LEND_AND_BORROW share with all of
it, and a backlog of 1-instance simulated jobs of zero duration (RUNNABLE) plus `--backlog`
more that wait.  Every cycle (one simulated second apart) the previous cycle's attempts
start, run and end in the time-driven transitions, and the cycle dispatches as many again.
After `--warm-up` cycles, `--cycles` are measured.

Printed per shape, medians per cycle: the decisions and dispatches, the SQL statements of
each phase (transitions = `transitions.advance`: the executors' reports; load; apply =
`apply_decisions`; usage = the usage samples and the cycle's record), the apply's and the
whole cycle's wall ms, and both per decision, and this process's CPU ms per decision for
the apply and the cycle (PostgreSQL's own CPU not counted); with the load average, since
the wall times move with the machine's load where the statement counts do not.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/quotaweb_bench_apply_churn"
UNIT = "ml.bench"
SHARE = "bench"


def _repo_first(argv: list[str]) -> Path:
    """--repo PATH puts another checkout's code first on the path (before import)."""
    repo = Path(__file__).resolve().parent.parent
    if "--repo" in argv:
        repo = Path(argv[argv.index("--repo") + 1]).resolve()
    sys.path.insert(0, str(repo))
    # This checkout's bench/ (bench/api.py's database helpers), after the code measured.
    sys.path.insert(1, str(Path(__file__).resolve().parent.parent))
    return repo


def populate(dispatches: int, jobs: int) -> None:
    from django.core.management import call_command

    from quotaweb.models import CapacityLimit, CapacityUnit, Job, QuotaShare

    call_command("flush", interactive=False, verbosity=0)
    CapacityUnit.objects.create(name=UNIT, max_capacity=dispatches, warm_pool_limit=0,
                                cold_start_seconds=0, warm_start_seconds=0)
    share = QuotaShare.objects.create(name=SHARE, sharing_strategy="LEND_AND_BORROW",
                                      borrow_limit=-1)
    CapacityLimit.objects.create(quota_share=share, capacity_unit=UNIT,
                                 max_capacity=dispatches)
    Job.objects.bulk_create(
        (Job(name=f"j{n}", quota_share=share, instance_type=UNIT, instance_count=1,
             executor="simulated", duration_seconds=0, status="RUNNABLE")
         for n in range(jobs)),
        batch_size=5_000,
    )


# Counting statements per phase ------------------------------------------------------------


class Phases:
    """Counts the statements run while each wrapped phase runs (the innermost wins)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.seconds: Counter[str] = Counter()
        self.cpu: Counter[str] = Counter()
        self.stack: list[str] = []

    def __call__(self, execute: Callable[..., Any], sql: str, params: Any, many: bool,
                 context: Any) -> Any:
        self.counts[self.stack[-1] if self.stack else "other"] += 1
        return execute(sql, params, many, context)

    def wrap(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            self.stack.append(name)
            start, cpu = time.perf_counter(), time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - start
                self.cpu[name] += time.process_time() - cpu
                self.stack.pop()
        return wrapped

    def reset(self) -> None:
        self.counts.clear()
        self.seconds.clear()
        self.cpu.clear()


@contextmanager
def counting() -> Iterator[Phases]:
    from django.db import connection

    from quotaweb.scheduling import tick, transitions, usage

    phases = Phases()
    originals = [(transitions, "advance"), (tick, "load_snapshot"),
                 (tick, "apply_decisions"), (usage, "record_changes"), (tick, "_record")]
    saved = [(owner, name, getattr(owner, name)) for owner, name in originals]
    names = {"advance": "transitions", "load_snapshot": "load", "apply_decisions": "apply",
             "record_changes": "usage", "_record": "usage"}
    for owner, name, function in saved:
        setattr(owner, name, phases.wrap(names[name], function))
    try:
        with connection.execute_wrapper(phases):
            yield phases
    finally:
        for owner, name, function in saved:
            setattr(owner, name, function)


# Measuring --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    dispatches_per_cycle: int
    decisions: float
    dispatches: float
    statements: dict[str, float]
    apply_ms: float
    cycle_ms: float
    apply_cpu_ms: float
    cycle_cpu_ms: float

    @property
    def total_statements(self) -> float:
        return sum(self.statements.values())


def measure(dispatches: int, cycles: int, warm_up: int, backlog: int) -> Row:
    from quotaweb.scheduling.tick import run_cycle
    from scheduler import Dispatch

    populate(dispatches, dispatches * (cycles + warm_up + 2) + backlog)
    t0 = datetime.now(UTC).replace(microsecond=0)
    per_cycle: list[tuple[int, int, Counter[str], float, float, float, float]] = []
    with counting() as phases:
        for second in range(warm_up + cycles):
            phases.reset()
            start, cpu = time.perf_counter(), time.process_time()
            report = run_cycle(now=t0 + timedelta(seconds=second))
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu
            if report is None:
                raise SystemExit("a cycle did not run: another holds the lock or it was stale")
            if second < warm_up:
                continue
            decisions = report.result.decisions
            per_cycle.append((len(decisions), sum(isinstance(d, Dispatch) for d in decisions),
                              Counter(phases.counts), report.apply_ms, 1000 * wall,
                              1000 * phases.cpu["apply"], 1000 * cpu))
    kinds = ("transitions", "load", "apply", "usage", "other")
    return Row(
        dispatches_per_cycle=dispatches,
        decisions=statistics.median(c[0] for c in per_cycle),
        dispatches=statistics.median(c[1] for c in per_cycle),
        statements={k: statistics.median(c[2][k] for c in per_cycle) for k in kinds},
        apply_ms=statistics.median(c[3] for c in per_cycle),
        cycle_ms=statistics.median(c[4] for c in per_cycle),
        apply_cpu_ms=statistics.median(c[5] for c in per_cycle),
        cycle_cpu_ms=statistics.median(c[6] for c in per_cycle),
    )


def print_table(rows: list[Row]) -> None:
    print("| dispatches/cycle | decisions | statements: transitions | load | apply | usage "
          "| other | cycle | apply ms | apply ms/decision | cycle ms | cycle ms/decision "
          "| apply CPU ms/decision | cycle CPU ms/decision |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
          "| ---: | ---: |")
    for row in rows:
        s = row.statements
        per = max(row.decisions, 1)
        print(f"| {row.dispatches_per_cycle} | {row.decisions:g} | {s['transitions']:g} "
              f"| {s['load']:g} | {s['apply']:g} | {s['usage']:g} | {s['other']:g} "
              f"| {row.total_statements:g} | {row.apply_ms:.2f} | {row.apply_ms / per:.3f} "
              f"| {row.cycle_ms:.1f} | {row.cycle_ms / per:.3f} "
              f"| {row.apply_cpu_ms / per:.3f} | {row.cycle_cpu_ms / per:.3f} |")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    repo = _repo_first(argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dispatches", type=int, nargs="+", default=[40, 4],
                        help="dispatches (and ends) per cycle (default: 40 4)")
    parser.add_argument("--cycles", type=int, default=15, help="measured cycles (default 15)")
    parser.add_argument("--warm-up", type=int, default=3, help="cycles before (default 3)")
    parser.add_argument("--backlog", type=int, default=200,
                        help="jobs that keep waiting (default 200)")
    parser.add_argument("--repo", default=str(repo), help="the checkout whose code runs")
    args = parser.parse_args(argv)
    from bench.api import bench_database, drop_database

    database = bench_database(DEFAULT_DATABASE_URL)
    try:
        print(f"# Apply under churn (code: {repo}, database {database}, median of "
              f"{args.cycles} cycles after {args.warm_up})\n")
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
        rows = [measure(n, args.cycles, args.warm_up, args.backlog) for n in args.dispatches]
        print_table(rows)
        print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        drop_database()
    return 0


if __name__ == "__main__":
    sys.exit(main())
