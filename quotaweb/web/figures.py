"""Plotly figures as pure functions of plain data (docs/architecture.md, Charts).

Every builder takes lists and dicts (usage samples as the websocket sends them, bars,
markers) and returns a Plotly figure dict {"data", "layout", "config"}; nothing here reads
the database or the clock.  The page embeds the dict with json_script and draws it with
the vendored plotly.js; static/quotaweb/live.js then appends live points to the traces,
guided by each trace's `meta`:

- usage traces: meta {"series": "<share>|<unit>", "field": "own"|..., "tail": true}.  The
  last point of a non-empty usage trace is a "tail" repeating the latest value at `now`,
  so a step line reaches the present; the script moves it as time passes.
- marker traces: meta {"markers": "CROSS_SHARE"|"IN_SHARE"|"RECLAIM_RETURNED", "share",
  "unit", "y"}: a reclaim is marked on the victim's row (CROSS_SHARE) and on the row of
  the share whose capacity came back (RECLAIM_RETURNED).
- "stopping" traces: meta {"stopping": true, "series", "times": true}: grace periods.
- bars: meta {"time_base": true, "open": [[point index, start ms], ...]} for bars that
  are still open (their length grows with time).
- layout.meta {"time_axes": [...], "window_seconds": N, "follow_now": bool}: which axes
  carry times (the script shows them in the viewer's time zone) and whether the visible
  window follows the clock.

Colours: the Okabe-Ito palette (colour-blind safe), assigned by share name order, so a
share has the same colour on every chart.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from ..series import Moment, iso, parse_time

Figure = dict[str, Any]
Trace = dict[str, Any]
Bar = dict[str, Any]

# Okabe & Ito (2008), black left out: it marks limits and preemptions.
OKABE_ITO = ("#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7")
INK = "#222222"
LENT_GREY = "#8C8C8C"
WINDOW_SECONDS = 30 * 60
MIN_WINDOW_SECONDS = 60
LEAD_SECONDS = 15
MARKER_Y = 0.86
STACKED_FIELDS = ("own", "borrowed", "lent")
MARKER_STYLE = {
    "CROSS_SHARE": {"name": "reclaim (cross-share)", "symbol": "triangle-down"},
    "IN_SHARE": {"name": "in-share preemption", "symbol": "diamond"},
    # On the reclaiming share's row: the capacity it had lent came back to it.
    "RECLAIM_RETURNED": {"name": "reclaim (capacity came back)", "symbol": "triangle-up"},
}
MARKER_LABEL = {"CROSS_SHARE": "CROSS_SHARE", "IN_SHARE": "IN_SHARE",
                "RECLAIM_RETURNED": "CROSS_SHARE: capacity came back"}
# A double-click returns to the window that follows the clock (the page's script).
CONFIG = {"displaylogo": False, "responsive": True, "doubleClick": "autosize",
          "modeBarButtonsToRemove": ["lasso2d", "select2d", "autoScale2d"]}


def share_colours(names: Iterable[str]) -> dict[str, str]:
    """Share name → colour: the palette in share name order, cycled after seven shares."""
    return {name: OKABE_ITO[index % len(OKABE_ITO)]
            for index, name in enumerate(sorted(set(names)))}


def tint(colour: str, alpha: float) -> str:
    """A "#rrggbb" colour as rgba() with the given opacity."""
    red, green, blue = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({red},{green},{blue},{alpha})"


def series_key(share: str, unit: str) -> str:
    """How a usage series is named in trace meta and in the page's script."""
    return f"{share}|{unit}"


# Usage timelines ----------------------------------------------------------------------


