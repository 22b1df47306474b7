"""GET /metrics: parsed with prometheus_client's own parser, its figures are the API's
usage, the preemptions the attempts record, the cycles recorded and the warm pools'
billable time; only the metrics token or an allowed address may read it."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.apps import apps as django_apps
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from quotaweb.models import (
    CapacityUnit,
    CycleRecord,
    CycleTotals,
    Job,
    QuotaShare,
    UsageSample,
    WarmPool,
)
from quotaweb.scheduling.tick import run_cycle
from quotaweb.services.billing import pool_billable_seconds
from quotaweb.services.jobs import submit_job

pytestmark = pytest.mark.django_db

UNIT = "ml.g5.xlarge"
ClientFor = Callable[[Any], Client]
Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


def _submit(name: str, share: str, priority: int = 0, **fields: Any) -> Job:
    fields.setdefault("duration_seconds", 3600)
    job, _ = submit_job(None, name=name, quota_share=share, instance_type=UNIT,
                        priority=priority, **fields)
    return job


def scrape(client: Client, **headers: Any) -> Samples:
    response = client.get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            key = tuple(sorted(sample.labels.items()))
            samples.setdefault(sample.name, {})[key] = sample.value
    return samples


def _at(share: str, unit: str = UNIT) -> tuple[tuple[str, str], ...]:
    return (("capacity_unit", unit), ("quota_share", share))


@pytest.fixture
def reclaimed(walkthrough_config: Any) -> None:
    """high on QS1's own instance, med reclaimed by qs2_job_1, low waiting."""
    CapacityUnit.objects.filter(name=UNIT).update(cold_start_seconds=0)
    now = timezone.now()
    for name, priority in (("qs1_job_high", 3), ("qs1_job_med", 2), ("qs1_job_low", 1)):
        _submit(name, "QS1", priority)
    for second in (40, 39, 38):
        run_cycle(now=now - timedelta(seconds=second))
    _submit("qs2_job_1", "QS2", 1)
    run_cycle(now=now - timedelta(seconds=5))


def test_the_usage_gauges_are_the_apis_usage(
    reclaimed: None, member: Any, client_for: ClientFor
) -> None:
    client = client_for(member)
    metrics = scrape(client)
    shares = client.get("/api/v1/quota-shares").json()["quota_shares"]
    names = {"limit": "quotaweb_quota_share_nominal_quota",
             "in_use": "quotaweb_quota_share_resource_usage",
             "own": "quotaweb_quota_share_own_instances",
             "borrowed": "quotaweb_quota_share_borrowed_instances",
             "lent": "quotaweb_quota_share_lent_instances",
             "warm": "quotaweb_quota_share_warm_instances",
             "queued": "quotaweb_quota_share_queued_instances"}
    compared = 0
    for share in shares:
        for unit, figures in share["usage"].items():
            for figure, metric in names.items():
                assert metrics[metric][_at(share["name"], unit)] == figures[figure], \
                    (share["name"], figure)
                compared += 1
    assert compared == 3 * 7
    assert metrics["quotaweb_quota_share_borrowed_instances"][_at("QS1")] == 0
    assert metrics["quotaweb_pending_workloads"][_at("QS1")] == 2  # med and low
    assert metrics["quotaweb_admitted_active_workloads"][_at("QS2")] == 1
    assert metrics["quotaweb_capacity_instances"][(("capacity_unit", UNIT),)] == 3


def test_preemptions_are_counted_by_victim_preemptor_and_kind(
    reclaimed: None, member: Any, client_for: ClientFor
) -> None:
    preempted = scrape(client_for(member))["quotaweb_preempted_workloads_total"]
    assert preempted == {(("preempting_quota_share", "QS2"), ("quota_share", "QS1"),
                          ("reason", "CROSS_SHARE")): 1.0}


def test_the_cycle_histogram_counts_every_recorded_cycle(
    reclaimed: None, member: Any, client_for: ClientFor
) -> None:
    metrics = scrape(client_for(member))
    recorded = CycleRecord.objects.count()
    assert recorded >= 4
    assert metrics["quotaweb_cycle_duration_seconds_count"][()] == recorded
    buckets = metrics["quotaweb_cycle_duration_seconds_bucket"]
    assert buckets[(("le", "+Inf"),)] == recorded
    ordered = [value for _, value in sorted(
        ((float(dict(key)["le"]), value) for key, value in buckets.items()))]
    assert ordered == sorted(ordered)  # cumulative
    assert metrics["quotaweb_cycle_duration_seconds_sum"][()] > 0


