"""What fair sharing changes over a simulated week, per share: the what-if question
"replay a week with weights and see the waits change", asked of the simulator (the engine
the what-if page and POST /api/v1/what-if replay recorded history through).

Run by hand, never by tests:

    python bench/fair_share.py            # a week of 1,000 jobs a day plus daily sweeps
    python bench/fair_share.py --days 2   # shorter

The week is bench/workloads.py's trace (ten LEND_AND_BORROW teams of 80 instances on one
800-instance unit), with team01 also submitting a sweep of 300 one-instance, one-hour jobs
every morning: first come, first served, the sweep takes the idle capacity and the other
teams' jobs above their limits wait behind it.  Three replays: as recorded (fair sharing
off), fair sharing on with equal weights, and on with team02 at weight 3; then the same
three with a minimum runtime of 10 minutes on every share; then fair sharing with a
half-life of one hour and of one day (docs/semantics.md 5.4: team01's sweeps count against
it after they end, so on the next morning it waits behind teams that borrowed less).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.workloads import DAY_SECONDS, UNIT, week_trace  # noqa: E402
from scheduler.simulate import run_scenario  # noqa: E402

SWEEP_JOBS = 300
SWEEP_AT = 9 * 3600  # each morning
SWEEP_SECONDS = 3600


def skewed_week(days: int) -> dict[str, Any]:
    document = week_trace(days=days)
    sweeps = [{"at": day * DAY_SECONDS + SWEEP_AT, "submit": {
        "name": f"sweep{day}_{index:03d}", "quota_share": "team01", "priority": 50,
        "instance_type": UNIT, "instance_count": 1, "duration_seconds": SWEEP_SECONDS}}
        for day in range(days) for index in range(SWEEP_JOBS)]
    actions = sorted(document["actions"] + sweeps, key=lambda action: action["at"])
    return {**document, "actions": actions}


def variant(document: dict[str, Any], *, fair: bool, weights: dict[str, int],
            min_runtime: int, half_life: int = 0) -> dict[str, Any]:
    shares = [{**share, **({"fair_share_weight": weights[share["name"]]}
                           if share["name"] in weights else {}),
               **({"min_runtime_seconds": min_runtime} if min_runtime else {})}
              for share in document["quota_shares"]]
    return {**document, "quota_shares": shares,
            "settings": {**document.get("settings", {}), "fair_sharing": fair,
                         **({"fair_share_half_life_seconds": half_life} if half_life else {})}}


def waits_by_share(output: dict[str, Any]) -> dict[str, list[int]]:
    submitted: dict[str, tuple[int, str]] = {}
    waits: dict[str, list[int]] = defaultdict(list)
    seen: set[str] = set()
    for event in output["events"]:
        if event["type"] == "SUBMITTED":
            submitted[event["job"]] = (event["t"], event["quota_share"])
        elif event["type"] == "DISPATCHED" and event["job"] not in seen:
            seen.add(event["job"])
            at, share = submitted[event["job"]]
            waits[share].append(event["t"] - at)
    return waits


def p95(values: list[int]) -> int:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)] if ordered else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=7)
    args = parser.parse_args(argv)
    week = skewed_week(args.days)
    runs = {}
    for label, fair, weights, minimum, half_life in (
            ("off (recorded)", False, {}, 0, 0), ("fair, equal", True, {}, 0, 0),
            ("fair, team02 ×3", True, {"team02": 3}, 0, 0),
            ("off, min 600 s", False, {}, 600, 0), ("fair, min 600 s", True, {}, 600, 0),
            ("fair, half-life 1 h", True, {}, 0, 3600),
            ("fair, half-life 1 d", True, {}, 0, DAY_SECONDS)):
        started = time.process_time()
        output = run_scenario(variant(week, fair=fair, weights=weights, min_runtime=minimum,
                                      half_life=half_life))
        runs[label] = (output, time.process_time() - started)
    labels = list(runs)
    print(f"# Fair sharing over {args.days} simulated days ({len(week['actions']):,} jobs)\n")
    print("Mean wait / p95 wait to first dispatch, seconds, per share:\n")
    print("| share | " + " | ".join(labels) + " |")
    print("| --- |" + " ---: |" * len(labels))
    waits = {label: waits_by_share(output) for label, (output, _) in runs.items()}
    for share in sorted(waits[labels[0]]):
        cells = []
        for label in labels:
            values = waits[label][share]
            cells.append(f"{sum(values) / len(values):,.0f} / {p95(values):,}")
        print(f"| {share} | " + " | ".join(cells) + " |")
    print()
    print("| replay | utilization | mean wait s | preemptions | lost work inst·s | CPU s |")
    print("| --- | ---: | ---: | --- | ---: | ---: |")
    for label, (output, cpu) in runs.items():
        metrics = output["metrics"]
        print(f"| {label} | {metrics['utilization']} | {metrics['mean_wait_seconds']} "
              f"| {metrics['preemptions']} | {metrics['lost_work_instance_seconds']:,.0f} "
              f"| {cpu:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
