"""The what-if page's timelines: a replay's usage rows and preemptions (docs/scenario-format.md,
Output) drawn with the dashboard's timeline figure (figures.timeline_figure), on the
period's real times, so both replays read like the overview's chart."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from scheduler.events import EventType

from .figures import Figure, timeline_figure
from .usage_data import share_colours


def replay_timeline(document: Mapping[str, Any], output: Mapping[str, Any],
                    start: datetime, end: datetime) -> Figure:
    """One row per share and unit of the replay's configuration, its usage stacked as own,
    borrowed and lent under the limit the replay used, and its jobs' preemptions marked."""
    limits = {(share["name"], limit["capacity_unit"]): limit["max_capacity"]
              for share in document["quota_shares"] for limit in share["capacity_limits"]}
    rows = [{"quota_share": share, "capacity_unit": unit, "limit": limit}
            for (share, unit), limit in sorted(limits.items())]
    samples = [{**row, "time": start + timedelta(seconds=row["t"]),
                "limit": limits.get((row["quota_share"], row["capacity_unit"]), 0)}
               for row in output["usage"]]
    units = {action["submit"]["name"]: action["submit"]["instance_type"]
             for action in document["actions"] if "submit" in action}
    markers = [{"time": start + timedelta(seconds=event["t"]),
                "quota_share": event["quota_share"], "capacity_unit": units[event["job"]],
                "kind": event["details"]["kind"], "job_name": event["job"],
                "preempted_by_name": event["details"]["preempted_by"]}
               for event in output["events"] if event["type"] == EventType.PREEMPTED]
    return timeline_figure(
        rows, samples, markers, colours=share_colours(),  # the dashboard's colours
        now=end, window_seconds=max(1, int((end - start).total_seconds())),
        fixed_start=start, follow_now=False)
