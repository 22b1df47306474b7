"""kill -9 of the Celery workers in the middle of their work, on a PostgreSQL and a Redis
of the test's own:

- the tick worker, inside a cycle's transaction (its decisions applied, not committed):
  nothing of that cycle is left half-applied, and after a restart the cycle resumes;
- the executor worker, while it runs local jobs: its restarted supervisor reconciles the
  attempts it left open (platform errors, retried by the rules) and kills their
  processes; killed and not restarted, the heartbeat lease expires the attempts; nothing
  is lost, and the jobs finish on their last attempt.
"""

from __future__ import annotations

import os
from typing import Any

import psycopg

from quotaweb.executors.local_backend import LOST_HEARTBEAT
from quotaweb.executors.supervisor import EXECUTOR_RESTARTED

from .harness import UNIT, System, hard_kill, wait_for

LEASE_SECONDS = 6


def configure(system: System, capacity: int) -> None:
    system.drive("configure", {
        "users": [{"username": "ann"}],
        "units": [{"name": UNIT, "max_capacity": capacity, "cold_start_seconds": 0,
                   "warm_start_seconds": 0}],
        "shares": [{"name": "QS1", "sharing_strategy": "LEND_AND_BORROW", "members": ["ann"],
                    "capacity_limits": [{"capacity_unit": UNIT, "max_capacity": capacity}]}],
    })


def submit(system: System, names: list[str], **fields: Any) -> list[int]:
    jobs = [{"user": "ann", "name": name, "quota_share": "QS1", **fields} for name in names]
    ids: list[int] = system.drive("submit", {"jobs": jobs})["ids"]
    return ids


# The tick worker ---------------------------------------------------------------------


def blocked_backends(system: System) -> list[dict[str, Any]]:
    """Backends of the system's database waiting for a lock (our row lock)."""
    return system.rows(
        "SELECT pid, query FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()")


def test_tick_worker_killed_inside_a_cycle_leaves_nothing_half_applied(system: System) -> None:
    configure(system, capacity=4)
    names = [f"churn-{i}" for i in range(40)]
    # One-second simulated jobs on 4 instances: every cycle ends some and dispatches more.
    submit(system, names, duration_seconds=1)
    with system.diagnostics():
        ticker = system.start_ticker()
        system.start_beat()
        system.wait_ready(ticker)
        system.wait_cycles(2, "the first cycles")

        # Hold the SchedulerState row: the next cycle applies its decisions, then waits
        # for this lock inside its transaction (usage.record_changes locks the row).
        with psycopg.connect(system.pg.url(system.database)) as blocker:
            blocker.execute("SELECT * FROM quotaweb_schedulerstate WHERE id = 1 FOR UPDATE")
            waiting = wait_for("a cycle to wait inside its transaction",
                               lambda: blocked_backends(system), timeout=30)
            before = system.cycle_count()
            dispatched = system.value("SELECT count(*) FROM quotaweb_event "
                                      "WHERE type = 'DISPATCHED'")
            hard_kill(system, ticker)
            blocker.rollback()  # the orphaned backend goes on, finds its client gone
        wait_for("the killed cycle's backend to end", lambda: not system.rows(
            "SELECT 1 FROM pg_stat_activity WHERE pid = %s", waiting[0]["pid"]), timeout=30)

        # Nothing of the killed cycle was committed, and nothing runs without a worker.
        assert system.cycle_count() == before
        assert system.value("SELECT count(*) FROM quotaweb_event "
                            "WHERE type = 'DISPATCHED'") == dispatched
        system.assert_invariants(names=names)

        # A new tick worker: the cycle resumes (the dead cycle's lock died with its
        # connection) and every job ends.
        restarted = system.start_ticker("ticker-2")
        system.wait_ready(restarted)
        system.wait_cycles(3, "cycles to resume after the restart")
        wait_for("every job to succeed", lambda: set(system.job_statuses().values())
                 == {"SUCCEEDED"}, timeout=90, on_poll=system.services.assert_running)
    system.assert_invariants(names=names)


