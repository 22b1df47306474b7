"""Times as docs/api.md writes them: ISO 8601 in UTC with a `Z`.

Plain Python (no Django), so that any layer can format a time the one way.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal, overload

# "microseconds": every time the API and the websocket write reads alike, whatever its
# fraction.  "auto": the fraction only when there is one, as event details have always
# carried their times (a stored event must keep reading as it was written).
# "milliseconds": what the dashboard's script reads (quotaweb/series.py).
Precision = Literal["microseconds", "milliseconds", "auto"]


@overload
def iso(moment: datetime, timespec: Precision = "microseconds") -> str: ...


@overload
def iso(moment: None, timespec: Precision = "microseconds") -> None: ...


def iso(moment: datetime | None, timespec: Precision = "microseconds") -> str | None:
    """`moment` in UTC as ISO 8601 with a `Z` (None stays None)."""
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat(timespec=timespec).replace("+00:00", "Z")


def with_iso_times(values: Mapping[str, Any]) -> dict[str, Any]:
    """A representation for a JSON writer that does not know datetimes (the websocket):
    every time in it written by `iso`, everything else as it is."""
    return {key: iso(value) if isinstance(value, datetime) else value
            for key, value in values.items()}
