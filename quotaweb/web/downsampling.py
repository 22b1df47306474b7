"""A long range's usage samples downsampled in the database, so a week reads at most three
rows per bucket (its aggregate, its first and its last sample) however many samples the
week holds.

It computes exactly what quotaweb.series.downsample computes in Python (its tests are the
definition; a test compares the two on PostgreSQL and SQLite): [since, until] is cut into
`buckets` equal buckets by integer division of epoch microseconds, and each bucket becomes
one sample at its first sample's time and id, holding per figure the highest value reached
in the bucket and the level carried in from the bucket before (the last sample of that
bucket).
"""

from __future__ import annotations

import operator
from collections import defaultdict
from datetime import datetime
from functools import reduce
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import (
    BigIntegerField,
    Count,
    ExpressionWrapper,
    Func,
    Max,
    Min,
    Q,
    QuerySet,
    Value,
)
from django.db.models.functions import Greatest
from django.db.models.sql.compiler import SQLCompiler

from ..series import epoch_microseconds

Row = dict[str, Any]
Key = tuple[str, str]
CHUNK = 10_000  # moments per query, where the database sets no limit on parameters


class EpochMicroseconds(Func):
    """A datetime column as integer microseconds since 1970 UTC, exactly, on both engines.

    PostgreSQL's EXTRACT(EPOCH) is an exact numeric.  SQLite stores Django's datetimes as
    'YYYY-MM-DD HH:MM:SS[.ffffff]' in UTC: julianday() of the whole seconds is exact to the
    millisecond, so rounding it to seconds is exact, and the microseconds are read from the
    text.  Only for a column: the expression appears twice in SQLite's SQL."""

    output_field = BigIntegerField()
    arity = 1

    def as_postgresql(self, compiler: SQLCompiler, connection: BaseDatabaseWrapper,
                      **extra: Any) -> tuple[str, Any]:
        return self.as_sql(compiler, connection,
                           template="CAST(EXTRACT(EPOCH FROM %(expressions)s) * 1000000 "
                                    "AS BIGINT)", **extra)

    def as_sqlite(self, compiler: SQLCompiler, connection: BaseDatabaseWrapper,
                  **extra: Any) -> tuple[str, Any]:
        return self.as_sql(
            compiler, connection,
            template="(CAST(ROUND((julianday(substr(%(expressions)s, 1, 19)) - 2440587.5) "
                     "* 86400) AS INTEGER) * 1000000 + CAST(substr(%(expressions)s "
                     "|| '.000000', 21, 6) AS INTEGER))", **extra)


def downsampled_rows(rows: QuerySet[Any], figures: tuple[str, ...], since: datetime,
                     until: datetime, buckets: int) -> list[Row]:
    """`rows` (usage samples of any series, over [since, until] and the level before it)
    downsampled per series to at most `buckets` samples: dicts with id, time (a datetime),
    quota_share (its name), capacity_unit and `figures`, in (time, id) order.  A series
    with no more samples than buckets comes back whole, as series.downsample leaves it.

    Two steps: one GROUP BY (series, bucket) gives each bucket's size, first and last
    times and peaks; then the samples at those first and last times are read (at most two
    per bucket), for the first one's id and the last one's levels, which the next bucket
    carries in.  A GROUP BY is a tenth of the time window functions take over a week."""
    begin = epoch_microseconds(since)
    span = max(1, epoch_microseconds(until) - begin)
    bucket = ExpressionWrapper(
        Greatest(Value(0), EpochMicroseconds("time") - Value(begin)) * Value(buckets)
        / Value(span), output_field=BigIntegerField())
    grouped = rows.order_by().annotate(bucket=bucket).values(
        "quota_share__name", "capacity_unit", "bucket").annotate(
        size=Count("id"), first=Min("time"), last=Max("time"),
        **{f"peak_{figure}": Max(figure) for figure in figures})
    by_series: dict[Key, list[Row]] = defaultdict(list)
    for row in grouped:
        by_series[row["quota_share__name"], row["capacity_unit"]].append(row)
    whole = {key for key, series in by_series.items()
             if sum(row["size"] for row in series) <= buckets}
    moments = sorted({row[end] for key, series in by_series.items() if key not in whole
                      for row in series for end in ("first", "last")})
    fields = ("id", "time", "quota_share__name", "capacity_unit", *figures)
    read = rows.order_by().values_list(*fields)
    wanted = [read.filter(reduce(operator.or_, (
        Q(quota_share__name=share, capacity_unit=unit) for share, unit in whole)))
    ] if whole else []
    # Chunks, within the database's limit on a query's parameters (Django assumes SQLite's
    # oldest, 999), leaving room for those of `rows` itself.
    limit = connections[rows.db].features.max_query_params
    chunk = CHUNK if limit is None else max(1, limit - 100)
    wanted += [read.filter(time__in=moments[at:at + chunk])
               for at in range(0, len(moments), chunk)]
    at_moment: dict[tuple[str, str, datetime], list[Row]] = defaultdict(list)
    samples: list[Row] = []
    for query in wanted:
        for values in query:
            row = dict(zip(fields, values, strict=True))
            sample = {"id": row["id"], "time": row["time"],
                      "quota_share": row["quota_share__name"],
                      "capacity_unit": row["capacity_unit"],
                      **{figure: row[figure] for figure in figures}}
            key = (sample["quota_share"], sample["capacity_unit"])
            if key in whole:
                samples.append(sample)
            else:
                at_moment[(*key, sample["time"])].append(sample)
    for key, series in by_series.items():
        if key in whole:
            continue
        carried: Row | None = None
        for row in sorted(series, key=lambda row: row["bucket"]):
            first = min(at_moment[(*key, row["first"])], key=lambda s: s["id"])
            sample = {**first, **{figure: row[f"peak_{figure}"] for figure in figures}}
            if carried is not None and row["bucket"] > 0:
                for figure in figures:
                    sample[figure] = max(sample[figure], carried[figure])
            samples.append(sample)
            carried = max(at_moment[(*key, row["last"])], key=lambda s: s["id"])
    samples.sort(key=lambda sample: (sample["time"], sample["id"]))
    return samples
