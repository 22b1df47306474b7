"""The usage report's chart, a pure function of the report's rows (services.reports):
instance-hours per share and unit, own, borrowed, lent and warm side by side, drawn with
the timelines' encodings (solid own, hatched borrowed, grey dotted lent, pale dotted warm)
in each share's colour."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .figures import CONFIG, LENT_GREY, OKABE_ITO, tint

BARS = (
    ("own_instance_hours", "own", None, 0.85),
    ("borrowed_instance_hours", "borrowed", "/", 0.35),
    ("lent_instance_hours", "lent to others", ".", 0.18),
    ("warm_pool_billable_instance_hours", "warm pools (billable)", ".", 0.35),
)


def report_figure(
    rows: Sequence[Mapping[str, Any]], *, colours: Mapping[str, str]
) -> dict[str, Any]:
    """A grouped bar chart, one group per (share, unit) row."""
    labels = [f"{row['quota_share']} · {row['capacity_unit']}" for row in rows]
    share_colour = [colours.get(row["quota_share"], OKABE_ITO[0]) for row in rows]
    data = []
    for column, name, shape, alpha in BARS:
        lent = column.startswith("lent")
        data.append({
            "type": "bar", "name": name, "x": labels, "y": [row[column] for row in rows],
            "marker": {
                "color": [tint(LENT_GREY if lent else c, alpha) for c in share_colour],
                "line": {"color": [LENT_GREY if lent else c for c in share_colour],
                         "width": 1},
                "pattern": {"shape": shape or "", "fgcolor": "#333333", "fgopacity": 0.5,
                            "solidity": 0.3, "fillmode": "overlay"},
            },
            "hovertemplate": f"%{{y:.2f}} instance-hours {name}<extra>%{{x}}</extra>",
            "meta": {"column": column},
        })
    layout = {
        "height": 360, "barmode": "group", "bargap": 0.25,
        "margin": {"l": 56, "r": 12, "t": 16, "b": 60},
        "legend": {"orientation": "h", "x": 0, "y": -0.2},
        "yaxis": {"title": {"text": "instance-hours"}, "rangemode": "tozero",
                  "gridcolor": "#eeeeee"},
        "xaxis": {"type": "category"},
        "paper_bgcolor": "rgba(0,0,0,0)", "plot_bgcolor": "#ffffff",
        "font": {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif"},
        "annotations": [] if rows else [{
            "text": "Nothing was used in this period.", "xref": "paper", "yref": "paper",
            "x": 0.5, "y": 0.5, "showarrow": False, "font": {"color": "#555555"}}],
        "meta": {"follow_now": False},
    }
    return {"data": data, "layout": layout, "config": CONFIG}
