"""PostgreSQL (the test's own) failing under a running system: its connections dropped
again and again (a failover, a proxy restart), then the server stopped outright
(`pg_ctl stop -m immediate`, a crash) and started again.  /healthz says 503 while the
database is away and 200 when it is back; the cycle resumes by itself; a cycle cut off
mid-transaction leaves nothing half-applied (the invariant checker)."""

from __future__ import annotations

import time

from .harness import UNIT, System, wait_for

TERMINATE_SECONDS = 4


def configure(system: System) -> list[str]:
    system.drive("configure", {
        "users": [{"username": "ann"}],
        "units": [{"name": UNIT, "max_capacity": 3, "cold_start_seconds": 0,
                   "warm_start_seconds": 0}],
        "shares": [{"name": "QS1", "sharing_strategy": "LEND_AND_BORROW", "members": ["ann"],
                    "capacity_limits": [{"capacity_unit": UNIT, "max_capacity": 3}]}],
    })
    names = [f"pg-{i}" for i in range(30)]
    # One- and two-second jobs on 3 instances: nearly every cycle ends and dispatches.
    system.drive("submit", {"jobs": [
        {"user": "ann", "name": name, "quota_share": "QS1", "duration_seconds": 1 + i % 2}
        for i, name in enumerate(names)]})
    return names


def status(system: System) -> int | None:
    answer = system.health()
    return answer[0] if answer else None


def test_dropped_connections_and_a_crashed_database_are_survived(system: System) -> None:
    names = configure(system)
    with system.diagnostics():
        ticker = system.start_ticker()
        system.start_beat()
        system.start_server()
        system.wait_ready(ticker)
        wait_for("/healthz to say 200", lambda: status(system) == 200, timeout=30)

        # Connections dropped, again and again, for a few seconds.
        dropped = 0
        deadline = time.monotonic() + TERMINATE_SECONDS
        while time.monotonic() < deadline:
            dropped += system.pg.terminate_backends(system.database)
            time.sleep(0.05)
        assert dropped, "no connection was dropped: the system was not using the database"
        system.wait_cycles(3, "cycles to resume after the dropped connections")
        system.assert_invariants(names=names)
        wait_for("/healthz to say 200 again", lambda: status(system) == 200, timeout=30)

        # The server crashes (in-flight transactions are lost) and comes back.
        system.pg.stop("immediate")
        wait_for("/healthz to say 503 while the database is down",
                 lambda: status(system) == 503, timeout=20)
        answer = system.health()
        assert answer is not None and answer[1]["database"] != "ok", answer
        time.sleep(2)
        system.pg.start()
        wait_for("/healthz to say 200 once the database is back",
                 lambda: status(system) == 200, timeout=45,
                 on_poll=system.services.assert_running)
        system.wait_cycles(3, "cycles to resume after the crash")
        wait_for("every job to succeed", lambda: set(system.job_statuses().values())
                 == {"SUCCEEDED"}, timeout=90, on_poll=system.services.assert_running)
    system.assert_invariants(names=names)