# The executor worker -------------------------------------------------------------------

# Attempts 1 and 2 run until they are killed; attempt 3 finishes at once.
COMMAND = 'if [ "$QUOTAWEB_ATTEMPT" -lt 3 ]; then sleep 300; else echo finished; fi'


def attempts(system: System, name: str) -> list[dict[str, Any]]:
    return system.rows(
        "SELECT a.number, a.outcome, a.failure, a.status_reason, a.pid, a.exit_code "
        "FROM quotaweb_attempt a JOIN quotaweb_job j ON j.id = a.job_id "
        "WHERE j.name = %s ORDER BY a.number", name)


def running_pids(system: System, names: list[str], number: int) -> list[int]:
    """The pids of these jobs' attempt `number`, once all of them run; else []."""
    pids = []
    for name in names:
        rows = [a for a in attempts(system, name) if a["number"] == number]
        status = system.job_statuses()[name]
        if not rows or rows[0]["outcome"] is not None or not rows[0]["pid"] or status != "RUNNING":
            return []
        pids.append(int(rows[0]["pid"]))
    return pids


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_executor_worker_killed_while_running_local_jobs(system: System) -> None:
    system.env["QUOTAWEB_HEARTBEAT_LEASE_SECONDS"] = str(LEASE_SECONDS)
    configure(system, capacity=2)
    names = ["local-a", "local-b"]
    submit(system, names, command=COMMAND, retry_attempts=3)
    with system.diagnostics():
        ticker, executor = system.start_ticker(), system.start_executor()
        system.start_beat()
        system.wait_ready(ticker)
        system.wait_ready(executor)
        first = wait_for("both jobs to run (attempt 1)",
                         lambda: running_pids(system, names, 1),
                         on_poll=system.services.assert_running)
        assert all(alive(pid) for pid in first)

        # kill -9 and restart at once: the new worker's supervisors take the same host
        # names, fail the attempts left open as platform errors and kill their processes.
        hard_kill(system, executor)
        executor = system.start_executor("executor-2")
        second = wait_for("both jobs to run again (attempt 2)",
                          lambda: running_pids(system, names, 2),
                          on_poll=system.services.assert_running)
        for name in names:
            one = attempts(system, name)[0]
            assert one["outcome"] == "FAILED" and one["failure"] == "PLATFORM_ERROR", one
            # Whichever came first: the restarted supervisor, or the lease.
            assert one["status_reason"] in (EXECUTOR_RESTARTED, LOST_HEARTBEAT), one
        wait_for("attempt 1's processes to be killed",
                 lambda: not any(alive(pid) for pid in first), timeout=15)

        # kill -9 and no restart: the lease expires the attempts; the jobs wait for an
        # executor (attempt 3 stays STARTING), their processes live on unsupervised.
        hard_kill(system, executor)
        wait_for("the lease to expire attempt 2", lambda: all(
            len(rows := attempts(system, name)) >= 2 and rows[1]["outcome"] == "FAILED"
            for name in names), timeout=LEASE_SECONDS + 30)
        for name in names:
            two = attempts(system, name)[1]
            assert two["failure"] == "PLATFORM_ERROR", two
            assert two["status_reason"] == LOST_HEARTBEAT, two
        system.assert_invariants(names=names)

        # A new executor kills the leftovers and runs attempt 3 to the end.
        system.start_executor("executor-3")
        wait_for("both jobs to succeed on attempt 3", lambda: all(
            status == "SUCCEEDED" for status in system.job_statuses().values()),
            on_poll=system.services.assert_running)
        wait_for("attempt 2's processes to be killed",
                 lambda: not any(alive(pid) for pid in second), timeout=15)
    for name in names:
        assert [a["outcome"] for a in attempts(system, name)] == [
            "FAILED", "FAILED", "SUCCEEDED"], attempts(system, name)
    system.assert_invariants(names=names)
