"""How good and how costly the estimated start (scheduler.forecast) is.

Run by hand, never by tests:

    python bench/forecast.py            # both tables
    python bench/forecast.py --cost     # the cost table only
    python bench/forecast.py --jobs 3000 --moments 100,350  # a smaller accuracy run

Accuracy: the 15,000-job baseline of bench/workloads.py is simulated; at a few moments the
forecast is made from that moment's snapshot (every job's runtime is its exact
duration_seconds, as for simulated jobs live) and compared with when each queued job was
then actually placed in the simulation (its first dispatch after the moment).  Before the
last arrival the forecast cannot know the jobs still to come, so its error there is mostly
theirs.  Cost: one forecast over 1,000 and 15,000 queued jobs, nothing running (the first
cycle of the baseline's shape, run forward until every job is placed).

Prints markdown tables.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.workloads import (  # noqa: E402
    ARRIVAL_SECONDS,
    BASELINE,
    Shape,
    queued_snapshot,
    scenario,
    submissions,
)
from scheduler.decisions import CycleResult  # noqa: E402
from scheduler.forecast import Estimate, JobOutlook, Runtime, forecast  # noqa: E402
from scheduler.model import Snapshot  # noqa: E402
from scheduler.simulate import parse_scenario, simulate  # noqa: E402

MOMENTS = (100, 200, ARRIVAL_SECONDS, 600)


def outlooks(shape: Shape) -> dict[str, JobOutlook]:
    """Every job's exact runtime, as a simulated job's duration_seconds is live."""
    return {
        item.name: JobOutlook(Runtime(item.job_class.duration_seconds,
                                      f"simulated {item.job_class.duration_seconds} s"))
        for item in submissions(shape)
    }


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


# Accuracy ------------------------------------------------------------------------------


def accuracy(shape: Shape, moments: tuple[int, ...]) -> None:
    wanted = set(moments)
    snapshots: dict[int, Snapshot] = {}

    def observe(before: Snapshot, result: CycleResult, after: Snapshot) -> None:
        if int(before.now) in wanted and int(before.now) not in snapshots:
            snapshots[int(before.now)] = before

    started = time.perf_counter()
    result = simulate(parse_scenario(scenario(shape)), observe)
    print(f"Simulated {shape.jobs:,} jobs in {time.perf_counter() - started:.1f} s.\n")
    attempts = {job["name"]: [a["scheduled_at"] for a in job["attempts"]]
                for job in result["jobs"]}
    known = outlooks(shape)
    print("| moment (s) | queued jobs | estimated | none | placed later | median abs error (s) "
          "| p90 abs error (s) | forecast (s) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for moment in moments:
        snapshot = snapshots.get(moment)
        if snapshot is None:
            print(f"| {moment} | the simulation had no cycle at this second | | | | | | |")
            continue
        gc.collect()
        began = time.perf_counter()
        estimates = forecast(snapshot, known)
        cost = time.perf_counter() - began
        errors, none = compare(estimates, attempts, moment)
        placed = len(errors)
        print(f"| {moment} | {len(estimates):,} | {len(estimates) - none:,} | {none:,} "
              f"| {placed:,} | {statistics.median(errors) if errors else 0:.0f} "
              f"| {percentile(errors, 0.9) if errors else 0:.0f} | {cost:.1f} |")


def compare(estimates: dict[str, Estimate], attempts: dict[str, list[int]],
            moment: int) -> tuple[list[float], int]:
    """Absolute errors of the estimated jobs that were then placed (first dispatch at or
    after `moment`), and how many estimates were None."""
    errors: list[float] = []
    none = 0
    for job, estimate in estimates.items():
        if estimate.start_at is None:
            none += 1
            continue
        actual = next((t for t in attempts.get(job, []) if t >= moment), None)
        if actual is not None:
            errors.append(abs(estimate.start_at - actual))
    return errors, none


# Cost ------------------------------------------------------------------------------------


def cost(jobs: int) -> tuple[float, int]:
    shape = replace(BASELINE, name=f"{jobs} jobs", jobs=jobs)
    snapshot = queued_snapshot(shape)
    known = outlooks(shape)
    gc.collect()
    began = time.perf_counter()
    estimates = forecast(snapshot, known)
    return time.perf_counter() - began, len(estimates)


def print_cost(sizes: tuple[int, ...]) -> None:
    print("| queued jobs | one forecast (s) |")
    print("| ---: | ---: |")
    for jobs in sizes:
        seconds, count = cost(jobs)
        print(f"| {count:,} | {seconds:.2f} |")
    print()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cost", action="store_true", help="only the cost table")
    parser.add_argument("--jobs", type=int, default=BASELINE.jobs,
                        help="jobs in the accuracy run (default: the 15,000 baseline)")
    parser.add_argument("--moments", default=",".join(map(str, MOMENTS)),
                        help="seconds at which to forecast, comma-separated")
    args: Any = parser.parse_args(argv)
    print_cost((1_000, 15_000))
    if not args.cost:
        shape = replace(BASELINE, jobs=args.jobs)
        accuracy(shape, tuple(int(m) for m in args.moments.split(",")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