def timeline_figure(
    rows: Sequence[Mapping[str, Any]],
    samples: Iterable[Mapping[str, Any]],
    markers: Iterable[Mapping[str, Any]],
    *,
    colours: Mapping[str, str],
    now: Moment,
    window_seconds: int = WINDOW_SECONDS,
    stops: Iterable[Mapping[str, Any]] = (),
    fixed_start: Moment | None = None,
    follow_now: bool = True,
) -> Figure:
    """One row per (share, unit) in `rows` ({quota_share, capacity_unit, limit}), on one
    shared time axis showing the last `window_seconds` (zoom out for older samples).

    Each row stacks own, borrowed (hatched) and lent (grey, dotted) as areas, draws the
    limit as a dashed line, and marks PREEMPTED events of the share's jobs (`markers`:
    {time, quota_share, capacity_unit, kind, job_name, preempted_by_name}) in a strip at
    its top: ▼ a reclaim by another share, ◆ an in-share preemption.  `stops` (grace
    periods: {quota_share, capacity_unit, since, until, job_name, preempted_by_name}) are
    drawn in the same strip as a bar from the preemption to the victim's SIGKILL.
    With `fixed_start` (a chosen time range) the axis shows [fixed_start, now] whatever
    the data's age; `follow_now` False keeps the page from moving it with the clock."""
    moment = parse_time(now)
    stopping: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for stop in stops:
        stopping[series_key(stop["quota_share"], stop["capacity_unit"])].append(stop)
    by_series: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for sample in samples:
        by_series[series_key(sample["quota_share"], sample["capacity_unit"])].append(sample)
    marks: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for marker in markers:
        marks[series_key(marker["quota_share"], marker["capacity_unit"])].append(marker)
    earliest = earliest_of([s["time"] for series in by_series.values() for s in series]
                         + [m["time"] for series in marks.values() for m in series])
    start = visible_start(moment, window_seconds, earliest)
    if fixed_start is not None:
        start, earliest = parse_time(fixed_start), None
    data: list[Trace] = []
    annotations: list[dict[str, Any]] = []
    tops: list[int] = []
    for index, row in enumerate(rows, start=1):
        key = series_key(row["quota_share"], row["capacity_unit"])
        points = sorted(by_series.get(key, []), key=lambda s: (parse_time(s["time"]),
                                                                s.get("id", 0)))
        colour = colours.get(row["quota_share"], OKABE_ITO[0])
        axes = _row_axes(index)
        data += _usage_traces(key, points, row, colour, axes, start, moment, index == 1)
        data.append(_stopping_trace(key, stopping.get(key, []), axes, len(rows), index == 1))
        data += _marker_traces(key, row, marks.get(key, []), axes, len(rows), index == 1)
        annotations += _row_annotations(key, row, index, len(rows), empty=not points)
        tops.append(max([int(row.get("limit") or 0), 1]
                        + [int(p["limit"]) for p in points]
                        + [sum(int(p[f]) for f in STACKED_FIELDS) for p in points]))
    _legend_on_drawn_rows(data)
    layout = _timeline_layout(tops, annotations, start, moment, window_seconds)
    layout["meta"]["earliest"] = iso(earliest) if earliest else None
    layout["meta"]["follow_now"] = follow_now
    return {"data": data, "layout": layout, "config": CONFIG}


def _legend_on_drawn_rows(data: list[Trace]) -> None:
    """Plotly leaves an empty trace out of the legend: each mark's legend entry goes on
    the first row that draws it (the first row when none does)."""
    for group in (*MARKER_STYLE, "stopping"):
        traces = [t for t in data if t.get("legendgroup") == group]
        drawn = next((t for t in traces if t["x"]), traces[0] if traces else None)
        for trace in traces:
            trace["showlegend"] = trace is drawn


def earliest_of(times: Iterable[Moment]) -> Any:
    return min((parse_time(t) for t in times), default=None)


def visible_start(now: Any, window_seconds: int, earliest: Any) -> Any:
    """Where the visible window starts: `window_seconds` before now, or, when the data
    is younger than that, LEAD_SECONDS before it begins (but at least MIN_WINDOW_SECONDS
    before now), so a young system's history is not a sliver at the right edge."""
    start = now - timedelta(seconds=window_seconds)
    if earliest is None:
        return start
    lead = min(earliest - timedelta(seconds=LEAD_SECONDS),
               now - timedelta(seconds=MIN_WINDOW_SECONDS))
    return max(start, lead)


def _row_axes(index: int) -> tuple[str, str]:
    return "x", "y" if index == 1 else f"y{index}"


