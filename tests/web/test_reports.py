"""The usage report (services.reports): its figures over the walkthrough's reclaim, the
page, its CSV, the API and the `quotaweb report` command, all the same numbers."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from quotaweb.models import CapacityUnit, Job
from quotaweb.scheduling.tick import run_cycle
from quotaweb.services.jobs import submit_job
from quotaweb.services.reports import COLUMNS, percentile, usage_report

pytestmark = pytest.mark.django_db

UNIT = "ml.g5.xlarge"
ClientFor = Callable[[Any], Client]


def _submit(name: str, share: str, priority: int, at: datetime) -> Job:
    """A job submitted at `at` (its creation time set back, as the cycles are)."""
    job, _ = submit_job(None, name=name, quota_share=share, instance_type=UNIT,
                        priority=priority, duration_seconds=3600)
    Job.objects.filter(pk=job.pk).update(created_at=at)
    return job


@pytest.fixture
def reclaim(walkthrough_config: Any) -> tuple[datetime, datetime]:
    """high and med dispatched 10 s after `start` (med borrowing QS2's instance); qs2_job_1
    reclaims it 600 s later; the period ends 1,210 s after `start`.  All of it an hour ago:
    a report counts nothing after now."""
    CapacityUnit.objects.filter(name=UNIT).update(cold_start_seconds=0)
    start = timezone.now() - timedelta(hours=1)
    _submit("qs1_job_high", "QS1", 3, start)
    _submit("qs1_job_med", "QS1", 2, start)
    for second in (10, 11, 12):
        run_cycle(now=start + timedelta(seconds=second))
    _submit("qs2_job_1", "QS2", 1, start)
    run_cycle(now=start + timedelta(seconds=610))
    assert Job.objects.get(name="qs1_job_med").preempted_count == 1
    return start, start + timedelta(seconds=1210)


def _rows(period: tuple[datetime, datetime]) -> dict[str, dict[str, Any]]:
    return {row["quota_share"]: row for row in usage_report(*period)}


def test_the_report_integrates_own_borrowed_and_lent_and_counts_the_reclaim(
    reclaim: tuple[datetime, datetime]
) -> None:
    rows = _rows(reclaim)
    qs1, qs2 = rows["QS1"], rows["QS2"]
    assert qs1["own_instance_hours"] == pytest.approx(1200 / 3600, abs=1e-3)
    assert qs1["borrowed_instance_hours"] == pytest.approx(600 / 3600, abs=1e-3)
    assert qs2["lent_instance_hours"] == pytest.approx(600 / 3600, abs=1e-3)
    assert qs2["own_instance_hours"] == pytest.approx(600 / 3600, abs=1e-3)
    assert (qs1["preemptions_suffered_cross_share"], qs1["reclaimed_instances"]) == (1, 1)
    assert (qs2["preemptions_caused_cross_share"], qs2["preemptions_suffered_cross_share"]) \
        == (1, 0)
    assert (qs1["jobs_submitted"], qs1["jobs_run"], qs1["waits_counted"]) == (2, 2, 2)
    start = reclaim[0]
    created = {job.name: job.created_at for job in Job.objects.all()}
    waits = [(start + timedelta(seconds=10) - created[name]).total_seconds()
             for name in ("qs1_job_high", "qs1_job_med")]
    assert qs1["wait_mean_seconds"] == pytest.approx(sum(waits) / 2, abs=0.01)
    assert qs2["wait_p95_seconds"] == pytest.approx(
        (start + timedelta(seconds=610) - created["qs2_job_1"]).total_seconds(), abs=0.01)
    # QS3 is listed with its zeros: a chargeback lists every share that was sampled.
    assert rows["QS3"]["in_use_instance_hours"] == rows["QS3"]["jobs_submitted"] == 0
    assert list(qs1) == list(COLUMNS)


def test_a_period_after_the_reclaim_sees_only_what_held_then(
    reclaim: tuple[datetime, datetime]
) -> None:
    start, end = reclaim
    rows = _rows((start + timedelta(seconds=910), end))
    assert rows["QS1"]["own_instance_hours"] == pytest.approx(300 / 3600, abs=1e-3)
    assert rows["QS1"]["borrowed_instance_hours"] == 0
    assert rows["QS1"]["preemptions_suffered_cross_share"] == 0


def test_a_report_is_cut_at_now_and_a_future_period_is_empty(
    walkthrough_config: Any, member: Any, client_for: ClientFor
) -> None:
    """A share using an instance now: tomorrow's report has no rows (on the API, the page,
    the CSV), and a period running into the future counts only the hour so far."""
    CapacityUnit.objects.filter(name=UNIT).update(cold_start_seconds=0)
    start = timezone.now() - timedelta(hours=1)
    _submit("running", "QS1", 1, start)
    run_cycle(now=start)
    tomorrow = start + timedelta(days=1, hours=1)
    assert usage_report(tomorrow, tomorrow + timedelta(days=1)) == []
    client = client_for(member)
    future = _query((tomorrow, tomorrow + timedelta(days=1)))
    assert client.get(f"/api/v1/reports/usage?{future}").json()["rows"] == []
    csv_rows = client.get(f"/reports/usage.csv?{future}").content.decode().splitlines()
    assert len(csv_rows) == 1  # the header alone
    assert 'data-row="QS1|' not in client.get(f"/reports/usage?{future}").content.decode()
    # An hour in the past and a day in the future: the hour so far, not 25 hours.
    api = client.get(f"/api/v1/reports/usage?{_query((start, tomorrow))}").json()
    qs1 = {row["quota_share"]: row for row in api["rows"]}["QS1"]
    assert qs1["in_use_instance_hours"] == pytest.approx(1.0, abs=0.01)


def test_the_95th_percentile_is_the_nearest_rank() -> None:
    assert percentile([], 0.95) is None
    assert percentile([5.0], 0.95) == 5.0
    assert percentile([float(v) for v in range(1, 21)], 0.95) == 19.0
    assert percentile([float(v) for v in range(1, 101)], 0.95) == 95.0


def _query(period: tuple[datetime, datetime]) -> str:
    start, end = (moment.strftime("%Y-%m-%dT%H:%M:%S.%f") for moment in period)
    return f"start={start}&end={end}"


def test_the_page_the_csv_and_the_api_give_the_same_figures(
    reclaim: tuple[datetime, datetime], member: Any, client_for: ClientFor
) -> None:
    client = client_for(member)
    expected = _rows(reclaim)
    api = client.get(f"/api/v1/reports/usage?{_query(reclaim)}").json()
    assert {row["quota_share"]: row for row in api["rows"]} == expected
    response = client.get(f"/reports/usage.csv?{_query(reclaim)}")
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    table = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [row["quota_share"] for row in table] == ["QS1", "QS2", "QS3"]
    assert float(table[0]["borrowed_instance_hours"]) == expected["QS1"][
        "borrowed_instance_hours"]
    html = client.get(f"/reports/usage?{_query(reclaim)}").content.decode()
    assert 'data-row="QS1|ml.g5.xlarge"' in html
    assert f'<td class="num" data-column="borrowed_instance_hours">' \
        f'{expected["QS1"]["borrowed_instance_hours"]:.3f}</td>' in html
    assert 'href="/reports/usage.csv?start=' in html


def test_the_api_refuses_a_backwards_period_and_an_unknown_share(
    walkthrough_config: Any, member: Any, client_for: ClientFor
) -> None:
    client = client_for(member)
    backwards = client.get("/api/v1/reports/usage?start=2026-01-02T00:00:00Z"
                           "&end=2026-01-01T00:00:00Z")
    assert backwards.status_code == 422
    assert backwards.json()["error"]["fields"] == {"end": ["must be after start"]}
    assert client.get("/api/v1/reports/usage?quota_share=NOPE").status_code == 404
    assert client.get("/api/v1/reports/usage").json()["rows"] == []


def test_the_page_offers_presets_and_says_when_a_range_is_unusable(
    walkthrough_config: Any, member: Any, client_for: ClientFor
) -> None:
    client = client_for(member)
    html = client.get("/reports/usage?range=7d").content.decode()
    assert 'class="range current" aria-current="true">last 7d' in html
    refused = client.get("/reports/usage?start=yesterday").content.decode()
    assert "must be dates and times" in refused and "Showing the last 24 hours" in refused
