"""How long the local executor takes from the cycle's decision to the command running.

Run by hand, never by tests, as root on a host where the local executor can run commands
(bubblewrap, the job user, cgroups):

    python bench/executor_start.py              # 20 jobs, one after another
    python bench/executor_start.py --jobs 50

DATABASE_URL defaults to postgres://postgres@127.0.0.1:5432/quotaweb_bench_executor; the
database is created and migrated if needed, and EVERY ROW IN IT IS DELETED first (the
script refuses a database whose name does not contain "bench").

Each job (`date +%s.%N`, on a unit with no cold start) is submitted alone; a cycle
dispatches it (the decision: its attempt's `starting_at`); then cycles run back to back,
as fast as they can, and the local executor starts what they make due, exactly as the
embedded runtime does every second.  Per job:

- decision → RUNNING: the attempt's `started_at`, recorded once the sandboxed process
  (in its cgroup) was spawned;
- decision → first output: the time the command itself printed, inside its sandbox.

The live loop runs one cycle per wall-clock second, and the launch comes one cycle after
the decision, so a live job waits up to one more tick than measured here.  Medians and
the slowest job are printed; nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/quotaweb_bench_executor"
UNIT = "ml.bench"
TIMEOUT = 60.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20)
    args = parser.parse_args()
    os.environ.setdefault("DATABASE_URL", DEFAULT_DATABASE_URL)
    os.environ["QUOTAWEB_LOCAL_EXECUTOR"] = "1"
    os.environ["QUOTAWEB_WORK_DIR"] = tempfile.mkdtemp(prefix="quotaweb-bench-executor-")
    from bench.cycle import set_up_django, wipe

    set_up_django()
    wipe()
    measure(args.jobs)


def measure(count: int) -> None:
    from quotaweb.executors import backends
    from quotaweb.executors.supervisor import get_supervisor
    from quotaweb.models import Attempt, CapacityLimit, CapacityUnit, Job, LogLine, QuotaShare
    from quotaweb.models.shares import Strategy
    from quotaweb.scheduling.tick import run_cycle

    problem = backends.executor_for("local").availability()
    if not problem.can_run:
        raise SystemExit(f"the local executor cannot run commands here: {problem.why}")
    CapacityUnit.objects.create(name=UNIT, max_capacity=1, cold_start_seconds=0,
                                warm_start_seconds=0)
    share = QuotaShare.objects.create(name="bench", sharing_strategy=Strategy.RESERVE)
    CapacityLimit.objects.create(quota_share=share, capacity_unit=UNIT, max_capacity=1)
    supervisor = get_supervisor()
    supervisor.start()
    to_running: list[float] = []
    to_output: list[float] = []
    try:
        for number in range(count):
            job = Job.objects.create(name=f"start-{number}", quota_share=share,
                                     instance_type=UNIT, executor="local",
                                     command="date +%s.%N")
            run_cycle()  # the decision
            deadline = time.monotonic() + TIMEOUT
            while Attempt.objects.filter(job=job, started_at__isnull=False).count() == 0:
                if time.monotonic() > deadline:
                    raise SystemExit(f"job {job.pk} did not start")
                report = run_cycle()
                for attempt_id in report.to_launch if report else []:
                    backends.start(attempt_id)
            attempt = Attempt.objects.get(job=job)
            while not LogLine.objects.filter(attempt=attempt).exists():
                if time.monotonic() > deadline:
                    raise SystemExit(f"job {job.pk} printed nothing")
                time.sleep(0.05)
            printed = float(LogLine.objects.filter(attempt=attempt).first().text)  # type: ignore[union-attr]
            decided = attempt.starting_at.timestamp()
            to_running.append(attempt.started_at.timestamp() - decided)
            to_output.append(printed - decided)
            while Job.objects.get(pk=job.pk).status not in ("SUCCEEDED", "FAILED"):
                if time.monotonic() > deadline:
                    raise SystemExit(f"job {job.pk} did not end")
                run_cycle()
                time.sleep(0.05)
    finally:
        supervisor.stop()
    print(f"local executor, {count} jobs one after another (cycles back to back):")
    for label, values in (("decision -> RUNNING recorded", to_running),
                          ("decision -> first output", to_output)):
        print(f"  {label:30} median {1000 * statistics.median(values):7.1f} ms   "
              f"max {1000 * max(values):7.1f} ms")


if __name__ == "__main__":
    main()