def _usage_traces(
    key: str, points: Sequence[Mapping[str, Any]], row: Mapping[str, Any], colour: str,
    axes: tuple[str, str], start: Any, now: Any, first: bool,
) -> list[Trace]:
    times = [iso(point["time"]) for point in points]
    tail = bool(points) and parse_time(points[-1]["time"]) < now
    x = times + ([iso(now)] if tail else [])

    def values(field: str) -> list[int]:
        ys = [int(point[field]) for point in points]
        return ys + ys[-1:] if tail else ys

    styles = {
        "own": {"name": "own", "fillcolor": tint(colour, 0.85)},
        "borrowed": {"name": "borrowed", "fillcolor": tint(colour, 0.35),
                     "fillpattern": {"shape": "/", "fgcolor": colour, "solidity": 0.4}},
        "lent": {"name": "lent to others", "fillcolor": tint(LENT_GREY, 0.18),
                 "fillpattern": {"shape": ".", "fgcolor": LENT_GREY, "solidity": 0.3}},
    }
    traces = [
        {
            "type": "scatter", "mode": "lines", "x": x, "y": values(field),
            "xaxis": axes[0], "yaxis": axes[1], "stackgroup": key,
            "line": {"shape": "hv", "width": 0.5, "color": colour},
            "legendgroup": field, "showlegend": first,
            "hovertemplate": f"%{{y}} {styles[field]['name']}<extra>{row['quota_share']}</extra>",
            "meta": {"series": key, "field": field, "tail": True},
            **styles[field],
        }
        for field in STACKED_FIELDS
    ]
    if points:
        limit_x, limit_y = x, values("limit")
    else:  # nothing recorded yet: draw the configured limit across the window
        limit_x, limit_y = [iso(start), iso(now)], [int(row.get("limit") or 0)] * 2
    traces.append({
        "type": "scatter", "mode": "lines", "x": limit_x, "y": limit_y, "name": "limit",
        "xaxis": axes[0], "yaxis": axes[1],
        "line": {"shape": "hv", "width": 1.5, "dash": "dash", "color": INK},
        "legendgroup": "limit", "showlegend": first,
        "hovertemplate": f"limit %{{y}}<extra>{row['quota_share']}</extra>",
        "meta": {"series": key, "field": "limit", "tail": True},
    })
    return traces


def _marker_traces(
    key: str, row: Mapping[str, Any], marks: Sequence[Mapping[str, Any]],
    axes: tuple[str, str], rows: int, first: bool,
) -> list[Trace]:
    strip = _strip_axis(int(axes[1][1:] or 1), rows)
    traces = []
    for kind, style in MARKER_STYLE.items():
        chosen = sorted((m for m in marks if m["kind"] == kind),
                        key=lambda m: parse_time(m["time"]))
        traces.append({
            "type": "scatter", "mode": "markers", "name": style["name"],
            "x": [iso(m["time"]) for m in chosen], "y": [MARKER_Y] * len(chosen),
            "customdata": [[m["job_name"], m["preempted_by_name"], MARKER_LABEL[kind]]
                           for m in chosen],
            "xaxis": axes[0], "yaxis": strip,
            "marker": {"symbol": style["symbol"], "size": 12, "color": INK,
                       "line": {"color": "#ffffff", "width": 1}},
            "legendgroup": kind, "showlegend": first,
            "hovertemplate": "<b>%{customdata[2]}</b><br>%{customdata[1]} preempted "
                             "%{customdata[0]}<br>%{x}<extra></extra>",
            "meta": {"markers": kind, "share": row["quota_share"],
                     "unit": row["capacity_unit"], "y": MARKER_Y, "series": key},
        })
    return traces


STOPPING_Y = 0.62
STOPPING_COLOUR = "#D55E00"


def stopping_points(stops: Iterable[Mapping[str, Any]]) -> tuple[list[Any], list[Any],
                                                                   list[Any]]:
    """x, y and customdata of grace periods drawn as separate segments (None between)."""
    xs: list[Any] = []
    ys: list[Any] = []
    custom: list[Any] = []
    for stop in sorted(stops, key=lambda s: parse_time(s["since"])):
        until = iso(stop["until"])
        hover = [stop["job_name"], stop["preempted_by_name"], until]
        xs += [iso(stop["since"]), until, None]
        ys += [STOPPING_Y, STOPPING_Y, None]
        custom += [hover, hover, None]
    return xs, ys, custom


