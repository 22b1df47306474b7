"""Beat killed with -9, then two beats at once (a failover overlap, or a second beat
started by mistake): one cycle per tick, never two (docs/architecture.md, The tick: the tick claims
its second in Redis).  Real `celery beat` and `celery worker` processes on a PostgreSQL and
a Redis of the test's own."""

from __future__ import annotations

import time
from datetime import datetime

from .harness import UNIT, System, hard_kill, wait_for

MEASURE_SECONDS = 18
SENT = "Sending due task quotaweb-tick"


def configure(system: System) -> None:
    """A little work for the cycles: simulated jobs that come and go."""
    system.drive("configure", {
        "users": [{"username": "ann"}],
        "units": [{"name": UNIT, "max_capacity": 2, "cold_start_seconds": 0,
                   "warm_start_seconds": 0}],
        "shares": [{"name": "QS1", "sharing_strategy": "LEND_AND_BORROW", "members": ["ann"],
                    "capacity_limits": [{"capacity_unit": UNIT, "max_capacity": 1}]}],
    })
    system.drive("submit", {"jobs": [
        {"user": "ann", "name": f"beat-{i}", "quota_share": "QS1", "duration_seconds": 3}
        for i in range(8)]})


def cycle_starts(system: System, since: datetime) -> list[datetime]:
    return [row["started_at"] for row in system.rows(
        "SELECT started_at FROM quotaweb_cyclerecord WHERE started_at >= %s "
        "ORDER BY started_at", since)]


def test_beat_killed_then_two_beats_give_one_cycle_per_tick(system: System) -> None:
    configure(system)
    with system.diagnostics():
        ticker = system.start_ticker()
        beat = system.start_beat()
        system.wait_ready(ticker)
        system.wait_cycles(3, "the first cycles (beat -> tick worker)")

        # kill -9 of beat: no more ticks, so no more cycles (a tick already queued
        # expires within a second).
        hard_kill(system, beat)
        time.sleep(1.5)
        stalled = system.cycle_count()
        time.sleep(2.5)
        assert system.cycle_count() - stalled <= 1, "cycles went on without a beat"

        # Two beats at once, each with its own schedule file.
        first, second = system.start_beat("beat-a"), system.start_beat("beat-b")
        system.wait_cycles(2, "cycles to resume under two beats")
        wait_for("both beats to send ticks",
                 lambda: SENT in first.tail(400) and SENT in second.tail(400), timeout=30)
        sent_before = [service.tail(100_000).count(SENT) for service in (first, second)]
        since = datetime.now().astimezone()
        start_count, started = system.cycle_count(), time.monotonic()
        time.sleep(MEASURE_SECONDS)
        seconds = time.monotonic() - started
        cycles = system.cycle_count() - start_count
        sent = [service.tail(100_000).count(SENT) - before
                for service, before in zip((first, second), sent_before, strict=True)]
        system.services.assert_running()

    # Both beats really sent a tick every second...
    assert all(count >= seconds * 0.8 for count in sent), (sent, seconds)
    # ...yet there was one cycle per tick: never more than one per second, and most
    # seconds had one (a generous floor: a loaded machine may drop an expired tick).
    assert cycles <= seconds + 1, f"{cycles} cycles in {seconds:.1f} s: some tick ran twice"
    assert cycles >= seconds / 2, f"only {cycles} cycles in {seconds:.1f} s"
    starts = cycle_starts(system, since)
    per_second: dict[int, int] = {}
    for moment in starts:
        per_second[int(moment.timestamp())] = per_second.get(int(moment.timestamp()), 0) + 1
    doubled = {second: count for second, count in per_second.items() if count > 1}
    assert not doubled, f"seconds with more than one cycle: {doubled}"
    system.assert_invariants(names=[f"beat-{i}" for i in range(8)])