def test_warm_pool_hits_and_billable_instance_seconds(
    walkthrough_config: Any, member: Any, client_for: ClientFor
) -> None:
    CapacityUnit.objects.filter(name=UNIT).update(warm_pool_limit=2, cold_start_seconds=0,
                                                  warm_start_seconds=0)
    start = timezone.now() - timedelta(seconds=200)
    _submit("first", "QS3", duration_seconds=30, keep_alive_seconds=600, instance_count=1)
    for second in (0, 1, 31):
        run_cycle(now=start + timedelta(seconds=second))
    _submit("second", "QS3", duration_seconds=30, keep_alive_seconds=600)
    # first ran from second 0 to 30; second reuses its pool at 131, after 101 s Available.
    run_cycle(now=start + timedelta(seconds=131))
    pool = WarmPool.objects.get()
    assert pool.status == "InUse"
    metrics = scrape(client_for(member))
    assert metrics["quotaweb_warm_pool_hits_total"][_at("QS3")] == 1
    billed = metrics["quotaweb_warm_pool_billable_instance_seconds_total"][_at("QS3")]
    assert billed == pytest.approx(pool_billable_seconds(pool, timezone.now()), abs=0.5)
    assert billed == pytest.approx(101, abs=0.5)


def test_only_the_token_or_an_allowed_address_may_scrape(
    walkthrough_config: Any, settings: Any
) -> None:
    client = Client()
    assert client.get("/metrics").status_code == 200  # loopback, allowed by default
    far = {"REMOTE_ADDR": "203.0.113.9"}
    refused = client.get("/metrics", **far)
    assert refused.status_code == 403 and b"quotaweb_" not in refused.content
    settings.QUOTAWEB = {**settings.QUOTAWEB, "METRICS_TOKEN": "s3cret",
                         "METRICS_ALLOW": ["10.0.0.0/8"]}
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret", **far).status_code == 200
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong", **far).status_code == 401
    assert client.get("/metrics", REMOTE_ADDR="10.20.30.40").status_code == 200
    assert client.get("/metrics").status_code == 403  # loopback no longer listed
    assert client.post("/metrics", HTTP_AUTHORIZATION="Bearer s3cret").status_code == 405


def _recorded_histogram() -> dict[str, float]:
    """The histogram straight from every CycleRecord: what the scrape must agree with."""
    records = list(CycleRecord.objects.values_list("load_ms", "plan_ms", "apply_ms"))
    totals = [(load + plan) + apply for load, plan, apply in records]
    figures = {bound: float(sum(total <= float(bound) * 1000 for total in totals))
               for bound in ("0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1.0",
                             "2.5", "5.0")}
    return {**figures, "+Inf": float(len(totals)), "sum": sum(totals) / 1000}


def _scraped_histogram(metrics: Samples) -> dict[str, float]:
    buckets = metrics["quotaweb_cycle_duration_seconds_bucket"]
    return {**{dict(key)["le"]: value for key, value in buckets.items()},
            "sum": metrics["quotaweb_cycle_duration_seconds_sum"][()]}


def test_a_scrape_reads_the_cycle_totals_not_every_cycle_record(
    walkthrough_config: Any, member: Any, client_for: ClientFor
) -> None:
    """A week of cycles is 600,000 records: the scrape reads the totals each cycle keeps
    (CycleTotals), one row, and they agree with the records, cycle after cycle."""
    client = client_for(member)
    start = timezone.now() - timedelta(seconds=100)
    for second in range(12):
        run_cycle(now=start + timedelta(seconds=second))
    with CaptureQueriesContext(connection) as queries:
        metrics = scrape(client)
    tables = " ".join(query["sql"] for query in queries.captured_queries)
    assert "quotaweb_cyclerecord" not in tables and "quotaweb_cycletotals" in tables
    assert CycleRecord.objects.count() == 12
    assert _scraped_histogram(metrics) == pytest.approx(_recorded_histogram())


