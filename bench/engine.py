"""How fast one scheduling cycle is, beside the cost of merely sorting the same jobs.

Run by hand, never by tests:

    python bench/engine.py            # both shapes, 7 repetitions, then the simulation
    python bench/engine.py --quick    # 3 repetitions, 15,000-job shape only
    python bench/engine.py --profile  # cProfile of the 15,000-job fresh and steady cycles
    python bench/engine.py --no-simulation  # the cycle tables only
    python bench/engine.py --simulation-only  # the 15,000-job baseline and the week trace
    python bench/engine.py --rules-on  # the same, with fair sharing on for the fleet, weights
                                       # 1-3 and a minimum runtime of 600 s on every share
    python bench/engine.py --rules-on --half-life 3600  # and fair sharing's half-life:
                                       # every share with past borrowing on its units

Prints a markdown table.  "fresh" is the first cycle (every job queued, nothing running);
"steady" is the next cycle, at the same time, once the first cycle's dispatches are RUNNING
and the waiting jobs carry the reasons they were given, so it mostly re-checks.  "Until
settled" runs cycles at one instant until one changes nothing: a cycle that places more at
once (docs/semantics.md 5.6, placed this cycle) costs more than one that leaves the work
to later cycles, and this table compares what reaching the same placement costs.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    # Run as a script: make the repository importable (scheduler/ and bench/).
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.workloads import (  # noqa: E402
    ARRIVAL_SECONDS,
    BASELINE,
    DAY_SECONDS,
    LARGE,
    SIMULATED_SECONDS,
    Shape,
    after_cycle,
    queued_snapshot,
    scenario,
    week_trace,
)
from scheduler import CycleResult, Dispatch, Job, Preempt, Snapshot, schedule  # noqa: E402
from scheduler.simulate import run_scenario  # noqa: E402

CYCLE_TARGET_MS = 50.0  # at 15,000 jobs
# --rules-on (docs/semantics.md 5.4, 5.8): what fair sharing and a minimum runtime cost.
RULES = {"on": False, "half_life": 0}
RULES_MIN_RUNTIME_SECONDS = 600


def with_rules(snapshot: Snapshot) -> Snapshot:
    """The snapshot with both opt-in rules on when --rules-on is given, else as it is."""
    if not RULES["on"]:
        return snapshot
    half_life = RULES["half_life"]
    # With a half-life, every share stands on some past borrowing on each of its units (a
    # different fraction each), so that every borrowing key adds it in.
    past = tuple((share.name, unit, (index % 7) * 0.731)
                 for index, share in enumerate(snapshot.shares) for unit in share.units()
                 ) if half_life else ()
    return replace(
        snapshot, policy=replace(snapshot.policy, fair_sharing=True,
                                 fair_share_half_life_seconds=half_life),
        shares=tuple(replace(share, fair_share_weight=1 + index % 3,
                             min_runtime_seconds=RULES_MIN_RUNTIME_SECONDS)
                     for index, share in enumerate(snapshot.shares)),
        past_borrowed=past)


def document_with_rules(document: dict[str, Any]) -> dict[str, Any]:
    """A scenario document with both opt-in rules on when --rules-on is given."""
    if not RULES["on"]:
        return document
    return {**document,
            "settings": {**document.get("settings", {}), "fair_sharing": True,
                         **({"fair_share_half_life_seconds": RULES["half_life"]}
                            if RULES["half_life"] else {})},
            "quota_shares": [{**share, "fair_share_weight": 1 + index % 3,
                              "min_runtime_seconds": RULES_MIN_RUNTIME_SECONDS}
                             for index, share in enumerate(document["quota_shares"])]}


def fresh_snapshot(shape: Shape) -> Snapshot:
    return with_rules(queued_snapshot(shape))

RATIO_TARGET = 5.0
SIMULATION_TARGET_S = 3.0  # the 15,000-job baseline, CPU seconds
WEEK_TARGET_S = 10.0  # a week of a 1,000-job-a-day trace, CPU seconds
MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Row:
    shape: str
    jobs: int
    cycle_ms: float
    sort_ms: float
    peak_mib: float
    dispatches: int
    preemptions: int
    decisions: int

    @property
    def ratio(self) -> float:
        return self.cycle_ms / self.sort_ms

    def target(self) -> str:
        """The targets that apply to this row, and whether they are met."""
        checks = [(f"≤ {RATIO_TARGET:g}×", self.ratio <= RATIO_TARGET)]
        if self.jobs <= BASELINE.jobs:
            checks.insert(0, (f"≤ {CYCLE_TARGET_MS:g} ms", self.cycle_ms <= CYCLE_TARGET_MS))
        text = ", ".join(label for label, _ in checks)
        return f"{text}: {'met' if all(ok for _, ok in checks) else 'MISSED'}"


# Measuring --------------------------------------------------------------------------------


def median_ms(action: Callable[[], object], repetitions: int) -> float:
    """Median wall time of `action`, in milliseconds, each run after a full collection."""
    times = []
    for _ in range(repetitions):
        gc.collect()
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def by_priority_then_submission(job: Job) -> tuple[int, int]:
    return (-job.priority, job.sequence)


def peak_mib(build: Callable[[], Snapshot]) -> float:
    """Peak traced memory of building a snapshot and deciding one cycle from it."""
    gc.collect()
    tracemalloc.start()
    try:
        schedule(build())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak / MIB


def measure(label: str, build: Callable[[], Snapshot], repetitions: int) -> Row:
    snapshot = build()
    result = schedule(snapshot)
    jobs = list(snapshot.jobs)
    return Row(
        shape=label,
        jobs=len(jobs),
        cycle_ms=median_ms(lambda: schedule(snapshot), repetitions),
        sort_ms=median_ms(lambda: sorted(jobs, key=by_priority_then_submission), repetitions),
        peak_mib=peak_mib(build),
        dispatches=sum(isinstance(d, Dispatch) for d in result.decisions),
        preemptions=sum(isinstance(d, Preempt) for d in result.decisions),
        decisions=len(result.decisions),
    )


def shape_rows(shape: Shape, repetitions: int) -> list[Row]:
    """The fresh and steady cycles of one shape.  The steady row's peak memory counts
    building its snapshot from the first cycle's decisions, not the first cycle itself."""
    fresh = fresh_snapshot(shape)
    first: CycleResult = schedule(fresh)
    return [
        measure(f"{shape.name}, fresh", lambda: fresh_snapshot(shape), repetitions),
        measure(f"{shape.name}, steady", lambda: after_cycle(fresh, first), repetitions),
    ]


