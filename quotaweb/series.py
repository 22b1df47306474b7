"""Pure helpers over time series of usage samples: parsing times and integrating step
functions.  No Django: the figure builders and their tests use them on plain data.  It sits
beside the layers rather than in one, so the usage report (services) and the pages (web)
share it without the services depending on the web layer."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from .read_model import times

Sample = Mapping[str, Any]
Moment = datetime | str


def parse_time(value: Moment) -> datetime:
    """An aware UTC datetime from an aware datetime or an ISO 8601 string ("...Z" allowed)."""
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(value)
    if moment.tzinfo is None:
        raise ValueError(f"time {value!r} has no time zone")
    return moment.astimezone(UTC)


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def epoch_microseconds(value: Moment) -> int:
    """Whole microseconds since 1970 UTC, exactly (what the database's downsampling uses)."""
    return (parse_time(value) - EPOCH) // timedelta(microseconds=1)


def iso(value: Moment) -> str:
    """ISO 8601 in UTC with a Z and milliseconds: what the page's script localises."""
    return times.iso(parse_time(value), "milliseconds")


def integrate(samples: Iterable[Sample], field: str, start: Moment, end: Moment) -> float:
    """∫ field dt over [start, end] in seconds, reading the samples as a step function: a
    sample's value holds from its time until the next sample's.  Before the first sample
    the value is 0 (nothing was recorded: the share had no usage yet)."""
    begin, finish = parse_time(start), parse_time(end)
    if finish <= begin:
        return 0.0
    points = sorted((parse_time(sample["time"]), float(sample[field])) for sample in samples)
    total = 0.0
    for index, (moment, value) in enumerate(points):
        until = points[index + 1][0] if index + 1 < len(points) else finish
        lo, hi = max(moment, begin), min(until, finish)
        if hi > lo:
            total += value * (hi - lo).total_seconds()
    return total


def downsample(samples: list[Sample], fields: tuple[str, ...], start: Moment, end: Moment,
               buckets: int) -> list[Sample]:
    """At most one sample per bucket of [start, end] divided into `buckets`, for a long
    range drawn as steps: each bucket's sample is at its first sample's time and holds,
    per field, the highest value the series reached in the bucket (the level carried in
    from the bucket before included), so no peak is lost.  A series that already has no
    more samples than buckets is returned as it is.  `samples` are one series, in time
    order.  The pages downsample in the database (web.downsampling), which must agree with
    this definition."""
    if len(samples) <= buckets:
        return samples
    # Integer microseconds, so the database (web.downsampling) cuts the same buckets.
    begin = epoch_microseconds(start)
    span = max(1, epoch_microseconds(end) - begin)
    chosen: dict[int, dict[str, Any]] = {}
    carried: Sample | None = None
    for sample in samples:
        index = max(0, epoch_microseconds(sample["time"]) - begin) * buckets // span
        bucket = chosen.get(index)
        if bucket is None:
            bucket = chosen[index] = dict(sample)
            if carried is not None and index > 0:
                for field in fields:
                    bucket[field] = max(bucket[field], carried[field])
        else:
            for field in fields:
                bucket[field] = max(bucket[field], sample[field])
        carried = sample
    return [chosen[index] for index in sorted(chosen)]


def duration_text(seconds: float | None) -> str:
    """A short human duration: 45 s, 3 min 5 s, 2 h 4 min, 1 d 3 h."""
    if seconds is None:
        return "—"
    whole = max(0, round(seconds))
    days, rest = divmod(whole, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {secs} s"
    return f"{secs} s"