def test_the_migration_counts_the_cycles_recorded_before_it(
    walkthrough_config: Any, member: Any, client_for: ClientFor
) -> None:
    """Records of every duration, around each bound, counted by the migration's one
    aggregate; then a cycle adds itself to them."""
    at = timezone.now()
    CycleRecord.objects.bulk_create(
        CycleRecord(started_at=at, load_ms=ms / 4, plan_ms=ms / 2, apply_ms=ms / 4,
                    decisions=0, jobs=0)
        for ms in (1, 5, 5.01, 9.99, 10, 30, 60, 200, 400, 900, 1000, 2000, 4000, 9000) * 50)
    CycleTotals.objects.all().delete()
    migration = importlib.import_module("quotaweb.migrations.0005_cycle_totals")
    migration.count_recorded_cycles(django_apps, None)
    client = client_for(member)
    assert _scraped_histogram(scrape(client)) == pytest.approx(_recorded_histogram())
    assert CycleTotals.objects.get().count == 14 * 50
    run_cycle()
    metrics = scrape(client)
    assert metrics["quotaweb_cycle_duration_seconds_count"][()] == 14 * 50 + 1
    assert _scraped_histogram(metrics) == pytest.approx(_recorded_histogram())


def test_fair_sharing_and_minimum_runtime_figures(
    walkthrough_config: Any, member: Any, client_for: ClientFor
) -> None:
    """docs/semantics.md 5.4 and 5.8 in /metrics: the switch per unit, each share's weight
    and minimum runtime, borrowed / weight where fair sharing is on, and the jobs that wait
    for a minimum runtime."""
    CapacityUnit.objects.filter(name=UNIT).update(cold_start_seconds=0, fair_sharing=True)
    QuotaShare.live.filter(name="QS1").update(fair_share_weight=2, min_runtime_seconds=600)
    now = timezone.now()
    for name, priority in (("qs1_job_high", 3), ("qs1_job_med", 2), ("qs1_job_low", 1)):
        _submit(name, "QS1", priority)
    for second in (40, 39, 38):
        run_cycle(now=now - timedelta(seconds=second))
    Job.objects.filter(name="qs1_job_low").update(priority=4)
    run_cycle(now=now - timedelta(seconds=30))
    metrics = scrape(client_for(member))
    assert metrics["quotaweb_capacity_fair_sharing"] == {(("capacity_unit", UNIT),): 1}
    assert metrics["quotaweb_quota_share_fair_share_weight"][(("quota_share", "QS1"),)] == 2
    assert metrics["quotaweb_quota_share_min_runtime_seconds"][(("quota_share", "QS1"),)] == 600
    assert metrics["quotaweb_quota_share_min_runtime_seconds"][(("quota_share", "QS2"),)] == 0
    # med borrows QS2's idle instance: 1 borrowed / weight 2.
    assert metrics["quotaweb_quota_share_borrowed_per_weight"][_at("QS1")] == 0.5
    # low (now priority 4) would preempt high in QS1, but high is younger than 600 s.
    assert metrics["quotaweb_min_runtime_waiting_workloads"] == {_at("QS1"): 1}
    assert Job.objects.get(name="qs1_job_low").pending_code == "WAITING_FOR_MIN_RUNTIME"
    # Without a half-life, no past-borrowing figures.
    assert "quotaweb_quota_share_past_borrowed" not in metrics


def test_past_borrowing_figures_with_a_half_life(
    walkthrough_config: Any, member: Any, client_for: ClientFor, settings: Any
) -> None:
    """docs/semantics.md 5.4 in /metrics: the half-life, and each share's decayed past
    borrowing on the units where fair sharing is on (1 borrowed for one half-life: 1/2)."""
    settings.QUOTAWEB = {**settings.QUOTAWEB, "FAIR_SHARE_HALF_LIFE_SECONDS": 3600}
    CapacityUnit.objects.filter(name=UNIT).update(fair_sharing=True)
    qs1 = QuotaShare.live.get(name="QS1")
    now = timezone.now()
    UsageSample.objects.create(time=now - timedelta(hours=1), quota_share=qs1,
                               capacity_unit=UNIT, limit=1, in_use=2, own=1, borrowed=1,
                               lent=0, warm=0, queued=0)
    metrics = scrape(client_for(member))
    assert metrics["quotaweb_fair_share_half_life_seconds"][()] == 3600
    past = metrics["quotaweb_quota_share_past_borrowed"]
    assert past[_at("QS1")] == pytest.approx(0.5, abs=1e-3)
    assert past[_at("QS2")] == 0
