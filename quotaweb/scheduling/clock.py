"""Converting between the database's aware datetimes and the engine's epoch seconds."""

from __future__ import annotations

from datetime import UTC, datetime


def to_engine(moment: datetime | None) -> float | None:
    return None if moment is None else moment.timestamp()


def from_engine(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)
