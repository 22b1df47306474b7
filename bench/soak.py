"""An hour of traffic compressed into minutes, through the API, against a live server; then
how long every cycle took and how many ticks were missed.

Run by hand, never by tests (nor in CI):

    python bench/soak.py                 # 10 minutes (one hour of traffic, 6× faster)
    python bench/soak.py --minutes 2     # the same rates, for 2 minutes

Creates the PostgreSQL database quotaweb_bench_soak (dropped at the end), one capacity unit
of 100 instances (warm-pool limit 40, no start delays) and one share, and starts
`manage.py serve` on 127.0.0.1 with the cycle in the server process (simulated executor).
Every second, with a fixed seed: about 3 submissions (1, 2 or 5 instances, 5 to 40 s, half of
them with a 30 s keep-alive so later jobs of the same shape reuse their warm pool), a
priority change of a queued or running job every other second, and a termination every
third second.  Bounded: it stops at `--minutes`.

Then every CycleRecord of the run: a histogram of cycle times (load + plan + apply), and
the cycles that started more than one tick late (more than 2 s after the previous cycle:
at least one tick had no cycle).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.api import (  # noqa: E402
    BenchServer,
    Connection,
    bench_database,
    drop_database,
    job_body,
    load_average,
    running,
    setup_fleet,
)

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/quotaweb_bench_soak"
SEED = 20_240_611
SUBMITS_PER_SECOND = 3
BUCKETS_MS = (10, 25, 50, 100, 250, 500, 1000)


def traffic(port: int, token: str, minutes: float) -> Counter[str]:
    """The compressed hour: one round a second until the time is up."""
    rng = random.Random(SEED)
    connection = Connection(port, token)
    done: Counter[str] = Counter()
    live: list[int] = []
    deadline = time.monotonic() + minutes * 60
    second = 0
    try:
        while time.monotonic() < deadline:
            started = time.monotonic()
            for _ in range(rng.randint(SUBMITS_PER_SECOND - 1, SUBMITS_PER_SECOND + 1)):
                shape = rng.choice((1, 1, 1, 2, 5))
                body = job_body(f"soak-{done['submitted']}", duration=rng.randint(5, 40),
                                priority=rng.choice((0, 50, 100)), instances=shape,
                                keep_alive=30 if rng.random() < 0.5 else 0)
                status, job = connection.request("POST", "/api/v1/jobs", body)
                done["submitted" if status == 201 else f"submit {status}"] += 1
                if status == 201:
                    live.append(job["id"])
            live = live[-200:]  # the recent ones: most of the older ones are done
            if second % 2 == 0 and live:
                status, _ = connection.request("PATCH", f"/api/v1/jobs/{rng.choice(live)}",
                                               {"priority": rng.randint(0, 200)})
                done["priority changed" if status == 200 else f"priority {status}"] += 1
            if second % 3 == 0 and live:
                job_id = live.pop(rng.randrange(len(live)))
                status, _ = connection.request("POST", f"/api/v1/jobs/{job_id}/terminate", {})
                done["terminated" if status == 200 else f"terminate {status}"] += 1
            second += 1
            time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
    finally:
        connection.close()
    return done


def outcome() -> dict[str, Any]:
    """What the run left: cycle records, job statuses, warm-pool reuses."""
    from django.db.models import Count

    from quotaweb.models import CycleRecord, Event, Job

    cycles = list(CycleRecord.objects.order_by("started_at")
                  .values_list("started_at", "load_ms", "plan_ms", "apply_ms", "jobs"))
    statuses = dict(Job.objects.values_list("status").annotate(n=Count("id")))
    events = dict(Event.objects.values_list("type").annotate(n=Count("id")))
    return {"cycles": cycles, "statuses": statuses, "events": events}


def histogram(durations: list[float]) -> list[tuple[str, int]]:
    rows = []
    low = 0
    for high in BUCKETS_MS:
        rows.append((f"{low}–{high} ms", sum(low <= d < high for d in durations)))
        low = high
    rows.append((f"≥ {low} ms", sum(d >= low for d in durations)))
    return rows


def print_report(found: dict[str, Any], done: Counter[str], minutes: float) -> None:
    cycles = found["cycles"]
    durations = [load + plan + apply for _, load, plan, apply, _ in cycles]
    gaps = [(b[0] - a[0]).total_seconds() for a, b in zip(cycles, cycles[1:], strict=False)]
    late = [gap for gap in gaps if gap > 2.0]
    missed_ticks = sum(round(gap) - 1 for gap in late)
    print("| cycle time | cycles | bar |")
    print("| --- | ---: | --- |")
    for label, count in histogram(durations):
        bar = "#" * (round(60 * count / len(durations)) if durations else 0)
        print(f"| {label} | {count:,} | {bar} |")
    print()
    if durations:
        ordered = sorted(durations)
        print(f"- {len(cycles):,} cycles in {minutes:g} min; cycle ms p50 "
              f"{statistics.median(ordered):.1f}, p95 {ordered[int(0.95 * len(ordered)) - 1]:.1f}"
              f", max {ordered[-1]:.1f}; live jobs per cycle up to "
              f"{max(c[4] for c in cycles):,}")
    print(f"- cycles late by more than one tick: {len(late)} (ticks without a cycle: "
          f"{missed_ticks}); longest gap between cycles {max(gaps, default=0):.2f} s")
    print(f"- traffic: {dict(sorted(done.items()))}")
    print(f"- jobs at the end: {dict(sorted(found['statuses'].items()))}")
    events = found["events"]
    print(f"- events: DISPATCHED {events.get('DISPATCHED', 0):,}, warm-pool reuses "
          f"{events.get('WARM_POOL_REUSED', 0):,}, PREEMPTED {events.get('PREEMPTED', 0):,}, "
          f"SUCCEEDED {events.get('SUCCEEDED', 0):,}, TERMINATED "
          f"{events.get('TERMINATED', 0):,}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    args = parser.parse_args(argv)
    load_before = load_average()
    database = bench_database(DEFAULT_DATABASE_URL)
    try:
        fleet = setup_fleet(capacity=100, warm_pool_limit=40, keep_alive=30)
        with running(BenchServer()) as server:
            done = traffic(server.port, fleet.token, args.minutes)
        found = outcome()
    finally:
        drop_database()
    print(f"# Soak (Python {sys.version.split()[0]}, Daphne, PostgreSQL {database}, "
          f"in-process cycle; {args.minutes:g} min at 6× an hour's rate; load average "
          f"before: {load_before}, after: {load_average()})\n")
    print_report(found, done, args.minutes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
