"""The cycle never runs twice at once, and the Celery tick never runs the same second twice
(docs/architecture.md, The tick): against the real PostgreSQL and the real Redis."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.db import connection

from quotaweb import runtime, tasks
from quotaweb.models import CycleRecord
from quotaweb.runtime import Scheduler
from quotaweb.scheduling import tick as tick_module
from quotaweb.scheduling.tick import CycleReport, run_cycle

REDIS_TEST_URL = "redis://127.0.0.1:6379/15"
pytestmark = pytest.mark.django_db(transaction=True)


def _in_thread(target: Any, results: list[Any], index: int) -> threading.Thread:
    """Run target() on its own thread, hence its own database connection, closed after."""

    def run() -> None:
        try:
            results[index] = target()
        except BaseException as error:  # noqa: BLE001 - reported by the test
            results[index] = error
        finally:
            connection.close()

    return threading.Thread(target=run, name=f"cycle-{index}")


def test_two_cycles_started_at_once_only_one_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    assert connection.vendor == "postgresql", "this test is about the PostgreSQL advisory lock"
    inside = threading.Event()
    release = threading.Event()
    advance = tick_module.transitions.advance

    def held_advance(now: Any) -> list[int]:
        # The cycle that holds the lock waits here until the other one has tried.
        inside.set()
        assert release.wait(20), "the test never released the first cycle"
        return advance(now)

    monkeypatch.setattr(tick_module.transitions, "advance", held_advance)
    results: list[Any] = [None, None]
    first = _in_thread(run_cycle, results, 0)
    first.start()
    assert inside.wait(20), "the first cycle never got the lock"
    second = _in_thread(run_cycle, results, 1)
    second.start()
    second.join(20)
    release.set()
    first.join(20)

    assert not first.is_alive() and not second.is_alive()
    assert isinstance(results[0], CycleReport), results[0]
    assert results[1] is None, "a second cycle ran while the first held the lock"
    assert CycleRecord.objects.count() == 1


def test_the_lock_is_free_again_after_a_cycle() -> None:
    results: list[Any] = [None, None]
    for index in (0, 1):
        thread = _in_thread(run_cycle, results, index)
        thread.start()
        thread.join(20)
    assert all(isinstance(result, CycleReport) for result in results), results
    assert CycleRecord.objects.count() == 2


@pytest.fixture
def test_redis(settings: Any) -> Iterator[redis.Redis]:
    """Redis db 15 as the tick's Redis; its tick keys are removed afterwards."""
    client = redis.Redis.from_url(REDIS_TEST_URL)
    try:
        client.ping()
    except redis.ConnectionError as error:
        pytest.fail(f"Redis is not answering at {REDIS_TEST_URL}: {error}")
    settings.REDIS_URL = REDIS_TEST_URL
    yield client
    for key in client.scan_iter("quotaweb:*"):
        client.delete(key)
    client.close()


def test_two_ticks_for_the_same_second_run_one_cycle(test_redis: redis.Redis) -> None:
    second = int(time.time()) + 1000  # a second nobody else claims
    first = tasks.tick(second)
    again = tasks.tick(second)
    assert first is not None and again is None
    assert CycleRecord.objects.count() == 1
    assert 0 < test_redis.ttl(tasks.TICK_KEY.format(second=second)) <= tasks.TICK_KEY_SECONDS


def test_ticks_of_different_seconds_each_run(test_redis: redis.Redis) -> None:
    second = int(time.time()) + 2000
    assert tasks.tick(second) is not None
    assert tasks.tick(second + 1) is not None
    assert CycleRecord.objects.count() == 2


def test_ticks_sent_at_once_from_two_threads_run_one_cycle(test_redis: redis.Redis) -> None:
    second = int(time.time()) + 3000
    results: list[Any] = [None, None]
    threads = [_in_thread(lambda: tasks.tick(second), results, index) for index in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert sorted(result is None for result in results) == [False, True], results
    assert CycleRecord.objects.count() == 1


def test_a_lost_redis_skips_the_tick_without_raising(settings: Any) -> None:
    # Nothing listens on port 1: the claim fails the way a Redis outage does.
    settings.REDIS_URL = "redis://127.0.0.1:1/15"
    assert tasks.tick(int(time.time())) is None
    assert CycleRecord.objects.count() == 0


def test_the_in_process_scheduler_ticks_each_second_and_stops_cleanly() -> None:
    launched: list[int] = []
    scheduler = Scheduler(launch=launched.append)
    scheduler.start()
    try:
        deadline = time.monotonic() + 10
        while CycleRecord.objects.count() < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        started = time.monotonic()
        scheduler.stop()
    assert time.monotonic() - started < 3, "stop() waits for one cycle at most"
    assert not scheduler.running
    assert CycleRecord.objects.count() >= 2
    starts = sorted(CycleRecord.objects.values_list("started_at", flat=True))
    # Aligned to wall-clock seconds: a cycle starts just after the second turns (any, not
    # all: a loaded machine may wake a thread late now and then).
    assert any(moment.microsecond < 300_000 for moment in starts), starts


def test_a_failing_cycle_is_logged_and_the_loop_goes_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(**_: Any) -> None:
        raise RuntimeError("database on fire")

    monkeypatch.setattr(tick_module, "run_cycle", broken)
    assert runtime.run_once(launch=lambda attempt_id: None) is False
    assert "scheduling cycle failed" in caplog.text
    monkeypatch.undo()
    assert runtime.run_once(launch=lambda attempt_id: None) is True


@pytest.mark.parametrize(("now", "wait"), [(100.25, 0.75), (100.9999, 1.0000999999999976),
                                           (100.0, 1.0)])
def test_the_loop_waits_for_the_next_wall_clock_second(now: float, wait: float) -> None:
    assert runtime.seconds_to_next_tick(now) == pytest.approx(wait, abs=1e-6)