# Until the placement settles -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Settling:
    """Cycles at one instant, each from the state the previous left, until one changes
    nothing: what it costs to reach the placement the queue settles on."""

    shape: str
    cycles: int
    cpu_ms: float
    dispatches: int
    preemptions: int
    running: int


def settle(shape: Shape, most_cycles: int = 50) -> Settling:
    """CPU time, not wall time, so that other load on the machine counts less.  A cycle
    that undoes another's placement (a preemption) costs the victim its start: the
    preemptions column says how many such a settling took."""
    snapshot = fresh_snapshot(shape)
    cycles = dispatches = preemptions = 0
    cpu = 0.0
    while cycles < most_cycles:
        gc.collect()
        start = time.process_time()
        result = schedule(snapshot)
        cpu += time.process_time() - start
        cycles += 1
        placed = sum(isinstance(d, Dispatch) for d in result.decisions)
        taken = sum(isinstance(d, Preempt) for d in result.decisions)
        dispatches += placed
        preemptions += taken
        snapshot = after_cycle(snapshot, result)
        if placed == 0 and taken == 0:
            break
    running = sum(job.instances != () for job in snapshot.jobs)
    return Settling(shape.name, cycles, cpu * 1000, dispatches, preemptions, running)


def print_settling_table(shapes: list[Shape]) -> None:
    print("| shape, until settled | cycles | CPU ms | dispatches | preemptions | running |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for shape in shapes:
        row = settle(shape)
        print(f"| {row.shape} | {row.cycles} | {row.cpu_ms:.0f} | {row.dispatches:,} "
              f"| {row.preemptions:,} | {row.running:,} |")


# The end-to-end simulations ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Simulation:
    """One scenario run through the simulator, with the target its time is held to."""

    label: str
    jobs: int
    simulated_seconds: int
    target_s: float
    document: Callable[[], dict[str, Any]]


SIMULATIONS = (
    Simulation(f"{BASELINE.name}, arrivals over {ARRIVAL_SECONDS} s", BASELINE.jobs,
               SIMULATED_SECONDS, SIMULATION_TARGET_S, lambda: scenario(BASELINE)),
    Simulation("a week of 1,000 jobs a day", 7 * 1_000, 7 * DAY_SECONDS, WEEK_TARGET_S,
               week_trace),
)


def sort_reference_ms(repetitions: int = 5) -> float:
    """The same-process reference: sorting the 15,000 baseline jobs once, in CPU ms."""
    jobs = list(queued_snapshot(BASELINE).jobs)
    times = []
    for _ in range(repetitions):
        gc.collect()
        start = time.process_time()
        sorted(jobs, key=by_priority_then_submission)
        times.append(time.process_time() - start)
    return min(times) * 1000


def simulation_row(simulation: Simulation, sort_ms: float) -> str:
    """Wall and CPU seconds of one run; the target is judged on CPU time, which other load
    on the machine disturbs less than wall time."""
    document = document_with_rules(simulation.document())
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    result = run_scenario(document)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    status = "met" if cpu <= simulation.target_s else "MISSED"
    return (
        f"| {simulation.label} | {simulation.jobs:,} | {simulation.simulated_seconds:,} "
        f"| {wall:.1f} | {cpu:.1f} | {cpu * 1000 / sort_ms:,.0f} "
        f"| ≤ {simulation.target_s:g} s: {status} | {_simulation_outcome(result)} |"
    )


def _simulation_outcome(result: dict[str, Any]) -> str:
    jobs = result["jobs"]
    done = sum(job["status"] == "SUCCEEDED" for job in jobs)
    metrics = result["metrics"]
    return (
        f"{done:,} of {len(jobs):,} succeeded, {len(result['events']):,} events, "
        f"utilization {metrics['utilization']}, mean wait {metrics['mean_wait_seconds']} s"
    )


# Printing ---------------------------------------------------------------------------------


def print_cycle_table(rows: list[Row]) -> None:
    print("| shape | jobs | cycle ms (median) | sort ms | ratio | target | peak MiB |")
    print("| --- | ---: | ---: | ---: | ---: | --- | ---: |")
    for row in rows:
        print(
            f"| {row.shape} | {row.jobs:,} | {row.cycle_ms:.1f} | {row.sort_ms:.1f} "
            f"| {row.ratio:.1f} | {row.target()} | {row.peak_mib:.1f} |"
        )
    print()
    for row in rows:
        print(
            f"- {row.shape}: {row.dispatches:,} dispatches, {row.preemptions:,} preemptions, "
            f"{row.decisions:,} decisions in all"
        )


def print_simulation_table() -> None:
    sort_ms = sort_reference_ms()
    print(f"Same-process reference: one sort of the {BASELINE.jobs:,} baseline jobs takes "
          f"{sort_ms:.1f} CPU ms.\n")
    print("| simulation | jobs | simulated s | wall s | CPU s | CPU in sorts | target (CPU) "
          "| outcome |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    for simulation in SIMULATIONS:
        print(simulation_row(simulation, sort_ms))


def profile_cycles(shape: Shape, top: int = 25) -> None:
    """cProfile of one fresh and one steady cycle, top functions by cumulative time."""
    fresh = fresh_snapshot(shape)
    steady = after_cycle(fresh, schedule(fresh))
    for label, snapshot in (("fresh", fresh), ("steady", steady)):
        profiler = cProfile.Profile()
        profiler.runcall(schedule, snapshot)
        print(f"\n## {shape.name}, {label} cycle ({len(snapshot.jobs):,} jobs)\n")
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(top)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="3 repetitions and the 15,000-job shape only")
    parser.add_argument("--profile", action="store_true",
                        help="only profile the 15,000-job fresh and steady cycles")
    parser.add_argument("--no-simulation", action="store_true",
                        help="leave out the simulations (the longest part)")
    parser.add_argument("--simulation-only", action="store_true",
                        help="only the simulations")
    parser.add_argument("--rules-on", action="store_true",
                        help="fair sharing on for the fleet, weights 1-3 and a minimum "
                             f"runtime of {RULES_MIN_RUNTIME_SECONDS} s on every share")
    parser.add_argument("--half-life", type=int, default=0, metavar="SECONDS",
                        help="with --rules-on: fair sharing's half-life (past borrowing)")
    args = parser.parse_args(argv)
    RULES["on"] = args.rules_on
    RULES["half_life"] = args.half_life
    if args.simulation_only:
        print_simulation_table()
        return 0
    if args.profile:
        profile_cycles(BASELINE)
        return 0
    repetitions = 3 if args.quick else 7
    shapes = [BASELINE] if args.quick else [BASELINE, LARGE]
    rules = ", fair sharing and minimum runtime on" if args.rules_on else ""
    if args.rules_on and args.half_life:
        rules += f", half-life {args.half_life} s"
    print(f"# Engine cycle benchmark (Python {sys.version.split()[0]}, "
          f"median of {repetitions}{rules})\n")
    print_cycle_table([row for shape in shapes for row in shape_rows(shape, repetitions)])
    print()
    print_settling_table(shapes)
    if not args.no_simulation:
        print()
        print_simulation_table()
    return 0


if __name__ == "__main__":
    sys.exit(main())
