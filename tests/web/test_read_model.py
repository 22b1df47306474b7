"""The read model (quotaweb/read_model): each reader's view of a job or a warm pool is taken
from the one representation of docs/api.md, and every time is written by the one `iso`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from quotaweb.models import Job, WarmPool
from quotaweb.read_model import jobs, pools
from quotaweb.read_model.times import iso, with_iso_times
from quotaweb.web import job_data

from . import test_api_helpers as helpers
from .test_api_helpers import World, available_pool, job

world = helpers.world

pytestmark = pytest.mark.django_db


def test_the_websocket_summary_is_the_api_representation_cut_down(world: World) -> None:
    running = job("QS1", status="RUNNING", priority=3,
                  scheduled_at=datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC),
                  started_at=datetime(2025, 1, 2, 3, 4, 6, 7, tzinfo=UTC))
    api = jobs.job_dict(jobs.job_rows().get(pk=running.pk), jobs.View(secrets=True))
    [summary] = [jobs.job_summary_dict(row) for row in jobs.active_job_rows()]
    assert list(summary) == list(jobs.SUMMARY_FIELDS)
    assert summary == with_iso_times({name: api[name] for name in jobs.SUMMARY_FIELDS})
    assert (summary["scheduled_at"], summary["started_at"]) == (
        "2025-01-02T03:04:05.000000Z", "2025-01-02T03:04:06.000007Z")


def test_the_pages_show_the_representations_position_and_pending_reason(
        world: World) -> None:
    first = job("QS1", status="RUNNABLE", priority=2, pending_code="BORROW_LIMIT_REACHED")
    second = job("QS1", status="RUNNABLE", priority=1)
    rows = {row["job"].pk: row for row in job_data.open_jobs()}
    for queued, place in ((first, 1), (second, 2)):
        api = jobs.single_job_dict(Job.objects.get(pk=queued.pk), jobs.Reader(world.users["other"]))
        assert rows[queued.pk]["position"] == api["position"] == place
        assert rows[queued.pk]["pending"] == api["pending_reason"]
    assert rows[first.pk]["pending"]["code"] == "BORROW_LIMIT_REACHED"


def test_a_live_pool_on_the_websocket_is_the_api_pool_without_its_ending(
        world: World) -> None:
    pool = available_pool(job("QS1", status="RUNNING"), retained=4.0)
    now = datetime.now(UTC)
    api = pools.pool_dict(pools.pool_rows().get(pk=pool.pk), pools.View(now, None))
    [live] = [pools.live_pool_dict(row, None) for row in pools.live_pool_rows()]
    assert list(live) == list(pools.LIVE_FIELDS) == list(api)[:-1]
    billed = live.pop("retained_billable_seconds")
    expected = with_iso_times(api)
    # Billed up to each reader's own now: the live one reads a little later.
    assert billed >= expected.pop("retained_billable_seconds") >= 4.0
    expected.pop("termination_reason")
    assert live == expected
    assert live["cache_directory"] == "/tmp/cache-x"
    hidden = pools.live_pool_dict(pools.live_pool_rows().get(), frozenset())
    assert hidden["cache_directory"] is None


def test_the_pages_pool_row_bills_as_the_api_does(world: World) -> None:
    available_pool(job("QS1", status="RUNNING"), retained=2.5, since_seconds_ago=30)
    now = datetime.now(UTC)
    [row] = pools.page_rows(now, live=True)
    api = pools.pool_dict(WarmPool.objects.get(), pools.View(now))
    assert (row["keep_alive_seconds"], row["billable_seconds"]) == (
        api["keep_alive_seconds"], api["retained_billable_seconds"])
    assert row["billable_seconds"] == pytest.approx(32.5, abs=1.0)


@pytest.mark.parametrize(("moment", "precision", "written"), [
    (datetime(2025, 5, 6, 7, 8, 9, tzinfo=UTC), "microseconds", "2025-05-06T07:08:09.000000Z"),
    (datetime(2025, 5, 6, 7, 8, 9, tzinfo=UTC), "auto", "2025-05-06T07:08:09Z"),
    (datetime(2025, 5, 6, 7, 8, 9, 120, tzinfo=UTC), "auto", "2025-05-06T07:08:09.000120Z"),
    (datetime(2025, 5, 6, 9, 8, 9, tzinfo=timezone(timedelta(hours=2))), "microseconds",
     "2025-05-06T07:08:09.000000Z"),
])
def test_iso_writes_utc_with_a_z(moment: datetime, precision: Any, written: str) -> None:
    assert iso(moment, precision) == written


def test_iso_keeps_a_missing_time_missing() -> None:
    assert iso(None) is None
