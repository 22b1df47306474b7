"""A long range's usage samples downsampled in the database, so a week reads at most
`buckets` rows per series however many samples the week holds.

It computes exactly what quotaweb.series.downsample computes in Python (its tests are the
definition; a test compares the two on PostgreSQL and SQLite): [since, until] is cut into
`buckets` equal buckets by integer division of epoch microseconds, and each bucket becomes
one sample at its first sample's time and id, holding per figure the highest value reached
in the bucket and the level carried in from the bucket before.  The database groups each
series' samples by bucket with window functions and returns, per bucket, its first sample,
its peaks and its last sample's figures; the level carried in is that last sample of the
bucket before, taken here over those few rows.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import (
    BigIntegerField,
    Count,
    ExpressionWrapper,
    F,
    Func,
    Max,
    Q,
    QuerySet,
    Value,
    Window,
)
from django.db.models.functions import FirstValue, Greatest, RowNumber
from django.db.models.sql.compiler import SQLCompiler

from ..series import epoch_microseconds

Row = dict[str, Any]
SERIES = ("quota_share_id", "capacity_unit")


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
    with no more samples than buckets comes back whole, as series.downsample leaves it."""
    begin, span = epoch_microseconds(since), max(1, epoch_microseconds(until)
                                                 - epoch_microseconds(since))
    bucket = ExpressionWrapper(
        Greatest(Value(0), EpochMicroseconds("time") - Value(begin)) * Value(buckets)
        / Value(span), output_field=BigIntegerField())
    in_bucket = [*SERIES, "bucket"]
    forwards, backwards = [F("time").asc(), F("id").asc()], [F("time").desc(), F("id").desc()]
    annotated = rows.order_by().annotate(bucket=bucket).annotate(
        series_size=Window(Count("id"), partition_by=[F(name) for name in SERIES]),
        rank=Window(RowNumber(), partition_by=[F(name) for name in in_bucket],
                    order_by=forwards),
        **{f"peak_{figure}": Window(Max(figure), partition_by=[F(n) for n in in_bucket])
           for figure in figures},
        **{f"last_{figure}": Window(FirstValue(figure),
                                    partition_by=[F(n) for n in in_bucket],
                                    order_by=backwards)
           for figure in figures},
    )
    fields = ("id", "time", "quota_share__name", "capacity_unit", "bucket", "series_size",
              *figures, *(f"peak_{f}" for f in figures), *(f"last_{f}" for f in figures))
    chosen = annotated.filter(Q(rank=1) | Q(series_size__lte=buckets)).values(*fields)
    samples: list[Row] = []
    carried: dict[tuple[str, str], Row] = {}
    for row in sorted(chosen, key=lambda row: (row["time"], row["id"])):
        key = (row["quota_share__name"], row["capacity_unit"])
        sample = {"id": row["id"], "time": row["time"], "quota_share": key[0],
                  "capacity_unit": key[1]}
        if row["series_size"] <= buckets:
            sample.update({figure: row[figure] for figure in figures})
        else:
            before = carried.get(key)
            sample.update({figure: max(row[f"peak_{figure}"],
                                       before[f"last_{figure}"] if before and row["bucket"]
                                       else row[f"peak_{figure}"])
                           for figure in figures})
            carried[key] = row
        samples.append(sample)
    return samples
