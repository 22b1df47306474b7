"""A long range's samples are downsampled in the database (web.downsampling), on PostgreSQL
and on SQLite alike, to exactly what series.downsample defines: same buckets, same first
sample, same peaks and carried-in levels, and a short series left whole."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from quotaweb import series
from quotaweb.models import QuotaShare, UsageSample
from quotaweb.read_model.usage import FIGURES
from quotaweb.web import usage_data
from quotaweb.web.downsampling import downsampled_rows
from quotaweb.web.ranges import TimeRange

from .processes import run_on_embedded_sqlite

pytestmark = pytest.mark.django_db

UNIT = "ml.g5.xlarge"
SINCE = datetime(2026, 11, 20, 0, 0, tzinfo=UTC)
UNTIL = SINCE + timedelta(days=7)


def _samples(share: QuotaShare, unit: str, moments: list[datetime], seed: int) -> None:
    chance = random.Random(seed)
    UsageSample.objects.bulk_create(
        UsageSample(time=moment, quota_share=share, capacity_unit=unit,
                    **{figure: chance.randrange(0, 6) for figure in FIGURES})
        for moment in moments)


def _week(seed: int, count: int, buckets: int) -> list[datetime]:
    """Random moments of the week, to the microsecond, some on the first microsecond of
    a bucket and some on the last one of the bucket before (with 41 buckets, edges fall
    inside a second: 14,751.219512… s each), and one before the week."""
    chance = random.Random(seed)
    span = 7 * 86_400 * 10**6
    moments = [SINCE + timedelta(microseconds=chance.randrange(0, span)) for _ in range(count)]
    edges = [SINCE + timedelta(microseconds=-(-span * k // buckets))
             for k in range(1, buckets, max(1, buckets // 16))]
    return sorted([SINCE - timedelta(hours=5), *moments, *edges,
                   *(edge - timedelta(microseconds=1) for edge in edges)])


def _reference(rows: list[dict[str, Any]], buckets: int) -> list[tuple[Any, ...]]:
    """series.downsample over each series read whole, as the pages did before."""
    by_series: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in sorted(rows, key=lambda row: (row["time"], row["id"])):
        by_series.setdefault((row["quota_share"], row["capacity_unit"]), []).append(row)
    kept = [sample for samples in by_series.values()
            for sample in series.downsample(samples, FIGURES, SINCE, UNTIL, buckets)]
    return sorted(_key(sample) for sample in kept)


def _key(sample: dict[str, Any]) -> tuple[Any, ...]:
    return (series.parse_time(sample["time"]), sample["id"], sample["quota_share"],
            sample["capacity_unit"], *(sample[figure] for figure in FIGURES))


def downsampled_alike(qs1: QuotaShare, qs2: QuotaShare, buckets: int) -> int:
    """Fill three series, downsample them in the database and with series.downsample,
    check both agree; the number of samples the database kept.  The SQLite test runs it
    in a process of its own."""
    _samples(qs1, UNIT, _week(1, 3000, buckets), seed=2)
    _samples(qs2, UNIT, _week(3, 700, buckets), seed=4)
    # Fewer samples than buckets, several in one bucket: left whole.
    _samples(qs1, "other.unit", [SINCE + timedelta(hours=h, microseconds=h)
                                 for h in (1, 1, 2, 50, 50, 51)], seed=6)
    every = [{"id": s.id, "time": s.time, "quota_share": s.quota_share.name,
              "capacity_unit": s.capacity_unit, **{f: getattr(s, f) for f in FIGURES}}
             for s in UsageSample.objects.select_related("quota_share")]
    with CaptureQueriesContext(connection) as queries:
        kept = downsampled_rows(UsageSample.objects.all(), FIGURES, SINCE, UNTIL, buckets)
    # The GROUP BY, the series left whole, then the buckets' first and last samples (in
    # chunks of 899 on SQLite).
    assert len(queries.captured_queries) <= (3 if connection.vendor == "postgresql" else 6)
    assert sorted(_key(sample) for sample in kept) == _reference(every, buckets)
    assert [(s["time"], s["id"]) for s in kept] == sorted((s["time"], s["id"]) for s in kept)
    counts: dict[tuple[str, str], int] = {}
    for sample in kept:
        key = (sample["quota_share"], sample["capacity_unit"])
        counts[key] = counts.get(key, 0) + 1
    assert counts[("QS1", UNIT)] <= buckets < 3000
    assert counts[("QS1", "other.unit")] == 6
    return len(kept)


@pytest.mark.parametrize("buckets", [600, 41])
def test_postgresql_downsamples_as_series_downsample_defines(
    walkthrough_config: Any, buckets: int
) -> None:
    assert connection.vendor == "postgresql"
    downsampled_alike(walkthrough_config.qs1, walkthrough_config.qs2, buckets)


SQLITE_CHECK = """
from django.db import connection
from quotaweb.models import QuotaShare, UsageSample
from tests.web.test_downsampling import downsampled_alike
assert connection.vendor == "sqlite", connection.vendor
shares = [QuotaShare.objects.create(name=name, sharing_strategy="LEND") for name in ("QS1", "QS2")]
for buckets in (600, 41):
    UsageSample.objects.all().delete()
    print("kept", downsampled_alike(*shares, buckets), "of", UsageSample.objects.count())
"""


def test_the_embedded_sqlite_database_downsamples_alike(tmp_path: Path) -> None:
    """The embedded default (no DATABASE_URL): a fresh SQLite database in a process of its
    own, migrated, then the same check."""
    printed = run_on_embedded_sqlite(tmp_path, SQLITE_CHECK)
    assert printed.count("kept ") == 2, printed
    assert (tmp_path / "embedded.sqlite3").exists()


def test_a_week_of_the_timeline_reads_a_bounded_number_of_rows(walkthrough_config: Any) -> None:
    """The page's path: a 7-day range of a series with 5,000 samples comes back as at most
    POINTS_PER_SERIES points, the level before the week moved to its start."""
    qs1 = QuotaShare.objects.get(name="QS1")
    _samples(qs1, UNIT, _week(7, 5000, 600), seed=8)
    period = TimeRange(start=SINCE, end=UNTIL, key="7d")
    drawn = [s for s in usage_data.timeline_samples(UNTIL, period=period)
             if s["quota_share"] == "QS1"]
    assert 0 < len(drawn) <= usage_data.POINTS_PER_SERIES
    assert series.parse_time(drawn[0]["time"]) == SINCE
    assert max(s["own"] for s in drawn) == 5
