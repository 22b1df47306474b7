"""Time ranges a page shows, from its URL so that a view can be shared: a preset
(?range=1h, 24h, 7d, 30d) or a custom period (?start=...&end=..., ISO 8601, UTC when no
offset is given, as an <input type="datetime-local"> sends it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

PRESETS = {"1h": timedelta(hours=1), "24h": timedelta(hours=24), "7d": timedelta(days=7),
           "30d": timedelta(days=30)}
# What the timelines and the fleet offer: 30m is the live view the pages open with.
TIMELINE_PRESETS = {"30m": timedelta(minutes=30), "1h": timedelta(hours=1),
                    "24h": timedelta(hours=24), "7d": timedelta(days=7)}
LABELS = {"30m": "30 min", "1h": "1 h", "24h": "24 h", "7d": "7 d", "30d": "30 d"}
LONGEST = timedelta(days=366)


@dataclass(frozen=True)
class TimeRange:
    start: datetime
    end: datetime
    key: str  # the preset's name, or "custom"
    problem: str | None = None  # why the URL's range was not used

    @property
    def follows_now(self) -> bool:
        """A preset ends now and moves with the clock; a custom period stays put."""
        return self.key != "custom"

    @property
    def label(self) -> str:
        if self.key == "custom":
            return "custom period"
        return f"last {LABELS.get(self.key, self.key)}"

    @property
    def seconds(self) -> int:
        return max(1, int((self.end - self.start).total_seconds()))

    def query(self) -> str:
        """The range as URL parameters (what a link to the same view carries)."""
        if self.key != "custom":
            return f"range={self.key}"
        return f"start={_text(self.start)}&end={_text(self.end)}"


def _text(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


def parse_moment(text: str) -> datetime:
    moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def time_range(params: Mapping[str, str], now: datetime, default: str = "24h",
               presets: Mapping[str, timedelta] = PRESETS) -> TimeRange:
    """The range a page's URL asks for, or the default preset with the reason it was not
    usable (an unknown preset, an unreadable time, an end before the start, a period over
    a year)."""
    fallback = TimeRange(now - presets[default], now, default)
    if params.get("start"):
        try:
            start = parse_moment(params["start"])
            end = parse_moment(params["end"]) if params.get("end") else now
        except ValueError:
            return _refused(fallback, "The start and end must be dates and times "
                                      "(YYYY-MM-DDTHH:MM, UTC).")
        if end <= start:
            return _refused(fallback, "The end must come after the start.")
        if end - start > LONGEST:
            return _refused(fallback, "A period is at most a year long.")
        return TimeRange(start, end, "custom")
    key = params.get("range") or default
    if key not in presets:
        return _refused(fallback, f"Unknown range {key!r}: use one of {', '.join(presets)}.")
    return TimeRange(now - presets[key], now, key)


def _refused(fallback: TimeRange, problem: str) -> TimeRange:
    return TimeRange(fallback.start, fallback.end, fallback.key, problem)
