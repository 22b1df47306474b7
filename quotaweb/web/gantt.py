"""The fleet page's Gantt: one row per instance, one bar per job or warm pool on it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..series import Moment, iso, parse_time
from .figures import (
    CONFIG,
    INK,
    LEAD_SECONDS,
    MIN_WINDOW_SECONDS,
    OKABE_ITO,
    STOPPING_COLOUR,
    WINDOW_SECONDS,
    Bar,
    Figure,
    Trace,
    earliest_of,
    tint,
    visible_start,
)


def instance_label(unit: str, number: int) -> str:
    return f"{unit} #{number}"


def fleet_rows(units: Sequence[Mapping[str, Any]], bars: Iterable[Mapping[str, Any]]) -> list[str]:
    """One row per instance number per unit: 0..C−1, plus numbers that bars used beyond
    the present capacity (it shrank); units by name, numbers ascending."""
    numbers: dict[str, set[int]] = {unit["name"]: set(range(int(unit["max_capacity"])))
                                    for unit in units}
    for bar in bars:
        numbers.setdefault(bar["capacity_unit"], set()).add(int(bar["instance"]))
    return [instance_label(unit, number)
            for unit in sorted(numbers) for number in sorted(numbers[unit])]


def fleet_figure(
    units: Sequence[Mapping[str, Any]],
    bars: Sequence[Mapping[str, Any]],
    *,
    colours: Mapping[str, str],
    now: Moment,
    window_seconds: int = WINDOW_SECONDS,
    fixed_start: Moment | None = None,
    follow_now: bool = True,
) -> Figure:
    """A Gantt of instances over time (`fixed_start` and `follow_now` as for timelines):
    one row per instance, a bar per attempt on it (coloured by share, hatched when the
    attempt borrowed) and per warm-pool period (dotted, paler), and a thin bar over the
    grace period of a preempted victim still being stopped (SIGTERM sent, SIGKILL at its
    end).  Bars: {capacity_unit, instance,
    quota_share, kind "run"|"warm"|"stopping", start, end (None: still open), job_id,
    job_name, attempt, outcome, borrowed_instances, instance_count, warm_start,
    preempted_by_name (stopping)}."""
    moment = parse_time(now)
    labels = fleet_rows(units, bars)
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for bar in bars:
        groups[bar["quota_share"], bar["kind"]].append(bar)
    # Stopping victims last: drawn over the bar of the preemptor that waits for them.
    shares = sorted({share for share, _ in groups})
    order = [(share, kind) for share in shares for kind in ("run", "warm")]
    order += [(share, "stopping") for share in shares]
    data = [_bar_trace(share, kind, groups[share, kind], colours, moment)
            for share, kind in order if groups.get((share, kind))]
    earliest = earliest_of(b["start"] for b in bars)
    start = visible_start(moment, window_seconds, earliest)
    if fixed_start is not None:
        start, earliest = parse_time(fixed_start), None
    annotations = [] if bars else [{
        "text": "No instance was held in this period: dispatched jobs appear here.",
        "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5, "showarrow": False,
        "font": {"color": "#555555"},
    }]
    layout = {
        "height": max(260, 110 + 30 * len(labels)),
        "margin": {"l": 130, "r": 12, "t": 40, "b": 36},
        "barmode": "overlay", "bargap": 0.3, "hovermode": "closest",
        "uniformtext": {"mode": "hide", "minsize": 9},
        "hoverlabel": {"align": "left", "namelength": -1},
        "legend": {"orientation": "h", "x": 0, "y": 1, "yanchor": "bottom"},
        "paper_bgcolor": "rgba(0,0,0,0)", "plot_bgcolor": "#ffffff",
        "font": {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif"},
        "uirevision": "fleet",
        "xaxis": {"type": "date", "range": [iso(start), iso(moment)], "gridcolor": "#eeeeee"},
        "yaxis": {"type": "category", "categoryorder": "array", "categoryarray": labels,
                  "range": [len(labels) - 0.5, -0.5], "fixedrange": True,
                  "tickfont": {"size": 11}},
        "annotations": annotations,
        "meta": {"time_axes": ["xaxis"], "window_seconds": window_seconds,
                 "min_window_seconds": MIN_WINDOW_SECONDS, "lead_seconds": LEAD_SECONDS,
                 "earliest": iso(earliest) if earliest else None,
                 "follow_now": follow_now},
    }
    return {"data": data, "layout": layout, "config": CONFIG}


def merge_bars(bars: Iterable[Mapping[str, Any]], tolerance_seconds: float) -> list[Bar]:
    """Bars on one instance, of one share and kind, that follow each other within
    `tolerance_seconds` drawn as one (a long range's downsampling): the merged bar spans
    them all, stays open if the last is open, borrowed if any borrowed, and names how
    many jobs it holds ("3 jobs") when they are several."""
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = defaultdict(list)
    for bar in bars:
        groups[bar["capacity_unit"], int(bar["instance"]), bar["quota_share"],
               bar["kind"]].append(bar)
    merged: list[Bar] = []
    for group in groups.values():
        group.sort(key=lambda b: parse_time(b["start"]))
        current: Bar | None = None
        for bar in group:
            if current is not None and current["end"] is not None and (
                    parse_time(bar["start"]) - parse_time(current["end"])
            ).total_seconds() <= tolerance_seconds:
                _absorb(current, bar)
                continue
            current = {**bar, "jobs": {bar.get("job_id")}}
            merged.append(current)
    for bar in merged:
        jobs = bar.pop("jobs")
        if len(jobs) > 1:
            bar["job_name"] = f"{len(jobs)} jobs"
    return merged


def _absorb(current: Bar, bar: Mapping[str, Any]) -> None:
    ends = [current["end"], bar.get("end")]
    current["end"] = None if None in ends else max(ends, key=parse_time)
    current["jobs"].add(bar.get("job_id"))
    current["borrowed_instances"] = max(current.get("borrowed_instances") or 0,
                                        bar.get("borrowed_instances") or 0)
    current["outcome"] = bar.get("outcome")


def _bar_trace(
    share: str, kind: str, bars: Sequence[Mapping[str, Any]], colours: Mapping[str, str],
    now: Any,
) -> Trace:
    ordered = sorted(bars, key=lambda b: (parse_time(b["start"]), b["capacity_unit"],
                                          int(b["instance"]), b.get("job_id", 0)))
    colour = colours.get(share, OKABE_ITO[0])
    ends = [parse_time(b["end"]) if b.get("end") else now for b in ordered]
    starts = [parse_time(b["start"]) for b in ordered]
    warm = kind == "warm"
    names = {"warm": f"{share} warm pool", "stopping": f"{share} stopping (grace)"}
    extra: dict[str, Any] = {}
    if kind == "run":
        # The job's name inside its bar, where it fits (layout.uniformtext hides the rest).
        extra = {"text": [str(b.get("job_name", "")) for b in ordered],
                 "textposition": "inside", "insidetextanchor": "start",
                 "textfont": {"size": 11, "color": INK}, "constraintext": "inside",
                 "textangle": 0}
    if kind == "stopping":
        extra = {"width": [0.28] * len(ordered),
                 "marker": {"color": tint(STOPPING_COLOUR, 0.85),
                            "line": {"color": STOPPING_COLOUR, "width": 1},
                            "pattern": {"shape": "x", "fillmode": "overlay",
                                        "fgcolor": "#ffffff", "fgopacity": 0.7,
                                        "solidity": 0.3}}}
    return {
        "type": "bar", "orientation": "h", "name": names.get(kind, share),
        "legendgroup": share,
        "base": [iso(s) for s in starts],
        "x": [max(0.0, (e - s).total_seconds() * 1000) for s, e in zip(starts, ends,
                                                                       strict=True)],
        "y": [instance_label(b["capacity_unit"], int(b["instance"])) for b in ordered],
        "marker": {
            "color": tint(colour, 0.35 if warm else 0.9),
            "line": {"color": colour, "width": 1},
            "pattern": {"shape": ["." if warm else ("/" if b.get("borrowed_instances") else "")
                                  for b in ordered], "fillmode": "overlay",
                        "fgcolor": INK, "fgopacity": 0.55, "solidity": 0.3},
        },
        "customdata": [_bar_hover(b, e) for b, e in zip(ordered, ends, strict=True)],
        # The instance in the label itself, not in a box beside it: a narrower label
        # keeps inside the plot area on a phone (static/quotaweb/live.js).
        "hovertemplate": "<b>%{customdata[0]}</b> (%{customdata[1]})<br>%{customdata[2]}"
                         "<br>%{customdata[3]} · %{y}<extra></extra>",
        "meta": {"time_base": True, "open": [[index, int(s.timestamp() * 1000)]
                                             for index, (b, s) in enumerate(zip(ordered,
                                                                                starts,
                                                                                strict=True))
                                             if not b.get("end")]},
        **extra,
    }


def _bar_hover(bar: Mapping[str, Any], end: Any) -> list[str]:
    if bar["kind"] == "stopping":
        return [str(bar.get("job_name", "")), bar["quota_share"],
                f"stopping: SIGTERM sent for {bar.get('preempted_by_name', '?')}",
                f"grace ends {iso(end)}, then SIGKILL"]
    if bar["kind"] == "warm":
        what = "warm pool, Available"
    else:
        what = f"attempt {bar.get('attempt', '?')}"
        if bar.get("warm_start"):
            what += ", warm start"
        if bar.get("borrowed_instances"):
            what += (f", borrowed {bar['borrowed_instances']} of "
                     f"{bar.get('instance_count', '?')} instances")
    state = bar.get("outcome") or ("open" if not bar.get("end") else "ended")
    return [str(bar.get("job_name", "")), bar["quota_share"], what, state]