def _stopping_trace(
    key: str, stops: Sequence[Mapping[str, Any]], axes: tuple[str, str], rows: int,
    first: bool,
) -> Trace:
    """The victims of this row still being stopped (SIGTERM sent, grace until SIGKILL)."""
    x, y, custom = stopping_points(stops)
    return {
        "type": "scatter", "mode": "lines", "name": "stopping (grace period)",
        "x": x, "y": y, "customdata": custom, "connectgaps": False,
        "xaxis": axes[0], "yaxis": _strip_axis(int(axes[1][1:] or 1), rows),
        "line": {"color": STOPPING_COLOUR, "width": 7},
        "legendgroup": "stopping", "showlegend": first,
        "hovertemplate": "<b>stopping</b>: %{customdata[0]} (SIGTERM sent for "
                         "%{customdata[1]})<br>grace ends %{customdata[2]}<extra></extra>",
        "meta": {"stopping": True, "series": key, "times": True},
    }


def _strip_axis(index: int, rows: int) -> str:
    """The hidden 0..1 axis laid over row `index`, where markers sit at a fixed height."""
    return f"y{rows + index}"


def _row_domain(index: int, rows: int) -> tuple[float, float]:
    gap = 0.12 if rows > 1 else 0.0
    height = (1 - gap * (rows - 1)) / rows
    top = 1 - (index - 1) * (height + gap)
    return round(max(0.0, top - height), 6), round(min(1.0, top), 6)


def _row_annotations(
    key: str, row: Mapping[str, Any], index: int, rows: int, *, empty: bool
) -> list[dict[str, Any]]:
    low, high = _row_domain(index, rows)
    notes = [{
        "text": f"<b>{row['quota_share']}</b> · {row['capacity_unit']}",
        "xref": "paper", "yref": "paper", "x": 0, "y": high, "xanchor": "left",
        "yanchor": "bottom", "showarrow": False, "font": {"size": 13},
    }]
    if empty:
        notes.append({
            "name": f"empty:{key}",
            "text": f"No usage recorded yet: jobs submitted to {row['quota_share']} show here.",
            "xref": "paper", "yref": "paper", "x": 0.5, "y": (low + high) / 2,
            "showarrow": False, "font": {"color": "#555555"},
        })
    return notes


def _timeline_layout(
    tops: Sequence[int], annotations: list[dict[str, Any]], start: Any, now: Any,
    window_seconds: int,
) -> dict[str, Any]:
    """`tops`: the highest value each row reaches (its limit or its stacked usage)."""
    count = max(1, len(tops))
    layout: dict[str, Any] = {
        "height": 150 + 170 * count,
        "margin": {"l": 44, "r": 12, "t": 28, "b": 104},
        "hovermode": "closest",
        "showlegend": bool(tops),
        # Below the time axis, so that it never covers a row's title on a narrow screen.
        "legend": {"orientation": "h", "x": 0, "y": 0, "yref": "container",
                   "yanchor": "bottom", "font": {"size": 11}},
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "#ffffff",
        "font": {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif"},
        "uirevision": "timeline",
        "xaxis": {"type": "date", "range": [iso(start), iso(now)], "showgrid": True,
                  "gridcolor": "#eeeeee", "anchor": f"y{count}" if count > 1 else "y"},
        "annotations": annotations,
        "meta": {"time_axes": ["xaxis"], "window_seconds": window_seconds,
                 "min_window_seconds": MIN_WINDOW_SECONDS, "lead_seconds": LEAD_SECONDS,
                 "follow_now": True},
    }
    for index, top in enumerate(tops, start=1):
        name = "yaxis" if index == 1 else f"yaxis{index}"
        layout[name] = {
            "domain": list(_row_domain(index, count)), "anchor": "x", "rangemode": "tozero",
            "tick0": 0, "dtick": max(1, math.ceil(top / 5)), "gridcolor": "#eeeeee",
            "fixedrange": True,
            "title": {"text": "instances", "font": {"size": 11}},
        }
        layout[f"yaxis{count + index}"] = {
            "overlaying": "y" if index == 1 else f"y{index}", "anchor": "x",
            "range": [0, 1], "visible": False, "fixedrange": True,
        }
    return layout
